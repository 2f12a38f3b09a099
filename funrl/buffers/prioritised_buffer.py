"""Proportional prioritised replay (Schaul, Quan, Antonoglou & Silver, "Prioritized Experience
Replay", ICLR 2016), over flat items or trajectory windows, with a sum-tree held in tensors.

An item with priority ``p`` is stored as ``p ** alpha`` in the sum-tree and drawn with
probability ``P(i) = p_i ** alpha / sum_k p_k ** alpha``; sampling is stratified (one draw from
each of ``batch_size`` equal slices of the total mass, as in the paper's rank/proportional
implementations and flashbax). New items get the largest priority seen so far (initially 1),
so each is likely to be replayed at least once. Importance weights are
``w_i = (N * P(i)) ** -beta`` normalised by the largest weight in the sample, so they lie in
``(0, 1]`` (the paper divides by ``max w`` "for stability"; the batch maximum costs O(batch)).

``add`` donates its input state like every funrl buffer. ``update_priorities`` writes the
sum-tree and the running maximum priority in place too; both are shared storage, so states
before and after it are the same state (nothing to go stale).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from funrl import random as frandom
from funrl.buffers import sum_tree
from funrl.buffers._core import (
    Sample,
    check_one_buffer,
    check_positive_int,
    check_sample_count,
    init_storage,
    storage_device,
)
from funrl.buffers.flat_buffer import gather, write_items
from funrl.buffers.trajectory_buffer import (
    TrajectoryConfig,
    check_can_sample,
    check_trajectory_config,
    gather_windows,
    init_trajectory,
    write_steps,
)
from funrl.control import is_traced

__all__ = ["PrioritisedBuffer", "PrioritisedState", "prioritised", "prioritised_trajectory"]


class PrioritisedBuffer(NamedTuple):
    """``Buffer``'s four functions plus ``update_priorities(state, indices, priorities) -> state``.

    ``sample(state, key, batch_size, beta=None)``: ``beta`` overrides the configured exponent
    (for annealing it towards 1).
    """

    init: Callable[..., Any]
    add: Callable[..., Any]
    sample: Callable[..., Any]
    can_sample: Callable[..., Any]
    update_priorities: Callable[..., Any]


class PrioritisedState(NamedTuple):
    """State of a prioritised buffer.

    experience:    the item pytree, as in ``FlatState`` (leaves ``[capacity, ...]``) or
                   ``TrajectoryState`` (leaves ``[num_envs, max_length, ...]``).
    count:         int64 scalar, items (flat) or time steps per env (trajectory) added so far.
    storage_count: int64 ``[1]`` shared by every state of this storage (stale-state check).
    sum_tree:      float64 ``[2 * P]`` sum-tree of ``priority ** alpha`` (see ``sum_tree``);
                   one leaf per item (flat) or per window start ``env * max_length + t``.
    max_priority:  float64 ``[1]``, the largest priority seen (given to new items); shared.
    """

    experience: Any
    count: torch.Tensor
    storage_count: torch.Tensor
    sum_tree: torch.Tensor
    max_priority: torch.Tensor


@dataclass(frozen=True)
class PrioritisedConfig:
    alpha: float
    beta: float


def _check_exponent(value: float, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}: expected a non-negative float, got {value!r}")


def _importance_weights(
    tree: torch.Tensor, indices: torch.Tensor, num_valid: torch.Tensor, beta: float | torch.Tensor
) -> torch.Tensor:
    """``(N * P(i)) ** -beta / max_batch``; float32 ``[B]``."""
    probs = sum_tree.leaf_values(tree, indices) / sum_tree.total(tree).clamp(
        min=torch.finfo(torch.float64).tiny
    )
    weights = (num_valid.to(torch.float64) * probs).clamp(min=torch.finfo(torch.float64).tiny) ** (-beta)
    return (weights / weights.max()).to(torch.float32)


def _min_max(x: torch.Tensor) -> tuple[float, float]:
    """``x``'s minimum and maximum as Python numbers, read in one transfer."""
    return tuple(torch.stack(torch.aminmax(x)).tolist())


