"""Per-environment, time-major trajectory storage; samples sub-sequences of fixed length.

Behaviour follows flashbax's trajectory buffer (``flashbax/buffers/trajectory_buffer.py``):
storage leaves are ``[num_envs, max_length, ...]``; ``add`` appends ``[num_envs, T, ...]`` at the
common write head ``count % max_length``; ``sample`` draws windows of ``sequence_length``
consecutive steps of one environment that lie entirely inside the stored data, so a window never
crosses the write head (never joins the newest step to the oldest) and never mixes environments.
Episode boundaries are the caller's: store ``done`` flags in the item and mask with them.
``add`` donates its input state (see :mod:`funrl.buffers._core`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from funrl import random as frandom
from funrl.buffers._core import (
    Buffer,
    Sample,
    advance_count,
    check_batch,
    check_one_buffer,
    check_positive_int,
    check_sample_count,
    init_storage,
    storage_device,
    tree_map,
)

__all__ = ["TrajectoryState", "TrajectoryConfig", "trajectory"]


class TrajectoryState(NamedTuple):
    """State of a trajectory buffer.

    experience:    the item pytree, each leaf ``[num_envs, max_length, *item_shape]``.
    count:         int64 scalar, time steps added per environment so far (write head is
                   ``count % max_length``, the stored steps are ``count - min(count, max_length)
                   .. count - 1`` in time order).
    storage_count: int64 ``[1]`` shared by every state of this storage (stale-state check).
    """

    experience: Any
    count: torch.Tensor
    storage_count: torch.Tensor


@dataclass(frozen=True)
class TrajectoryConfig:
    num_envs: int
    max_length: int
    sequence_length: int
    min_length: int


def check_trajectory_config(config: TrajectoryConfig) -> None:
    check_positive_int(config.num_envs, "num_envs")
    check_positive_int(config.max_length, "max_length")
    check_positive_int(config.sequence_length, "sequence_length")
    check_positive_int(config.min_length, "min_length")
    if config.sequence_length > config.max_length:
        raise ValueError(
            f"sequence_length: expected at most max_length={config.max_length}, got {config.sequence_length}"
        )
    if config.min_length < config.sequence_length:
        raise ValueError(
            f"min_length: expected at least sequence_length={config.sequence_length}, got {config.min_length}"
        )


def init_trajectory(config: TrajectoryConfig, example_item: Any) -> TrajectoryState:
    experience = init_storage(example_item, (config.num_envs, config.max_length))
    zero = torch.zeros((), dtype=torch.int64, device=storage_device(experience))
    return TrajectoryState(experience=experience, count=zero, storage_count=zero.reshape(1).clone())


def write_steps(config: TrajectoryConfig, state: Any, batch: Any, max_steps: int) -> tuple[torch.Tensor, int]:
    """Check and write ``batch`` ``[num_envs, T, ...]`` at the head, in place; returns
    ``(new_count, T)``."""
    check_one_buffer(state, "add")
    (num_envs, steps), leaves, stored = check_batch(batch, state.experience, storage_ndim=2, batch_ndim=2)
    if num_envs != config.num_envs:
        raise ValueError(f"batch: expected leading dim num_envs={config.num_envs}, got {num_envs}")
    if steps > max_steps:
        raise ValueError(
            f"batch: expected at most {max_steps} time steps per add (max_length="
            f"{config.max_length}, sequence_length={config.sequence_length}), got {steps}"
        )
    device = state.count.device
    times = torch.remainder(state.count + torch.arange(steps, device=device), config.max_length)
    envs = torch.arange(num_envs, device=device)
    for store, leaf in zip(stored, leaves, strict=True):
        store.index_put_((envs[:, None], times[None, :]), leaf)
    return advance_count(state, steps), steps


def _add(config: TrajectoryConfig, state: TrajectoryState, batch: Any) -> TrajectoryState:
    new_count, _ = write_steps(config, state, batch, max_steps=config.max_length)
    return state._replace(count=new_count)


def _can_sample(config: TrajectoryConfig, state: Any) -> torch.Tensor:
    return state.count >= config.min_length


def check_can_sample(config: TrajectoryConfig, state: Any, batch_size: int) -> None:
    check_sample_count(state, config.min_length, batch_size, unit="time steps per environment")


def gather_windows(
    config: TrajectoryConfig, experience: Any, envs: torch.Tensor, starts: torch.Tensor
) -> Any:
    """Leaves ``[B, L, ...]``: steps ``starts .. starts + L - 1`` (mod max_length) of ``envs``."""
    offsets = torch.arange(config.sequence_length, device=starts.device)
    times = torch.remainder(starts[:, None] + offsets[None, :], config.max_length)
    return tree_map(lambda x: x[envs[:, None], times], experience)


def _sample(config: TrajectoryConfig, state: TrajectoryState, key: torch.Tensor, batch_size: int) -> Sample:
    check_can_sample(config, state, batch_size)
    filled = torch.clamp(state.count, max=config.max_length)
    num_starts = torch.clamp(filled - config.sequence_length + 1, min=1)
    # One draw over all (env, start) pairs, uniform, split by division: one key derivation
    # instead of three (a third of the compile time and eager cost).
    pair = frandom.randint(key, (batch_size,), 0, config.num_envs * num_starts)
    envs = torch.div(pair, num_starts, rounding_mode="floor")
    # A logical start s in [0, filled - L] counts from the oldest stored step, so the window
    # ends at or before the newest step: it never crosses the write head.
    logical = pair - envs * num_starts
    starts = torch.remainder(state.count - filled + logical, config.max_length)
    items = gather_windows(config, state.experience, envs, starts)
    weights = torch.ones(batch_size, dtype=torch.float32, device=starts.device)
    return Sample(items=items, indices=envs * config.max_length + starts, weights=weights)


def trajectory(num_envs: int, max_length: int, sequence_length: int, min_length: int | None = None) -> Buffer:
    """A trajectory buffer: ``num_envs`` streams of ``max_length`` steps, samples of ``sequence_length``.

    ``init(example_item)`` takes one step's item (no batch or time dim). ``add(state, batch)``
    takes leaves ``[num_envs, T, ...]`` (``T <= max_length``) and appends them to every
    environment's stream at once, in place; it returns the state to use from then on.
    ``sample(state, key, batch_size)`` returns ``Sample(items, indices, weights)`` with items
    ``[batch_size, sequence_length, ...]``, drawn uniformly over (environment, valid start) pairs;
    ``indices = env * max_length + start`` (start: the storage time index of the first step).
    ``can_sample(state)``: at least ``min_length`` (default ``sequence_length``) steps per env.
    """
    config = TrajectoryConfig(
        num_envs=num_envs,
        max_length=max_length,
        sequence_length=sequence_length,
        min_length=sequence_length if min_length is None else min_length,
    )
    check_trajectory_config(config)
    return Buffer(
        init=lambda example_item: init_trajectory(config, example_item),
        add=lambda state, batch: _add(config, state, batch),
        sample=lambda state, key, batch_size: _sample(config, state, key, batch_size),
        can_sample=lambda state: _can_sample(config, state),
    )
