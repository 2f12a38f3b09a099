"""Shared pieces of every buffer: the ``Buffer`` / ``Sample`` tuples, the stale-state rule, checks.

Storage
-------
A buffer stores its items as the item pytree itself with storage dims in front of every leaf
(``[capacity, *item_shape]`` for flat buffers, ``[num_envs, max_length, *item_shape]`` for
trajectory buffers), as flashbax does. ``add`` writes each leaf's new rows with one
``index_put_``; ``sample`` gathers each leaf's rows with one index.

Donation rule (all buffers)
---------------------------
``add`` writes the new items into the storage tensors of the state it is given, in place (O(batch),
not O(capacity)), and returns the state to use from then on. The storage is shared by every state
derived from the same ``init``, so an older state would see rows it does not account for. To make
that loud rather than silent, each state carries ``count`` (items written so far, a fresh scalar
per state) and ``storage_count``, a 1-element tensor shared by all states of one storage and updated
in place by every ``add``. In eager mode, ``add``, ``sample``, ``update_priorities`` and ``save``
compare the two and raise :class:`StaleStateError` when they differ. Under ``torch.compile`` or a
``torch.func`` transform the comparison (a host read) is skipped; the counters are still advanced,
so the next eager call on a stale state still raises.

Shared cells are shape ``[1]``, not 0-d: torch 2.13's inductor drops an in-place ``copy_`` of
``maximum(cell, x.max())`` into a 0-d graph input (the result is lost), which shape ``[1]`` avoids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import optree
import torch

from funrl.control import is_traced

__all__ = ["Buffer", "Sample", "StaleStateError", "copy_state"]

Tree = Any
_NAMESPACE = "funrl"


class Buffer(NamedTuple):
    """A buffer's pure functions (flashbax's shape).

    ``state = init(example_item)``; ``state = add(state, batch)`` (donates ``state``);
    ``sample(state, key, batch_size) -> Sample``; ``can_sample(state) -> bool tensor``.
    """

    init: Callable[..., Any]
    add: Callable[..., Any]
    sample: Callable[..., Any]
    can_sample: Callable[..., Any]


class Sample(NamedTuple):
    """What ``sample`` returns.

    items:   the sampled pytree, leaves ``[batch_size, ...]`` (``[batch_size, L, ...]`` for
             trajectory buffers); copies, so later adds never change them.
    indices: int64 ``[batch_size]``, the storage positions sampled (what ``update_priorities``
             takes).
    weights: float32 ``[batch_size]``, importance weights (all ones for uniform buffers).
    """

    items: Any
    indices: torch.Tensor
    weights: torch.Tensor


class StaleStateError(RuntimeError):
    """A buffer state was used after ``add`` returned a newer one for the same storage."""


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False, namespace=_NAMESPACE)


def flatten_with_path(tree: Tree) -> tuple[list[tuple[Any, ...]], list[Any], optree.PyTreeSpec]:
    return optree.tree_flatten_with_path(tree, none_is_leaf=False, namespace=_NAMESPACE)


def path_str(path: tuple[Any, ...]) -> str:
    return "item" + "".join(f"[{p!r}]" for p in path)


def check_fresh(count: torch.Tensor, storage_count: torch.Tensor, fn: str) -> None:
    """Raise :class:`StaleStateError` when ``count`` lags the shared storage counter (eager only:
    traced code cannot read values on the host); ``count`` may be stacked (``[S]``)."""
    if is_traced():
        return
    # count is [] per buffer and storage_count [1]; for stacked states, [S] and [S, 1].
    counted, stored = count.tolist(), storage_count.squeeze(-1).tolist()
    if counted != stored:
        raise StaleStateError(
            f"{fn}: state is stale: it accounts for {counted} items written but its storage has {stored}; "
            "`add` writes in place and returns the state to use from then on (use that one, or "
            "`copy_state(state)` before `add` to keep an independent snapshot)"
        )


def check_one_buffer(state: Any, fn: str) -> None:
    """``state`` must be one buffer's: stacked states (one buffer per seed) go through vmap."""
    if state.count.dim() != 0:
        raise ValueError(
            f"{fn}: expected the state of one buffer (count of shape []), got count of shape "
            f"{list(state.count.shape)}; map over stacked states with torch.func.vmap"
        )
    check_fresh(state.count, state.storage_count, fn)


def advance_count(state: Any, added: int) -> torch.Tensor:
    """The count after ``added`` more items; the shared storage counter is set to it in place."""
    new_count = state.count + added
    state.storage_count.copy_(new_count)
    return new_count


def check_sample_count(state: Any, min_length: int, batch_size: int, unit: str = "items") -> None:
    """What every ``sample`` checks first: ``batch_size``, a fresh state and, eagerly, at least
    ``min_length`` stored (traced code samples anyway; check ``can_sample`` first)."""
    check_positive_int(batch_size, "batch_size")
    check_one_buffer(state, "sample")
    if is_traced():
        return
    count = int(state.count)
    if count < min_length:
        raise ValueError(
            f"sample: the buffer holds {count} {unit}, fewer than min_length={min_length}; "
            "check can_sample(state) before sampling"
        )


