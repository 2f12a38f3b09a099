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
    advanced_count,
    check_batch_leaves,
    check_capacity,
    check_fresh,
    check_sample_count,
    draw_rows_native,
    gather_rows,
    init_storage,
    ring_rows,
    unaliased,
    write_ring_native,
    write_ring_slices,
    write_rows,
)
from funrl.buffers._storage import layout_of, pack, pack_into, unpack

__all__ = ["FlatState", "FlatConfig", "flat", "items_in_order"]


class FlatState(NamedTuple):
    """State of a flat buffer.

    experience:    the packed storage (``PackedItems``: one tensor ``[capacity, width]`` per
                   dtype, a row per item; ``storage_items(experience)`` gives the item pytree
                   of views ``[capacity, *item_shape]``); row ``count % capacity`` is written
                   next.
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
    zero = torch.zeros((), dtype=torch.int64, device=experience[0].device)
    return FlatState(experience=experience, count=zero.clone(), storage_count=zero.reshape(1).clone())


def write_items(capacity: int, state: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Check ``batch`` and write it at the head in place; returns ``(new_count, start, written)``.

    The last ``written = min(B, capacity)`` items of the batch land in rows
    ``ring_rows(start, written, capacity)``. Traced (compile, vmap), the batch is packed (one
    ``cat`` per dtype) and written with one ``index_put_`` per dtype group. Eager on one buffer,
    the head is read once (the stale-state check reads the counters anyway) and the rows are
    written in place with no index tensor: on the CPU by one C++ call
    (:func:`~funrl.buffers._core.write_ring_native`), else per group by one ``cat`` straight into
    them or, where the rows wrap around, packed and copied in two slices.
    """
    (batch_size,), leaves = check_batch_leaves(batch, state.experience, batch_ndim=1)
    count = check_fresh(state.count, state.storage_count, "add")
    # Only the last `capacity` items survive; writing the rest would alias rows in one index_put_.
    skipped = max(0, batch_size - capacity)
    if skipped:
        leaves = [x[skipped:] for x in leaves]
    start = state.count + skipped if skipped else state.count
    written = batch_size - skipped
    if count is None:  # traced, or stacked states
        rows = ring_rows(start, written, capacity)
        write_rows(state.experience, (rows,), pack(layout_of(state.experience), leaves, (written,)))
        new_count = state.count + batch_size
        state.storage_count.copy_(new_count)
        return new_count, start, written
    head = (count + skipped) % capacity
    leaves = unaliased(state.experience, leaves)
    if not write_ring_native(state.experience, leaves, head, written):
        layout = layout_of(state.experience)
        if head + written <= capacity:  # no wrap: into the rows
            pack_into(layout, leaves, [g.narrow(0, head, written) for g in state.experience])
        else:
            write_ring_slices(state.experience, head, pack(layout, leaves, (written,)))
    return advanced_count(state, count + batch_size), start, written


def _add(config: FlatConfig, state: FlatState, batch: Any) -> FlatState:
    new_count, _, _ = write_items(config.capacity, state, batch)
    return state._replace(count=new_count)


def _can_sample(config: FlatConfig, state: FlatState) -> torch.Tensor:
    return state.count >= config.min_length


def _sample(config: FlatConfig, state: FlatState, key: torch.Tensor, batch_size: int) -> Sample:
    count = check_sample_count(state, config.min_length, batch_size)
    # Traced, clamp: never a zero range inside a compiled graph (eager raised above instead).
    # Eager, a Python int bounds the draw: no tensor ops for the range.
    filled = (
        torch.clamp(state.count, min=1, max=config.capacity) if count is None else min(count, config.capacity)
    )
    drawn = None if count is None else draw_rows_native(state.experience, key, batch_size, filled)
    if drawn is None:
        indices = frandom.randint(key, (batch_size,), 0, filled)
        items = gather_rows(state.experience, indices)
    else:
        indices, groups = drawn
        items = unpack(layout_of(state.experience), groups)
    weights = torch.ones(batch_size, dtype=torch.float32, device=indices.device)
    return Sample(items=items, indices=indices, weights=weights)


def flat(capacity: int, min_length: int = 1) -> Buffer:
    """A uniform circular replay buffer of ``capacity`` items.

    ``init(example_item)`` allocates zero storage for ``capacity`` items like ``example_item``
    (one item, no batch dim), packed: one ``[capacity, width]`` tensor per dtype (bool leaves as
    bytes in another dtype's row, see ``funrl.buffers._storage``). ``add(state, batch)`` takes
    leaves ``[B, ...]`` and keeps the last ``capacity`` items ever added; it writes in place and
    returns the state to use from then on (an older state raises
    :class:`~funrl.buffers.StaleStateError` in eager mode). ``sample(state, key, batch_size)``
    draws ``batch_size`` stored items uniformly with replacement (eagerly, leaves are views of one
    gathered block per dtype); ``weights`` are ones. ``can_sample(state)`` is
    ``count >= min_length``; in eager mode ``sample`` raises ``ValueError`` before that.
    """
    check_capacity(capacity, "capacity")
    check_capacity(min_length, "min_length")
    config = FlatConfig(capacity=capacity, min_length=min_length)
    return Buffer(
        init=lambda example_item: _init(config, example_item),
        add=lambda state, batch: _add(config, state, batch),
        sample=lambda state, key, batch_size: _sample(config, state, key, batch_size),
        can_sample=lambda state: _can_sample(config, state),
    )


def items_in_order(state: FlatState) -> Any:
    """The stored items, oldest first (leaves ``[min(count, capacity), ...]``); eager helper."""
    capacity = state.experience[0].shape[0]
    count = int(state.count)
    filled = min(count, capacity)
    rows = torch.remainder(torch.arange(count - filled, count), capacity)
    return gather_rows(state.experience, rows)
