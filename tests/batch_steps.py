"""A check shared by the batch-polymorphic env tests: a batched view's ``step_with`` on the whole
batch equals each env's ``step_with`` alone, bit for bit, over several steps."""

from __future__ import annotations

from typing import Any

import torch

from funrl import random
from funrl import tree as ftree


def check_batch_steps_as_each_env_alone(
    env: Any, batched: Any, state: Any, params: Any, key: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """Step ``batched`` (a ``funrl.envs.vmap`` view of ``env``) from ``state`` for ``steps`` steps
    with random actions, asserting at each step that env ``i`` of the batch equals ``env`` stepped
    alone; returns each step's ``returned_episode`` flags ``[num_envs]``."""
    num_envs = batched.num_envs
    returned = []
    for t in range(steps):
        step_key = random.fold_in(key, t)
        draw = batched.draw_step(step_key, params)
        action = torch.stack([env.action_space(params).sample(k) for k in random.split(step_key, num_envs)])
        out = batched.step_with(draw, state, action, params)
        for i in range(num_envs):
            single = env.step_with(ftree.index(draw, i), ftree.index(state, i), action[i], params)
            assert ftree.tree_equal(ftree.index(out, i), single), (t, i)
        state = out[1]
        returned.append(out[-1]["returned_episode"])
    return returned
