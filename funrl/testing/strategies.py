"""Hypothesis strategies for RL data: keys, trajectories, transitions, params, env states, ranges.

Every strategy draws plain Python values first (integers, floats, booleans) and builds tensors
from them, so hypothesis shrinks a failing case to few steps, one environment and round numbers.

- :func:`keys`: ``funrl.random`` keys from drawn seeds;
- :func:`trajectories`: time-major ``[T, B]`` rollouts for value estimators (:class:`Rollout`):
  episodes end at any step and several times per column, a time limit truncates them, the two
  flags are never set together, and ``next_values`` is what a rollout with auto-reset gives;
- :func:`q_trajectories`: the same windows with ``next_q_values[T, B, A]`` (:class:`QRollout`);
- :func:`transitions` / :func:`transition_batches`: items for replay buffers;
- :func:`params`: a params pytree for a given module, from a drawn key;
- :func:`env_states`: ``(obs, state)`` of any environment after a reset and random steps;
- :func:`gammas`, :func:`lambdas`, :func:`clip_epsilons`, :func:`learning_rates`: ranges of
  hyper-parameters, ends included where the algorithm allows them.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch import nn

from funrl import envs, nets
from funrl import random as frandom

__all__ = [
    "Rollout",
    "QRollout",
    "keys",
    "gammas",
    "lambdas",
    "clip_epsilons",
    "learning_rates",
    "trajectories",
    "q_trajectories",
    "transitions",
    "transition_batches",
    "params",
    "env_states",
]


class Rollout(NamedTuple):
    """A time-major rollout window, every field ``[T, B]``: what ``funrl.losses.gae`` takes.

    rewards:     ``r_t``.
    values:      ``V(s_t)``.
    next_values: ``V(s'_t)``: ``values[t + 1]`` inside an episode, the value of the episode's last
                 observation (``info["final_obs"]``) where it ended, and ``V(s_T)`` at the window's end.
    terminated:  bool, ``s'_t`` is terminal.
    truncated:   bool, the time limit ended the episode at ``t`` (never together with terminated).
    """

    rewards: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor


class QRollout(NamedTuple):
    """A time-major window for Q-learning targets: what ``funrl.losses.n_step_q_targets`` takes.

    rewards:       ``[T, B]``.
    next_q_values: ``[T, B, A]`` target-network values at ``s'_t`` (of ``final_obs`` where the
                   episode ended).
    terminated, truncated: bool ``[T, B]``, as in :class:`Rollout`.
    """

    rewards: torch.Tensor
    next_q_values: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor


def keys() -> st.SearchStrategy[torch.Tensor]:
    """``funrl.random.key(seed)`` for a drawn 32-bit seed."""
    return st.integers(0, 2**32 - 1).map(frandom.key)


def gammas(min_value: float = 0.0, max_value: float = 1.0) -> st.SearchStrategy[float]:
    """Discounts ``γ`` in ``[min_value, max_value]`` (both ends included)."""
    return st.floats(min_value, max_value)


def lambdas(min_value: float = 0.0, max_value: float = 1.0) -> st.SearchStrategy[float]:
    """Trace decays ``λ`` in ``[min_value, max_value]`` (both ends included)."""
    return st.floats(min_value, max_value)


def clip_epsilons(min_value: float = 0.05, max_value: float = 0.5) -> st.SearchStrategy[float]:
    """PPO's clip ``ε`` in ``[min_value, max_value]``."""
    return st.floats(min_value, max_value)


def learning_rates(min_value: float = 1e-5, max_value: float = 1e-1) -> st.SearchStrategy[float]:
    """Learning rates, log-uniform in ``[min_value, max_value]``."""
    return st.floats(math.log(min_value), math.log(max_value)).map(math.exp)


