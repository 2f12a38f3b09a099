"""Rollout helpers shared by the env test files (imported as ``import env_rollouts``)."""

from __future__ import annotations

import torch

from funrl import random
from funrl import tree as ftree
from funrl.envs import make


def random_rollout(env_id: str, seed: int, steps: int, **kwargs) -> list[tuple]:
    """``[reset_out, step_out_1, ...]`` of ``env_id`` under uniformly random actions, all keys from
    ``seed`` (the reset takes ``fold_in(key, 0)``, step ``t`` splits ``fold_in(key, t + 1)``)."""
    env, params = make(env_id, **kwargs)
    key = random.key(seed)
    outs = [env.reset(random.fold_in(key, 0), params)]
    state = outs[0][1]
    for t in range(steps):
        k_act, k_step = random.split(random.fold_in(key, t + 1))
        out = env.step(k_step, state, env.action_space(params).sample(k_act), params)
        state = out[1]
        outs.append(out)
    return outs


def vmapped_reset_equals_loop(env, params, keys: torch.Tensor) -> tuple[torch.Tensor, object, list]:
    """Assert ``vmap(env.reset)`` over ``keys`` equals resetting one by one; return the batched
    ``(obs, state)`` and the per-env states of the loop."""
    obs, state = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    loop = [env.reset(keys[i], params) for i in range(keys.shape[0])]
    assert ftree.tree_equal((obs, state), ftree.stack(loop))
    return obs, state, [s for _, s in loop]
