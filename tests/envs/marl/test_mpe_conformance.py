"""Per-step conformance of funrl's MPE scenarios with mpe2: from the same state and the same
actions, positions, velocities, messages, observations, rewards and flags agree (200 random
steps per scenario and action kind; tolerances in ``mpe_reference``)."""

from __future__ import annotations

import pytest
from mpe_reference import make_reference, run_conformance

from funrl.envs import marl

SCENARIOS = ["simple_spread"]


@pytest.mark.parametrize("continuous_actions", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("env_id", SCENARIOS)
def test_matches_mpe2_step_by_step(env_id: str, continuous_actions: bool) -> None:
    env, params = marl.make(env_id, continuous_actions=continuous_actions)
    reference = make_reference(env_id, continuous_actions)
    run_conformance(env, params, env_id, reference, steps=200, seed=3)


def test_simple_spread_options_match_mpe2() -> None:
    """Four agents and a different local_ratio change shapes and rewards as in mpe2."""
    env, params = marl.make("simple_spread", N=4, local_ratio=0.2)
    reference = make_reference("simple_spread", False, N=4, local_ratio=0.2)
    assert env.agents == tuple(reference.possible_agents)
    run_conformance(env, params, "simple_spread", reference, steps=30, seed=5)