def _check_priorities(indices: torch.Tensor, priorities: torch.Tensor, num_leaves: int) -> None:
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64 or indices.dim() != 1:
        got = f"{indices.dtype} {list(indices.shape)}" if isinstance(indices, torch.Tensor) else type(indices)
        raise TypeError(f"indices: expected an int64 tensor [B] (Sample.indices), got {got}")
    if not isinstance(priorities, torch.Tensor) or not priorities.dtype.is_floating_point:
        got = priorities.dtype if isinstance(priorities, torch.Tensor) else type(priorities).__name__
        raise TypeError(f"priorities: expected a floating tensor [B], got {got}")
    if priorities.shape != indices.shape:
        raise ValueError(
            f"priorities: expected shape {list(indices.shape)} (as indices), got {list(priorities.shape)}"
        )
    if is_traced() or not indices.numel():
        return
    # One reduction per tensor (an eager op costs microseconds): a NaN makes the minimum NaN.
    lowest, highest = _min_max(priorities)
    if not (lowest >= 0 and highest < math.inf):
        raise ValueError("priorities: expected finite non-negative values, got negative, NaN or inf entries")
    lowest, highest = _min_max(indices)
    if lowest < 0 or highest >= num_leaves:
        raise ValueError(f"indices: expected values in [0, {num_leaves}), got some outside")


def _set_priorities(
    state: PrioritisedState,
    indices: torch.Tensor,
    priorities: torch.Tensor,
    valid: torch.Tensor,
    alpha: float,
) -> PrioritisedState:
    """Write ``priorities ** alpha`` where ``valid`` (0 elsewhere) and raise the running max."""
    priorities = priorities.to(torch.float64)
    values = torch.where(valid, priorities**alpha, 0.0)
    sum_tree.update(state.sum_tree, indices, values)
    seen = torch.where(valid, priorities, 0.0)
    if seen.numel():
        state.max_priority.copy_(torch.maximum(state.max_priority, seen.max()))
    return state


