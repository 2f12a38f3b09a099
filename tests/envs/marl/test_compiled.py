"""A compiled batched multi-agent step equals the eager one (one small compile)."""

from __future__ import annotations

import pytest
import torch
from mpe_reference import random_actions

from funrl import control, random
from funrl.envs import marl
from funrl.testing import assert_trees_close


@pytest.mark.slow
def test_compiled_batched_step_equals_eager() -> None:
    """simple_tag (two teams, contacts, speed caps) for 8 envs, on the step that auto-resets, with
    funrl's compile helper (one graph, no breaks)."""
    env, params = marl.make("simple_tag", max_cycles=2)
    batched = marl.vmap(env, 8)
    _, state = batched.reset(random.key(0), params)
    actions = random_actions(env, random.key(1), (8,))
    _, state, *_ = batched.step(random.key(2), state, actions, params)  # the next step ends the episode

    def step(key: torch.Tensor, state: marl.MPEState, actions: dict[str, torch.Tensor]):  # noqa: ANN202
        return batched.step(key, state, actions, params)

    expected = step(random.key(3), state, actions)
    actual = control.compile(step)(random.key(3), state, actions)
    assert bool(expected[4]["agent"].all()), "the compared step should end the episode"
    assert_trees_close(actual, expected, rtol=1e-5, atol=1e-5, name="compiled step")
