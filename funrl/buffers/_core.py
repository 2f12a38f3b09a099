"""Shared pieces of every buffer: the ``Buffer`` / ``Sample`` tuples, the stale-state rule, checks.

Donation rule (all buffers)
---------------------------
``add`` writes the new items into the storage tensors of the state it is given, in place (an
``index_put_`` over the written rows when traced, slice copies in eager mode: O(batch), not
O(capacity)), and returns
the state to use from then on. The storage is shared by every state derived from the same
``init``, so an older state would see rows it does not account for. To make that loud rather than
silent, each state carries ``count`` (items written so far, a fresh scalar per state) and
``storage_count``, a 1-element tensor shared by all states of one storage and updated in place by
every ``add``. In eager mode, ``add``, ``sample`` and ``update_priorities`` compare the two and raise
:class:`StaleStateError` when they differ. Under ``torch.compile`` or ``torch.func`` transforms
the comparison (a host sync) is skipped; the counters are still advanced, so the next eager call
on a stale state still raises.

Shared cells are shape ``[1]``, not 0-d: torch 2.13's inductor drops an in-place ``copy_`` of
``maximum(cell, x.max())`` into a 0-d graph input (the result is lost), which shape ``[1]`` avoids.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable
from typing import Any, NamedTuple

import optree
import torch

__all__ = ["Buffer", "Sample", "StaleStateError"]

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
             trajectory buffers).
    indices: int64 ``[batch_size]``, the storage positions sampled (what ``update_priorities``
             takes).
    weights: float32 ``[batch_size]``, importance weights (all ones for uniform buffers).
    """

    items: Any
    indices: torch.Tensor
    weights: torch.Tensor


class StaleStateError(RuntimeError):
    """A buffer state was used after ``add`` returned a newer one for the same storage."""


def in_transform() -> bool:
    """True while ``torch.compile`` traces or a ``torch.func`` transform (vmap, grad) is active.

    Value-dependent checks (host syncs) run only when this is False.
    """
    return torch.compiler.is_compiling() or torch._C._functorch.maybe_current_level() is not None


def check_fresh(count: torch.Tensor, storage_count: torch.Tensor, fn: str) -> int | None:
    """Raise :class:`StaleStateError` (eager only) when ``count`` lags the shared storage counter.

    Returns the count it read, as an int, for one buffer in eager mode (callers use it rather than
    reading it again); None when traced or for stacked states.
    """
    if in_transform():
        return None
    # count is [] per buffer and storage_count [1]; for stacked states, [S] and [S, 1]. One buffer:
    # two scalar reads, no kernels (this runs on every eager add and sample).
    value = None
    if count.dim() == 0:
        value = count.item()
        fresh = value == storage_count.item()
    else:
        fresh = bool((count.unsqueeze(-1) == storage_count).all())
    if not fresh:
        raise StaleStateError(
            f"{fn}: state is stale: it accounts for {count.tolist()} items written but its storage has "
            f"{storage_count.squeeze(-1).tolist()}; `add` writes in place and returns the state to use from then on "
            "(use that one, or `copy_state(state)` before `add` to keep an independent snapshot)"
        )
    return value


HUGE_PAGE_BYTES = 2 << 20
"""Transparent huge page size on x86-64 and arm64 Linux; storages at least this large get them."""


