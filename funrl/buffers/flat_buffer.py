"""Uniform replay of single items (transitions) in a circular storage of fixed capacity.

Behaviour follows flashbax's flat buffer (``flashbax/buffers/flat_buffer.py``), with items
stored whole (a transition carries its own ``next_obs``) and ``add`` donating its input state
(see :mod:`funrl.buffers._core` for the stale-state rule).
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
    flatten_with_path,
    init_storage,
    storage_device,
    tree_map,
)

__all__ = ["FlatState", "FlatConfig", "flat", "items_in_order"]


class FlatState(NamedTuple):
    """State of a flat buffer.

    experience:    the item pytree, each leaf ``[capacity, *item_shape]``; row
                   ``count % capacity`` is written next.
    count:         int64 scalar, items added so far (the write head is ``count % capacity``,
                   the fill ``min(count, capacity)``).
    storage_count: int64 ``[1]`` shared by every state of this storage, advanced in place by
                   ``add`` (the stale-state check compares it with ``count``).
    """

    experience: Any
    count: torch.Tensor
    storage_count: torch.Tensor


@dataclass(frozen=True)
class FlatConfig:
    capacity: int
    min_length: int


def _init(config: FlatConfig, example_item: Any) -> FlatState:
    experience = init_storage(example_item, (config.capacity,))
    zero = torch.zeros((), dtype=torch.int64, device=storage_device(experience))
    return FlatState(experience=experience, count=zero, storage_count=zero.reshape(1).clone())


def write_items(capacity: int, state: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Check ``batch`` (leaves ``[B, ...]``) and write it at the head, in place; returns
    ``(new_count, rows)``: the last ``min(B, capacity)`` items of the batch land in ``rows``."""
    check_one_buffer(state, "add")
    (batch_size,), leaves, stored = check_batch(batch, state.experience, storage_ndim=1, batch_ndim=1)
    # Only the last `capacity` items survive; writing the others too would repeat rows in one write.
    skipped = max(0, batch_size - capacity)
    if skipped:
        leaves = [leaf[skipped:] for leaf in leaves]
    rows = torch.remainder(
        torch.arange(skipped, batch_size, device=state.count.device) + state.count, capacity
    )
    for store, leaf in zip(stored, leaves, strict=True):
        store.index_put_((rows,), leaf)
    return advance_count(state, batch_size), rows


def _add(config: FlatConfig, state: FlatState, batch: Any) -> FlatState:
    new_count, _ = write_items(config.capacity, state, batch)
    return state._replace(count=new_count)


def _can_sample(config: FlatConfig, state: FlatState) -> torch.Tensor:
    return state.count >= config.min_length


def gather(experience: Any, rows: torch.Tensor) -> Any:
    """The items at ``rows`` (int64 ``[B]``) of a flat storage: leaves ``[B, *item_shape]``, copies."""
    return tree_map(lambda x: x.index_select(0, rows), experience)


def _sample(config: FlatConfig, state: FlatState, key: torch.Tensor, batch_size: int) -> Sample:
    check_sample_count(state, config.min_length, batch_size)
    # at least 1: traced code never draws from an empty range (eager code raised above instead)
    filled = torch.clamp(state.count, min=1, max=config.capacity)
    indices = frandom.randint(key, (batch_size,), 0, filled)
    weights = torch.ones(batch_size, dtype=torch.float32, device=indices.device)
    return Sample(items=gather(state.experience, indices), indices=indices, weights=weights)


def flat(capacity: int, min_length: int = 1) -> Buffer:
    """A uniform circular replay buffer of ``capacity`` items.

    ``init(example_item)`` allocates zero storage for ``capacity`` items like ``example_item``
    (one item, no batch dim): each leaf ``[capacity, *leaf.shape]``. ``add(state, batch)`` takes
    leaves ``[B, ...]`` and keeps the last ``capacity`` items ever added; it writes in place and
    returns the state to use from then on (an older state raises
    :class:`~funrl.buffers.StaleStateError` in eager mode; ``batch`` must not be a view of the
    storage, which torch refuses). ``sample(state, key, batch_size)`` draws ``batch_size`` stored
    items uniformly with replacement; ``weights`` are ones. ``can_sample(state)`` is
    ``count >= min_length``; in eager mode ``sample`` raises ``ValueError`` before that.
    """
    check_positive_int(capacity, "capacity")
    check_positive_int(min_length, "min_length")
    config = FlatConfig(capacity=capacity, min_length=min_length)
    return Buffer(
        init=lambda example_item: _init(config, example_item),
        add=lambda state, batch: _add(config, state, batch),
        sample=lambda state, key, batch_size: _sample(config, state, key, batch_size),
        can_sample=lambda state: _can_sample(config, state),
    )


def items_in_order(state: FlatState) -> Any:
    """The stored items, oldest first (leaves ``[min(count, capacity), ...]``); eager helper."""
    capacity = flatten_with_path(state.experience)[1][0].shape[0]
    count = int(state.count)
    rows = torch.arange(max(0, count - capacity), count, device=state.count.device) % capacity
    return gather(state.experience, rows)
