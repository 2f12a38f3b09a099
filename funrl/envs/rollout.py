"""``rollout``: the pure, time-major trajectory collector on-policy agents call.

PureJaxRL's ``_env_step`` inside ``jax.lax.scan``, in torch: step ``t`` splits ``fold_in(key, t)``
into a policy key and an environment key (all steps' keys are drawn before the loop), asks
``policy_fn(key, obs)`` for an action (and any extras: log-probabilities, values), steps the
environment (auto-reset) and records the transition. The loop goes through
:func:`funrl.control.scan`, so it runs as a Python loop in eager mode and as ONE graph (the scan
higher-order op) under ``torch.compile(fullgraph=True)``; both give the same numbers (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from funrl import control, random

__all__ = ["Trajectory", "RolloutState", "rollout"]


class RolloutState(NamedTuple):
    """What carries over from one rollout to the next: the current observation and env state."""

    obs: torch.Tensor
    env_state: Any


class Trajectory(NamedTuple):
    """Time-major ``[T, ...]`` transitions.

    ``obs[t]`` is what the policy saw, ``action[t]`` what it did; ``final_obs[t]`` is the
    observation reached before any auto-reset (bootstrap truncated episodes from it);
    ``extras`` is the policy's second output, ``info`` the environment's info without
    ``final_obs``.
    """

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    extras: Any
    info: dict[str, Any]


PolicyFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, Any]]


def rollout(
    env: Any,
    env_params: Any,
    policy_fn: PolicyFn,
    key: torch.Tensor,
    state: RolloutState | tuple[torch.Tensor, Any],
    num_steps: int,
) -> tuple[RolloutState, Trajectory]:
    """Run ``policy_fn`` in ``env`` for ``num_steps`` steps.

    Args:
        env: an environment (single, or batched by ``funrl.envs.vmap``).
        env_params: its params (``None`` for the defaults).
        policy_fn: ``policy_fn(key, obs) -> (action, extras)``; ``extras`` is any pytree of
            tensors (``{}`` for none), stacked over time in the trajectory.
        key: a PRNG key; step ``t`` uses keys derived from ``fold_in(key, t)``.
        state: ``(obs, env_state)`` as returned by ``env.reset`` or by a previous rollout.
        num_steps: number of steps ``T``.

    Returns:
        ``(RolloutState(obs, env_state) after the last step, Trajectory with [T, ...] leaves)``.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps: expected a positive int, got {num_steps!r}")
    if not isinstance(state, tuple) or len(state) != 2:
        raise TypeError(
            f"state: expected the (obs, env_state) pair that env.reset returns, got {type(state).__name__}"
        )
    random._check_key(key)
    env_params = env.default_params if env_params is None else env_params

    # Every step's keys are drawn before the loop, in one vectorised call: inside a compiled loop
    # each Threefry call costs a kernel and tens of small buffers per iteration (host work that
    # dwarfs the arithmetic on a few envs), outside it the draw for all T steps is one kernel.
    # The keys are the same ``split(fold_in(key, t))`` as a per-step draw.
    step_keys = torch.func.vmap(lambda t: random.split(random.fold_in(key, t)))(
        torch.arange(num_steps, device=key.device)
    )

    def one_step(carry: RolloutState, keys: torch.Tensor) -> tuple[RolloutState, Trajectory]:
        key_policy, key_env = keys
        action, extras = policy_fn(key_policy, carry.obs)
        obs, env_state, reward, terminated, truncated, info = env.step(
            key_env, carry.env_state, action, env_params
        )
        info = dict(info)
        final_obs = info.pop("final_obs")
        transition = Trajectory(carry.obs, action, reward, terminated, truncated, final_obs, extras, info)
        return RolloutState(obs, env_state), transition

    obs, env_state = state
    return control.scan(one_step, RolloutState(obs, env_state), step_keys)