def storage_zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str | None = None
) -> torch.Tensor:
    """A zero-filled storage tensor; large CPU storages are backed by transparent huge pages.

    A sample gathers rows at random from the whole storage. With 4 KiB pages the TLB maps a few
    MiB, so at 1e7 items (1.7 GB) nearly every gathered row also pays a page-table walk; with
    2 MiB pages a few thousand TLB entries map it all. Linux hands out huge pages only to regions that ask
    (``transparent_hugepage=madvise`` is a common default), and torch's allocator asks only when
    the process starts with ``THP_MEM_ALLOC_ENABLE=1``. So CPU storages of at least
    :data:`HUGE_PAGE_BYTES` are an anonymous private mapping, aligned to a huge page and
    ``madvise(MADV_HUGEPAGE)``-d, wrapped without a copy by ``torch.frombuffer`` (the tensor keeps
    the mapping alive). Anonymous memory is zero and committed page by page on first write, like
    ``torch.zeros``. Elsewhere (CUDA, small storages, systems without ``MADV_HUGEPAGE`` or whose
    kernel refuses it) this is ``torch.zeros``.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    if device.type != "cpu" or nbytes < HUGE_PAGE_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.zeros(shape, dtype=dtype, device=device)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # EINVAL where the kernel has no transparent huge pages: plain pages then
        region.close()
        return torch.zeros(shape, dtype=dtype, device=device)
    offset = -torch.frombuffer(region, dtype=torch.uint8, count=1).data_ptr() % HUGE_PAGE_BYTES
    return torch.frombuffer(region, dtype=dtype, count=numel, offset=offset).view(shape)


def path_str(path: tuple[Any, ...]) -> str:
    return "item" + "".join(f"[{p!r}]" for p in path)


def flatten_with_path(tree: Tree) -> tuple[list[tuple[Any, ...]], list[Any], optree.PyTreeSpec]:
    return optree.tree_flatten_with_path(tree, none_is_leaf=False, namespace=_NAMESPACE)


def check_example(example: Tree, name: str = "example_item") -> None:
    """Every leaf of ``example`` must be a tensor."""
    paths, leaves, _ = flatten_with_path(example)
    if not leaves:
        raise ValueError(f"{name}: expected a pytree with at least one tensor leaf, got {example!r}")
    for path, leaf in zip(paths, leaves, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(
                f"{name}: leaf {path_str(path)} expected a torch.Tensor, got {type(leaf).__name__}"
            )


def check_batch(batch: Tree, storage: Tree, batch_ndim: int, name: str = "batch") -> tuple[int, ...]:
    """Check ``batch`` against ``storage`` (same structure, dtypes, trailing shapes); return its batch dims.

    ``storage`` leaves are ``[*storage_dims, *item_shape]`` with ``batch_ndim`` storage dims;
    ``batch`` leaves must be ``[*batch_dims, *item_shape]`` with the same ``batch_dims`` across
    leaves. Static checks only (shapes, dtypes), so they are free under ``torch.compile``; leaf
    paths are worked out only to word an error.
    """
    return check_batch_leaves(batch, storage, batch_ndim, name)[0]


def check_batch_leaves(
    batch: Tree, storage: Tree, batch_ndim: int, name: str = "batch"
) -> tuple[tuple[int, ...], list[torch.Tensor], list[torch.Tensor]]:
    """:func:`check_batch`, also returning the flat ``(batch_dims, storage_leaves, batch_leaves)``.

    This runs on every eager ``add``, where a pytree flatten of a small dict costs about as much
    as a tensor op: the usual item, a flat dict of tensors, is paired key by key without one, and
    anything else (or any mismatch, to name the leaf) goes through optree in tree order.
    """
    if type(batch) is dict and type(storage) is dict and batch.keys() == storage.keys():
        s_leaves = list(storage.values())
        b_leaves = [batch[k] for k in storage]
        if all(type(x) is torch.Tensor for x in s_leaves):
            dims = _valid_batch_dims(s_leaves, b_leaves, batch_ndim)
            if dims is not None:
                return dims, s_leaves, b_leaves
    s_leaves, s_spec = optree.tree_flatten(storage, none_is_leaf=False, namespace=_NAMESPACE)
    b_leaves, b_spec = optree.tree_flatten(batch, none_is_leaf=False, namespace=_NAMESPACE)
    if b_spec != s_spec:
        s_paths = flatten_with_path(storage)[0]
        b_paths = flatten_with_path(batch)[0]
        missing = [path_str(p) for p in s_paths if p not in set(b_paths)]
        extra = [path_str(p) for p in b_paths if p not in set(s_paths)]
        raise ValueError(
            f"{name}: expected the tree structure given to init, {s_spec}, got {b_spec} "
            f"(missing leaves: {missing or 'none'}; unexpected leaves: {extra or 'none'})"
        )
    dims = _valid_batch_dims(s_leaves, b_leaves, batch_ndim)
    if dims is None:
        for i in range(len(b_leaves)):  # the first bad leaf, in tree order
            if _valid_batch_dims(s_leaves[: i + 1], b_leaves[: i + 1], batch_ndim) is None:
                _raise_bad_leaf(i, b_leaves[i], s_leaves[i], s_leaves, b_leaves, storage, batch_ndim, name)
    assert dims is not None
    return dims, s_leaves, b_leaves


def _valid_batch_dims(
    s_leaves: list[torch.Tensor], b_leaves: list[Any], batch_ndim: int
) -> tuple[int, ...] | None:
    """The batch dims shared by all ``b_leaves`` if each is a tensor ``[*batch_dims, *item_shape]``
    of its storage leaf's dtype and device; None otherwise."""
    first = b_leaves[0]
    if not isinstance(first, torch.Tensor) or first.dim() < batch_ndim:
        return None
    dims = tuple(first.shape[:batch_ndim])
    # One shape comparison per leaf covers rank, batch dims and item shape.
    for leaf, stored in zip(b_leaves, s_leaves, strict=True):
        if (
            not isinstance(leaf, torch.Tensor)
            or leaf.dtype is not stored.dtype
            or leaf.shape != dims + stored.shape[batch_ndim:]
            or leaf.device != stored.device
        ):
            return None
    return dims