def check_positive_int(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def init_storage(example_item: Tree, storage_dims: tuple[int, ...]) -> Tree:
    """Zero storage for items like ``example_item``: each leaf ``[*storage_dims, *leaf.shape]``,
    its dtype, on the example's device (all leaves on one device)."""
    paths, leaves, _ = flatten_with_path(example_item)
    if not leaves:
        raise ValueError(
            f"example_item: expected a pytree with at least one tensor leaf, got {example_item!r}"
        )
    for path, leaf in zip(paths, leaves, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(
                f"example_item: leaf {path_str(path)} expected a torch.Tensor, got {type(leaf).__name__}"
            )
        if leaf.device != leaves[0].device:
            raise ValueError(
                f"example_item: leaf {path_str(path)} is on {leaf.device} but leaf {path_str(paths[0])} on "
                f"{leaves[0].device}; a buffer stores all leaves on one device"
            )
    return tree_map(
        lambda x: torch.zeros((*storage_dims, *x.shape), dtype=x.dtype, device=x.device), example_item
    )


def check_batch(
    batch: Tree, experience: Tree, storage_ndim: int, batch_ndim: int
) -> tuple[tuple[int, ...], list[torch.Tensor], list[torch.Tensor]]:
    """Check ``batch`` against the storage ``experience``: the same tree structure, and each leaf
    ``[*batch_dims, *item_shape]`` of its stored leaf's dtype and device, ``batch_dims`` (of
    ``batch_ndim`` dims) shared by all leaves. Returns ``(batch_dims, batch leaves, stored
    leaves)`` in tree order. Shapes, dtypes and structure are static: free under compile."""
    stored_paths, stored, _ = flatten_with_path(experience)
    paths, leaves, _ = flatten_with_path(batch)
    if paths != stored_paths:
        missing = [path_str(p) for p in stored_paths if p not in paths]
        extra = [path_str(p) for p in paths if p not in stored_paths]
        raise ValueError(
            "batch: expected the tree structure given to init "
            f"(missing leaves: {missing or 'none'}; unexpected leaves: {extra or 'none'})"
        )
    first = leaves[0]
    batch_dims = tuple(first.shape[:batch_ndim]) if isinstance(first, torch.Tensor) else ()
    for i, (leaf, store) in enumerate(zip(leaves, stored, strict=True)):
        if not (
            isinstance(leaf, torch.Tensor)
            and leaf.dtype == store.dtype
            and leaf.dim() - batch_ndim == store.dim() - storage_ndim
            and leaf.shape[batch_ndim:] == store.shape[storage_ndim:]
            and leaf.shape[:batch_ndim] == batch_dims
            and leaf.device == store.device
        ):
            _raise_bad_leaf(paths, leaves, i, store, storage_ndim, batch_ndim)
    return batch_dims, leaves, stored


def _raise_bad_leaf(
    paths: list[tuple[Any, ...]],
    leaves: list[Any],
    i: int,
    store: torch.Tensor,
    storage_ndim: int,
    batch_ndim: int,
) -> None:
    """The error for batch leaf ``i``, which does not fit its stored leaf ``store``."""
    leaf, where = leaves[i], f"batch: leaf {path_str(paths[i])}"
    if not isinstance(leaf, torch.Tensor):
        raise TypeError(f"{where} expected a torch.Tensor, got {type(leaf).__name__}")
    if leaf.dtype != store.dtype:
        raise TypeError(f"{where} expected dtype {store.dtype} (as given to init), got {leaf.dtype}")
    item_shape = list(store.shape[storage_ndim:])
    if leaf.dim() != batch_ndim + len(item_shape) or list(leaf.shape[batch_ndim:]) != item_shape:
        raise ValueError(
            f"{where} expected shape [{batch_ndim} leading batch dim(s), *{item_shape}], got {list(leaf.shape)}"
        )
    if leaf.device != store.device:
        raise ValueError(f"{where} expected device {store.device}, got {leaf.device}")
    raise ValueError(
        f"{where} has leading batch dims {list(leaf.shape[:batch_ndim])} but leaf "
        f"{path_str(paths[0])} has {list(leaves[0].shape[:batch_ndim])}; all leaves must agree"
    )


def storage_device(experience: Tree) -> torch.device:
    """The device of a storage (all its leaves share one)."""
    return optree.tree_leaves(experience, none_is_leaf=False, namespace=_NAMESPACE)[0].device


def copy_state(state: Tree) -> Tree:
    """An independent deep copy of a buffer state (new storage, new shared counter).

    ``add`` donates its input; copy first when an older snapshot must stay usable.
    """
    return tree_map(torch.clone, state)