def _new_priority_fields(experience: Any, num_leaves: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum-tree and max-priority cell, on the device of the (checked, allocated) storage."""
    device = storage_device(experience)
    return sum_tree.init(num_leaves, device), torch.ones(1, dtype=torch.float64, device=device)


# ---------------------------------------------------------------------------------------- flat


def prioritised(
    capacity: int, alpha: float = 0.6, beta: float = 0.4, min_length: int = 1
) -> PrioritisedBuffer:
    """A proportional prioritised circular buffer of ``capacity`` single items.

    Same ``init`` / ``add`` contract as :func:`~funrl.buffers.flat`. ``sample`` draws
    ``batch_size`` items stratified by priority and returns importance ``weights``;
    ``update_priorities(state, sample.indices, new_priorities)`` (e.g. ``|TD error| + eps``)
    costs ``O(batch * log capacity)``.
    """
    check_positive_int(capacity, "capacity")
    check_positive_int(min_length, "min_length")
    _check_exponent(alpha, "alpha")
    _check_exponent(beta, "beta")
    config = PrioritisedConfig(alpha=float(alpha), beta=float(beta))

    def init(example_item: Any) -> PrioritisedState:
        experience = init_storage(example_item, (capacity,))
        tree, max_priority = _new_priority_fields(experience, capacity)
        zero = torch.zeros((), dtype=torch.int64, device=tree.device)
        return PrioritisedState(experience, zero, zero.reshape(1).clone(), tree, max_priority)

    def add(state: PrioritisedState, batch: Any) -> PrioritisedState:
        new_count, rows = write_items(capacity, state, batch)
        new_values = state.max_priority.expand(rows.shape)
        _set_priorities(state, rows, new_values, torch.ones_like(rows, dtype=torch.bool), config.alpha)
        return state._replace(count=new_count)

    def can_sample(state: PrioritisedState) -> torch.Tensor:
        return state.count >= min_length

    def sample(
        state: PrioritisedState, key: torch.Tensor, batch_size: int, beta: float | torch.Tensor | None = None
    ) -> Sample:
        check_sample_count(state, min_length, batch_size)
        filled = torch.clamp(state.count, min=1, max=capacity)
        uniforms = frandom.uniform(key, (batch_size,), dtype=torch.float64)
        indices = sum_tree.sample_stratified(state.sum_tree, uniforms, filled)
        items = gather(state.experience, indices)
        weights = _importance_weights(state.sum_tree, indices, filled, config.beta if beta is None else beta)
        return Sample(items=items, indices=indices, weights=weights)

    def update_priorities(
        state: PrioritisedState, indices: torch.Tensor, priorities: torch.Tensor
    ) -> PrioritisedState:
        _check_priorities(indices, priorities, capacity)
        check_one_buffer(state, "update_priorities")
        valid = indices < torch.clamp(state.count, max=capacity)
        return _set_priorities(state, indices, priorities, valid, config.alpha)

    return PrioritisedBuffer(init, add, sample, can_sample, update_priorities)


# ---------------------------------------------------------------------------------- trajectory


def prioritised_trajectory(
    num_envs: int,
    max_length: int,
    sequence_length: int,
    alpha: float = 0.6,
    beta: float = 0.4,
    min_length: int | None = None,
) -> PrioritisedBuffer:
    """A prioritised trajectory buffer: windows of ``sequence_length`` steps, drawn by priority.

    Same ``init`` / ``add`` contract as :func:`~funrl.buffers.trajectory`, except that one add
    holds at most ``max_length - sequence_length + 1`` steps. Each window start
    ``env * max_length + t`` carries a priority. Exactly the windows that lie inside the stored
    data and do not cross the write head have a non-zero priority: after every ``add``, the
    windows that became complete get the maximum priority and the ones the new head now cuts get
    0, so an invalid window is never sampled. ``update_priorities`` ignores (leaves at 0)
    indices whose window has become invalid since it was sampled.
    """
    config = TrajectoryConfig(
        num_envs=num_envs,
        max_length=max_length,
        sequence_length=sequence_length,
        min_length=sequence_length if min_length is None else min_length,
    )
    check_trajectory_config(config)
    _check_exponent(alpha, "alpha")
    _check_exponent(beta, "beta")
    pconfig = PrioritisedConfig(alpha=float(alpha), beta=float(beta))
    num_leaves = num_envs * max_length
    max_add = max_length - sequence_length + 1

    def init(example_item: Any) -> PrioritisedState:
        base = init_trajectory(config, example_item)
        tree, max_priority = _new_priority_fields(base.experience, num_leaves)
        return PrioritisedState(base.experience, base.count, base.storage_count, tree, max_priority)

    def valid_logical(logical: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """Window starts (in steps since the first add) inside the stored data, before the head."""
        oldest = torch.clamp(count - max_length, min=0)
        return (logical >= oldest) & (logical <= count - sequence_length)

    def add(state: PrioritisedState, batch: Any) -> PrioritisedState:
        old_count = state.count
        new_count, steps = write_steps(config, state, batch, max_steps=max_add)
        # Windows starting at these steps either became complete or now cross the new head; all
        # T + L - 1 of them are distinct storage slots since T <= max_length - L + 1.
        logical = (
            old_count
            - sequence_length
            + 1
            + torch.arange(steps + sequence_length - 1, device=old_count.device)
        )
        valid = valid_logical(logical, new_count)
        starts = torch.remainder(logical, max_length)
        envs = torch.arange(num_envs, device=starts.device)
        indices = (envs[:, None] * max_length + starts[None, :]).reshape(-1)
        valid = valid.expand(num_envs, -1).reshape(-1)
        _set_priorities(state, indices, state.max_priority.expand(indices.shape), valid, pconfig.alpha)
        return state._replace(count=new_count)

    def can_sample(state: PrioritisedState) -> torch.Tensor:
        return state.count >= config.min_length

    def sample(
        state: PrioritisedState, key: torch.Tensor, batch_size: int, beta: float | torch.Tensor | None = None
    ) -> Sample:
        check_can_sample(config, state, batch_size)
        uniforms = frandom.uniform(key, (batch_size,), dtype=torch.float64)
        indices = sum_tree.sample_stratified(state.sum_tree, uniforms, num_leaves)
        envs, starts = indices // max_length, torch.remainder(indices, max_length)
        items = gather_windows(config, state.experience, envs, starts)
        filled = torch.clamp(state.count, max=max_length)
        num_valid = num_envs * torch.clamp(filled - sequence_length + 1, min=1)
        weights = _importance_weights(
            state.sum_tree, indices, num_valid, pconfig.beta if beta is None else beta
        )
        return Sample(items=items, indices=indices, weights=weights)

    def update_priorities(
        state: PrioritisedState, indices: torch.Tensor, priorities: torch.Tensor
    ) -> PrioritisedState:
        _check_priorities(indices, priorities, num_leaves)
        check_one_buffer(state, "update_priorities")
        starts = torch.remainder(indices, max_length)
        # The step number of the data now at slot `starts`: the latest one congruent to it.
        logical = state.count - 1 - torch.remainder(state.count - 1 - starts, max_length)
        return _set_priorities(state, indices, priorities, valid_logical(logical, state.count), pconfig.alpha)

    return PrioritisedBuffer(init, add, sample, can_sample, update_priorities)