def _raise_bad_leaf(
    i: int,
    leaf: Any,
    stored: torch.Tensor,
    s_leaves: list,
    b_leaves: list,
    storage: Tree,
    batch_ndim: int,
    name: str,
) -> None:
    paths = flatten_with_path(storage)[0]
    where = f"{name}: leaf {path_str(paths[i])}"
    if not isinstance(leaf, torch.Tensor):
        raise TypeError(f"{where} expected a torch.Tensor, got {type(leaf).__name__}")
    if leaf.dtype != stored.dtype:
        raise TypeError(f"{where} expected dtype {stored.dtype} (as given to init), got {leaf.dtype}")
    item_shape = list(stored.shape[batch_ndim:])
    if leaf.dim() != stored.dim() or leaf.shape[batch_ndim:] != stored.shape[batch_ndim:]:
        raise ValueError(
            f"{where} expected shape [{batch_ndim} leading batch dim(s), *{item_shape}], "
            f"got {list(leaf.shape)}"
        )
    if leaf.device != stored.device:
        raise ValueError(f"{where} expected device {stored.device}, got {leaf.device}")
    first = b_leaves[0]
    raise ValueError(
        f"{where} has leading batch dims {list(leaf.shape[:batch_ndim])} but leaf "
        f"{path_str(paths[0])} has {list(first.shape[:batch_ndim])}; all leaves must agree"
    )


def check_batch_size(batch_size: int, name: str = "batch_size") -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{name}: expected a positive int, got {batch_size!r}")


def check_capacity(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False, namespace=_NAMESPACE)


def write_rows(storage: Tree, index: tuple[torch.Tensor, ...], batch: Tree) -> None:
    """``storage[index] = batch`` leaf-wise, in place (``index_put_``: has a vmap batching rule)."""
    tree_map(lambda s, b: s.index_put_(index, b), storage, batch)


def ring_rows(start: torch.Tensor, length: int, capacity: int) -> torch.Tensor:
    """Rows ``(start + i) % capacity`` for ``i < length <= capacity``; int64 ``[length]``.

    A remainder of the scalar start, then a compare-and-subtract per row. Inductor fuses the row
    computation into every leaf's write loop; with ``(start + i) % capacity`` there, an int64
    division per written element, the compiled add's kernel took 16 µs instead of 10 (wall, on the
    shared 2-core CPU).
    """
    rows = torch.remainder(start, capacity) + torch.arange(length, device=start.device)
    return torch.where(rows >= capacity, rows - capacity, rows)


def write_ring_slices(stored: list[torch.Tensor], head: int, new: list[torch.Tensor]) -> None:
    """Eager twin of ``write_rows`` for one circular storage, on flat leaf lists: rows ``head,
    head + 1, ...`` wrapping at the capacity (``new`` no longer than the storage).

    Eager only (``head`` is a Python int read from the state). Slice copies need no index tensor
    and no scatter, so an eager ``add`` costs about what a hand-written ring buffer does.
    """
    length = new[0].shape[0]
    first = min(length, stored[0].shape[0] - head)
    for s, b in zip(stored, new, strict=True):
        if first == length:
            s[head : head + length].copy_(b)
        else:  # wraps: the rest goes to the front
            s[head:].copy_(b[:first])
            s[: length - first].copy_(b[first:])


def gather_rows(storage: Tree, rows: torch.Tensor) -> Tree:
    """Rows ``rows`` (``[B]``, each in ``[0, capacity)``) of every leaf.

    ``index_select`` rather than ``leaf[rows]``: the same gather under compile and vmap, and
    eagerly a few microseconds a leaf where indexing parses an index tuple for about 12.
    """
    return tree_map(lambda s: torch.index_select(s, 0, rows), storage)


def copy_state(state: Tree) -> Tree:
    """An independent deep copy of a buffer state (new storage, new shared counter).

    ``add`` donates its input; copy first when an older snapshot must stay usable.
    """
    return tree_map(torch.clone, state)