@st.composite
def _column_flags(draw: st.DrawFn, steps: int) -> tuple[list[bool], list[bool]]:
    """One environment's ``(terminated, truncated)`` over ``steps`` steps of a rollout.

    The environment has a drawn time limit and is a drawn number of steps into its first episode;
    each step may terminate; a step that reaches the limit without terminating is truncated, and
    either ends the episode (the episode clock restarts).
    """
    time_limit = draw(st.integers(1, steps + 2))
    episode_time = draw(st.integers(0, time_limit - 1))
    terminated = draw(st.lists(st.booleans(), min_size=steps, max_size=steps))
    truncated = []
    for ends in terminated:
        episode_time += 1
        truncated.append(episode_time >= time_limit and not ends)
        if ends or truncated[-1]:
            episode_time = 0
    return terminated, truncated


def _flags(draw: st.DrawFn, steps: int, num_envs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Drawn ``(terminated, truncated)`` of ``num_envs`` environments, two bool tensors ``[T, B]``."""
    columns = [draw(_column_flags(steps)) for _ in range(num_envs)]
    terminated = torch.tensor([c[0] for c in columns], dtype=torch.bool).T.contiguous()
    truncated = torch.tensor([c[1] for c in columns], dtype=torch.bool).T.contiguous()
    return terminated, truncated


def _tensor(draw: st.DrawFn, shape: tuple[int, ...], bound: float, dtype: torch.dtype) -> torch.Tensor:
    """A drawn tensor of ``shape``, floats in ``[-bound, bound]``.

    Drawn as a numpy array: hypothesis then draws one background value and a few elements
    apart from it, so a failing case has few choices to shrink (and shrinks fast).
    """
    values = draw(arrays(np.float64, shape, elements=st.floats(-bound, bound)))
    return torch.from_numpy(values).to(dtype)


@st.composite
def _rollouts(
    draw: st.DrawFn, steps: tuple[int, int], envs: tuple[int, int], dtype: torch.dtype, bound: float
) -> Rollout:
    num_steps = draw(st.integers(*steps))
    num_envs = draw(st.integers(*envs))
    terminated, truncated = _flags(draw, num_steps, num_envs)
    rewards = _tensor(draw, (num_steps, num_envs), bound, dtype)
    values = _tensor(draw, (num_steps + 1, num_envs), bound, dtype)
    final_values = _tensor(draw, (num_steps, num_envs), bound, dtype)
    next_values = torch.where(terminated | truncated, final_values, values[1:])
    return Rollout(rewards, values[:-1], next_values, terminated, truncated)


def trajectories(
    min_steps: int = 1,
    max_steps: int = 8,
    min_envs: int = 1,
    max_envs: int = 3,
    dtype: torch.dtype = torch.float64,
    bound: float = 10.0,
) -> st.SearchStrategy[Rollout]:
    """Time-major rollouts ``[T, B]``, ``min_steps <= T <= max_steps``, ``min_envs <= B <= max_envs``.

    Rewards and values are floats in ``[-bound, bound]``. ``next_values`` is consistent with a
    rollout: ``values[t + 1]`` where the episode goes on, the drawn value of the final observation
    where it ended (terminated or truncated) and a drawn ``V(s_T)`` at the window's end.
    """
    return _rollouts((min_steps, max_steps), (min_envs, max_envs), dtype, bound)


@st.composite
def _q_rollouts(
    draw: st.DrawFn,
    steps: tuple[int, int],
    envs: tuple[int, int],
    actions: tuple[int, int],
    dtype: torch.dtype,
    bound: float,
) -> QRollout:
    num_steps = draw(st.integers(*steps))
    num_envs = draw(st.integers(*envs))
    num_actions = draw(st.integers(*actions))
    terminated, truncated = _flags(draw, num_steps, num_envs)
    rewards = _tensor(draw, (num_steps, num_envs), bound, dtype)
    next_q_values = _tensor(draw, (num_steps, num_envs, num_actions), bound, dtype)
    return QRollout(rewards, next_q_values, terminated, truncated)


def q_trajectories(
    min_steps: int = 1,
    max_steps: int = 6,
    min_envs: int = 1,
    max_envs: int = 3,
    min_actions: int = 1,
    max_actions: int = 4,
    dtype: torch.dtype = torch.float64,
    bound: float = 10.0,
) -> st.SearchStrategy[QRollout]:
    """Time-major windows for Q-learning targets (:class:`QRollout`), flags as :func:`trajectories`,
    ``min_actions <= A <= max_actions`` actions."""
    return _q_rollouts((min_steps, max_steps), (min_envs, max_envs), (min_actions, max_actions), dtype, bound)


@st.composite
def _transitions(
    draw: st.DrawFn, obs_shape: tuple[int, ...], num_actions: int, bound: float
) -> dict[str, torch.Tensor]:
    ending = draw(st.sampled_from(["continues", "terminated", "truncated"]))
    return {
        "obs": _tensor(draw, obs_shape, bound, torch.float32),
        "action": torch.tensor(draw(st.integers(0, num_actions - 1)), dtype=torch.int64),
        "reward": _tensor(draw, (), bound, torch.float32),
        "next_obs": _tensor(draw, obs_shape, bound, torch.float32),
        "terminated": torch.tensor(ending == "terminated"),
        "truncated": torch.tensor(ending == "truncated"),
    }


def transitions(
    obs_shape: tuple[int, ...] = (3,), num_actions: int = 4, bound: float = 10.0
) -> st.SearchStrategy[dict[str, torch.Tensor]]:
    """One transition, the item a replay buffer stores (leaves without a batch dim):

    ``obs``, ``next_obs`` float32 ``obs_shape``; ``action`` int64 in ``[0, num_actions)``;
    ``reward`` float32; ``terminated``, ``truncated`` bool, never both.
    """
    return _transitions(tuple(obs_shape), num_actions, bound)


def _stack(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: torch.stack([item[name] for item in items]) for name in items[0]}


def transition_batches(
    min_size: int = 1, max_size: int = 8, obs_shape: tuple[int, ...] = (3,), num_actions: int = 4
) -> st.SearchStrategy[dict[str, torch.Tensor]]:
    """A batch of :func:`transitions` for ``buffer.add``: leaves ``[B, ...]``, ``min_size <= B <= max_size``."""
    return st.lists(transitions(obs_shape, num_actions), min_size=min_size, max_size=max_size).map(_stack)


def params(module: nn.Module, dtype: torch.dtype | None = None) -> st.SearchStrategy[dict[str, torch.Tensor]]:
    """``funrl.nets.init(module, key)`` for a drawn key: the params pytree of ``module``."""
    return keys().map(lambda key: nets.init(module, key, dtype=dtype))


def env_states(env: Any, env_params: Any = None, max_steps: int = 20) -> st.SearchStrategy[tuple[Any, Any]]:
    """``(obs, state)`` of ``env`` after ``reset`` and up to ``max_steps`` random steps.

    ``env`` is an environment or a registered id (``funrl.envs.make(env)``); ``env_params``
    defaults to the env's own. The reset key, the number of steps and every action come from one
    drawn key; episodes that end on the way auto-reset, as in training.
    """
    if isinstance(env, str):
        env, made_params = envs.make(env)
        env_params = made_params if env_params is None else env_params
    env_params = env.default_params if env_params is None else env_params
    action_space = env.action_space(env_params)

    def play(key: torch.Tensor, num_steps: int) -> tuple[Any, Any]:
        obs, state = env.reset(frandom.fold_in(key, 0), env_params)
        for t in range(1, num_steps + 1):
            step_key = frandom.fold_in(key, t)
            action = action_space.sample(frandom.fold_in(step_key, 1))
            obs, state, *_ = env.step(step_key, state, action, env_params)
        return obs, state

    return st.builds(play, keys(), st.integers(0, max_steps))
