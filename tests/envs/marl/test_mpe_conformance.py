"""Per-step conformance of funrl's MPE scenarios with mpe2: from the same state and the same
actions, positions, velocities, messages, observations, rewards and flags agree (200 random
steps per scenario and action kind; tolerances in ``mpe_reference``)."""

from __future__ import annotations

import pytest
import torch
from mpe_reference import make_reference, random_actions, run_conformance, state_from_world, step_both

from funrl import random
from funrl.envs import marl

SCENARIOS = marl.SCENARIOS


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


@pytest.mark.parametrize("x", [0.95, 1.2, 2.5, -3.0])
def test_simple_tag_out_of_screen_penalty_matches_mpe2(x: float) -> None:
    """The good agent's penalty on each side of 0.9 and 1.0 and past its cap of 10 (x > 2.15)."""
    env, params = marl.make("simple_tag")
    reference = make_reference("simple_tag", False)
    reference.reset(seed=0)
    state = state_from_world("simple_tag", reference)
    state = state._replace(pos=state.pos.index_put((torch.tensor(3),), torch.tensor([x, -x / 2])))
    step_both(env, params, "simple_tag", reference, state, random_actions(env, random.key(1)), f"x={x}")


def test_contacts_and_catches_match_mpe2() -> None:
    """Every agent of simple_tag on one spot: contact forces, speed caps and catches all fire."""
    env, params = marl.make("simple_tag")
    reference = make_reference("simple_tag", False)
    reference.reset(seed=0)
    state = state_from_world("simple_tag", reference)
    crowd = torch.tensor([[0.0, 0.0], [0.05, 0.02], [-0.04, 0.06], [0.01, -0.05], [0.3, 0.1], [-0.2, -0.2]])
    state = state._replace(pos=crowd)
    out = step_both(env, params, "simple_tag", reference, state, random_actions(env, random.key(2)), "crowd")
    assert bool((out[2]["adversary"] > 0).all()), "the crowd should catch the good agent"
