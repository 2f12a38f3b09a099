"""``rollout``: the pure, time-major trajectory collector on-policy agents call.

PureJaxRL's ``_env_step`` inside ``jax.lax.scan``, in torch: step ``t`` takes a policy key and an
environment key, rows ``2t`` and ``2t + 1`` of ``split(key, 2 * T)``, asks ``policy_fn`` for an
action (and any extras: log-probabilities, values), steps the environment (auto-reset) and records
the transition. The loop goes through :func:`funrl.control.scan`, so it runs as a Python loop in
eager mode and as ONE graph (the scan higher-order op) under ``torch.compile(fullgraph=True)``;
both give the same numbers (tested).

Everything random is drawn before the loop, for all ``T`` steps in one batched call: the
environment's ``draw_step`` (its step keys and auto-reset states) and the policy's
``policy_draw`` (e.g. a distribution's ``noise``). Each draw is a few hundred integer ops
whatever its size, so one call instead of ``T`` is most of an eager rollout's time; compiled, the
loop body keeps only the transition. The values are those of drawing inside the loop (tested).
The step keys come from one ``split`` for the same reason, and ``2t``, ``2t + 1`` do not depend on
``T``: a shorter rollout with the same key takes the same first steps.
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


PolicyFn = Callable[[Any, torch.Tensor], tuple[torch.Tensor, Any]]


def _the_key(key: torch.Tensor) -> torch.Tensor:
    return key


def rollout(
    env: Any,
    env_params: Any,
    policy_fn: PolicyFn,
    key: torch.Tensor,
    state: RolloutState | tuple[torch.Tensor, Any],
    num_steps: int,
    policy_draw: Callable[[torch.Tensor], Any] | None = None,
) -> tuple[RolloutState, Trajectory]:
    """Run ``policy_fn`` in ``env`` for ``num_steps`` steps.

    Args:
        env: an environment (single, or batched by ``funrl.envs.vmap``): anything with
            ``draw_step`` and ``step_with`` (every :class:`~funrl.envs.Environment` and wrapper).
        env_params: its params (``None`` for the defaults).
        policy_fn: ``policy_fn(drawn, obs) -> (action, extras)``; ``drawn`` is the step's policy
            key, or ``policy_draw`` of it; ``extras`` is any pytree of tensors (``{}`` for none),
            stacked over time in the trajectory.
        key: a PRNG key; step ``t`` uses ``split(key, 2 * num_steps)[2t]`` for the policy and
            ``[2t + 1]`` for the environment.
        state: ``(obs, env_state)`` as returned by ``env.reset`` or by a previous rollout.
        num_steps: number of steps ``T``.
        policy_draw: ``policy_draw(key) -> drawn``, the random values ``policy_fn`` needs from its
            step's key (e.g. ``distributions.categorical.noise(key, [num_envs, K])``), drawn for
            all steps before the loop. Default: the key itself.

    Returns:
        ``(RolloutState(obs, env_state) after the last step, Trajectory with [T, ...] leaves)``.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps: expected a positive int, got {num_steps!r}")
    if not isinstance(state, tuple) or len(state) != 2:
        raise TypeError(
            f"state: expected the (obs, env_state) pair that env.reset returns, got {type(state).__name__}"
        )
    missing = [name for name in ("draw_step", "step_with") if not hasattr(env, name)]
    if missing:
        raise TypeError(
            f"env: expected a funrl environment with draw_step and step_with (see "
            f"funrl.envs.Environment), got {type(env).__name__} without {missing}"
        )
    random._check_key(key)
    env_params = env.default_params if env_params is None else env_params
    policy_draw = _the_key if policy_draw is None else policy_draw

    def draws(step_keys: torch.Tensor) -> tuple[Any, Any]:
        key_policy, key_env = step_keys
        return policy_draw(key_policy), env.draw_step(key_env, env_params)

    step_keys = random.split(key, 2 * num_steps).reshape(num_steps, 2, 2)
    step_draws = torch.func.vmap(draws, randomness="error")(step_keys)

    def one_step(carry: RolloutState, drawn: tuple[Any, Any]) -> tuple[RolloutState, Trajectory]:
        policy_drawn, env_drawn = drawn
        action, extras = policy_fn(policy_drawn, carry.obs)
        obs, env_state, reward, terminated, truncated, info = env.step_with(
            env_drawn, carry.env_state, action, env_params
        )
        info = dict(info)
        final_obs = info.pop("final_obs")
        transition = Trajectory(carry.obs, action, reward, terminated, truncated, final_obs, extras, info)
        return RolloutState(obs, env_state), transition

    obs, env_state = state
    return control.scan(one_step, RolloutState(obs, env_state), step_draws)
