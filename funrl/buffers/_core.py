"""Shared pieces of every buffer: the ``Buffer`` / ``Sample`` tuples, the stale-state rule, checks.

Donation rule (all buffers)
---------------------------
``add`` writes the new items into the storage tensors of the state it is given (packed: one
tensor per dtype, see ``_storage``), in place (an ``index_put_`` over the written rows when
traced, writes into row slices in eager mode: O(batch), not O(capacity)), and returns
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

import array
import ctypes
import math
import mmap
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import optree
import torch

from funrl import _native
from funrl.buffers._storage import ItemLayout, in_transform, layout_of, packed_type, path_str, unpack
from funrl.random import _native_for as _threefry_for  # the eager sample draws and gathers in its kernel

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
             trajectory buffers); eagerly, views of one gathered block per dtype (bool leaves
             hosted in another dtype's row: of its bytes; traced, computed from it).
    indices: int64 ``[batch_size]``, the storage positions sampled (what ``update_priorities``
             takes).
    weights: float32 ``[batch_size]``, importance weights (all ones for uniform buffers).
    """

    items: Any
    indices: torch.Tensor
    weights: torch.Tensor


class StaleStateError(RuntimeError):
    """A buffer state was used after ``add`` returned a newer one for the same storage."""


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


def advanced_count(state: Any, count: int) -> torch.Tensor:
    """Eager twin of ``new = state.count + n; state.storage_count.copy_(new)`` after an add, from
    the Python int ``count`` of items now written (one buffer): the state's fresh count tensor,
    with the shared counter set to it. A fill costs less eagerly than arithmetic on the tensor."""
    state.storage_count.fill_(count)
    return torch.full((), count, dtype=torch.int64, device=state.count.device)


def check_sample_count(state: Any, min_length: int, batch_size: int, unit: str = "items") -> int | None:
    """What every ``sample`` checks first: ``batch_size``, a fresh state and, eagerly, at least
    ``min_length`` stored. Returns the count as an int eagerly, None while traced."""
    check_batch_size(batch_size)
    count = check_fresh(state.count, state.storage_count, "sample")
    if count is None and not in_transform():  # stacked states outside vmap: int() names the problem
        count = int(state.count)
    if count is not None and count < min_length:
        raise ValueError(
            f"sample: the buffer holds {count} {unit}, fewer than min_length={min_length}; "
            "check can_sample(state) before sampling"
        )
    return count


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


def flatten_with_path(tree: Tree) -> tuple[list[tuple[Any, ...]], list[Any], optree.PyTreeSpec]:
    return optree.tree_flatten_with_path(tree, none_is_leaf=False, namespace=_NAMESPACE)


def check_example(example: Tree, name: str = "example_item") -> None:
    """Every leaf of ``example`` must be a tensor, all on one device."""
    paths, leaves, _ = flatten_with_path(example)
    if not leaves:
        raise ValueError(f"{name}: expected a pytree with at least one tensor leaf, got {example!r}")
    for path, leaf in zip(paths, leaves, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(
                f"{name}: leaf {path_str(path)} expected a torch.Tensor, got {type(leaf).__name__}"
            )
        if leaf.device != leaves[0].device:
            raise ValueError(
                f"{name}: leaf {path_str(path)} is on {leaf.device} but leaf {path_str(paths[0])} on "
                f"{leaves[0].device}; a buffer stores all leaves on one device"
            )


def init_storage(example_item: Tree, storage_dims: tuple[int, ...]) -> Any:
    """Zero packed storage for items like ``example_item``: a ``PackedItems`` of one tensor
    ``[*storage_dims, width]`` per dtype, on the example's device (see ``_storage``)."""
    check_example(example_item)
    layout = ItemLayout.of(example_item)
    device = optree.tree_leaves(example_item, namespace=_NAMESPACE)[0].device
    groups = [
        storage_zeros((*storage_dims, w), dtype, device)
        for dtype, w in zip(layout.dtypes, layout.widths, strict=True)
    ]
    return packed_type(layout)(*groups)


def check_batch_leaves(
    batch: Tree, experience: Any, batch_ndim: int, name: str = "batch"
) -> tuple[tuple[int, ...], list[torch.Tensor]]:
    """Check ``batch`` against the packed ``experience`` (same structure, dtypes, item shapes,
    device); return its batch dims and its leaves in tree order.

    ``batch`` leaves must be ``[*batch_dims, *item_shape]`` with the same ``batch_dims`` (of
    ``batch_ndim`` dims) across leaves. Static checks only (shapes, dtypes), so they are free
    under ``torch.compile``; leaf paths are worked out only to word an error. This runs on every
    eager ``add``, where a pytree flatten of a small dict costs about as much as a tensor op: a
    flat dict item is paired key by key without one.
    """
    layout = layout_of(experience)
    device = experience[0].device
    keys = layout.dict_keys
    if keys is not None and type(batch) is dict and len(batch) == len(keys) and all(k in batch for k in keys):
        leaves = [batch[k] for k in keys]
        dims = _valid_batch_dims(layout, device, leaves, batch_ndim)
        if dims is not None:
            return dims, leaves
    leaves, matches = layout.flatten(batch)
    if not matches:
        s_paths = layout.paths
        b_paths = [path_str(p) for p in flatten_with_path(batch)[0]]
        missing = [p for p in s_paths if p not in set(b_paths)]
        extra = [p for p in b_paths if p not in set(s_paths)]
        # The specs only eagerly: traced, a PyTreeSpec made outside the trace prints as dynamo's wrapper.
        specs = (
            ""
            if torch.compiler.is_compiling()
            else f", {layout.treespec}, got {optree.tree_structure(batch, none_is_leaf=False, namespace=_NAMESPACE)}"
        )
        raise ValueError(
            f"{name}: expected the tree structure given to init{specs} "
            f"(missing leaves: {missing or 'none'}; unexpected leaves: {extra or 'none'})"
        )
    dims = _valid_batch_dims(layout, device, leaves, batch_ndim)
    if dims is None:
        for i in range(len(leaves)):  # the first bad leaf, in tree order
            if _valid_batch_dims(layout, device, leaves[: i + 1], batch_ndim) is None:
                _raise_bad_leaf(i, leaves, layout, device, batch_ndim, name)
    assert dims is not None
    return dims, leaves


def _valid_batch_dims(
    layout: ItemLayout, device: torch.device, leaves: list[Any], batch_ndim: int
) -> tuple[int, ...] | None:
    """The batch dims shared by all ``leaves`` if each is a tensor ``[*batch_dims, *item_shape]``
    of its layout dtype on ``device``; None otherwise (``leaves`` may be a prefix)."""
    first = leaves[0]
    if not isinstance(first, torch.Tensor) or first.dim() < batch_ndim:
        return None
    dims = tuple(first.shape[:batch_ndim])
    # One shape comparison per leaf covers rank, batch dims and item shape.
    for i, leaf in enumerate(leaves):
        if (
            not isinstance(leaf, torch.Tensor)
            or leaf.dtype is not layout.leaf_dtypes[i]
            or leaf.shape != dims + layout.shapes[i]
            or leaf.device != device
        ):
            return None
    return dims


def _raise_bad_leaf(
    i: int, leaves: list[Any], layout: ItemLayout, device: torch.device, batch_ndim: int, name: str
) -> None:
    paths = layout.paths
    leaf = leaves[i]
    where = f"{name}: leaf {paths[i]}"
    if not isinstance(leaf, torch.Tensor):
        raise TypeError(f"{where} expected a torch.Tensor, got {type(leaf).__name__}")
    dtype = layout.leaf_dtypes[i]
    if leaf.dtype != dtype:
        raise TypeError(f"{where} expected dtype {dtype} (as given to init), got {leaf.dtype}")
    item_shape = layout.shapes[i]
    if leaf.dim() != batch_ndim + len(item_shape) or tuple(leaf.shape[batch_ndim:]) != item_shape:
        raise ValueError(
            f"{where} expected shape [{batch_ndim} leading batch dim(s), *{list(item_shape)}], "
            f"got {list(leaf.shape)}"
        )
    if leaf.device != device:
        raise ValueError(f"{where} expected device {device}, got {leaf.device}")
    raise ValueError(
        f"{where} has leading batch dims {list(leaf.shape[:batch_ndim])} but leaf "
        f"{paths[0]} has {list(leaves[0].shape[:batch_ndim])}; all leaves must agree"
    )


def check_batch_size(batch_size: int, name: str = "batch_size") -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{name}: expected a positive int, got {batch_size!r}")


def check_capacity(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False, namespace=_NAMESPACE)


def write_rows(experience: Any, index: tuple[torch.Tensor, ...], groups: list[torch.Tensor]) -> None:
    """``group[index] = packed`` for each storage group, in place (``index_put_``: has a vmap
    batching rule); ``groups`` from :func:`~funrl.buffers._storage.pack`."""
    for stored, new in zip(experience, groups, strict=True):
        stored.index_put_(index, new)


def ring_rows(start: torch.Tensor, length: int, capacity: int) -> torch.Tensor:
    """Rows ``(start + i) % capacity`` for ``i < length <= capacity``; int64 ``[length]``.

    A remainder of the scalar start, then a compare-and-subtract per row. Inductor fuses the row
    computation into every leaf's write loop; with ``(start + i) % capacity`` there, an int64
    division per written element, the compiled add's kernel took 16 µs instead of 10 (wall, on the
    shared 2-core CPU).
    """
    rows = torch.remainder(start, capacity) + torch.arange(length, device=start.device)
    return torch.where(rows >= capacity, rows - capacity, rows)


def write_ring_slices(stored: Sequence[torch.Tensor], head: int, new: Sequence[torch.Tensor]) -> None:
    """Eager twin of ``write_rows`` for one circular storage, on its groups: rows ``head,
    head + 1, ...`` wrapping at the capacity (``new`` no longer than the storage).

    Eager only (``head`` is a Python int read from the state). Slice copies need no index tensor
    and no scatter, so an eager ``add`` costs about what a hand-written ring buffer does.
    """
    length = new[0].shape[0]
    first = min(length, stored[0].shape[0] - head)
    for s, b in zip(stored, new, strict=True):  # narrow: cheaper eagerly than slicing syntax
        if first == length:
            s.narrow(0, head, length).copy_(b)
        else:  # wraps: the rest goes to the front
            s.narrow(0, head, first).copy_(b.narrow(0, 0, first))
            s.narrow(0, 0, length - first).copy_(b.narrow(0, first, length - first))


def unaliased(experience: Any, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    """``leaves``, cloned if one lies inside the storage (items re-added from ``storage_items``
    views): an eager in-place write would otherwise read rows it has already overwritten."""
    bounds = [(g.data_ptr(), g.data_ptr() + g.nbytes) for g in experience]
    if any(low <= x.data_ptr() < high for x in leaves for low, high in bounds):
        return [x.clone() for x in leaves]
    return leaves


def _declare_ring_rows(lib: ctypes.CDLL) -> None:
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.funrl_write_ring_rows.argtypes = [i64, ptr, ptr, ptr, i64, i64, i64, i64]
    lib.funrl_write_ring_rows.restype = None


# Eager CPU adds write their rows in C++ (funrl/_csrc/ring_rows.cpp): the torch ops they replace
# (row views, reshapes, a cat or a copy per dtype group) were most of an eager add's time.
_RING_ROWS = _native.LazyLibrary("ring_rows.cpp", "funrl.buffers", "the eager add kernel", _declare_ring_rows)
_RING_PLANS: dict[ItemLayout, tuple[Any, Any]] = {}


def _ring_plan(layout: ItemLayout) -> tuple[Any, Any]:
    """``(plan, row_bytes)`` of ``funrl_write_ring_rows`` for ``layout``: per leaf its group, its
    first byte in the group's row and its bytes; per group its row bytes."""
    plan = _RING_PLANS.get(layout)
    if plan is None:
        entries = []
        for group, offset, width, dtype in zip(
            layout.groups, layout.offsets, layout.leaf_widths, layout.leaf_dtypes, strict=True
        ):
            entries += [group, offset, width * dtype.itemsize]
        columns = [w * d.itemsize for w, d in zip(layout.widths, layout.dtypes, strict=True)]
        plan = ((ctypes.c_int64 * len(entries))(*entries), (ctypes.c_int64 * len(columns))(*columns))
        _RING_PLANS[layout] = plan
    return plan


def write_ring_native(experience: Any, leaves: list[torch.Tensor], head: int, steps: int) -> bool:
    """Eager twin of the ring writes in one C++ call: step ``t`` of each batch row of ``leaves``
    (``[*outer, steps, *item_shape]``) goes to row ``(head + t) % ring`` of the packed storage
    ``[*outer, ring, width]``; ``head < ring``, ``steps <= ring``.

    For an eager add only, after :func:`check_fresh` read the count (so no transform is active)
    and :func:`check_batch_leaves` passed (so the leaves match the storage's dtypes, shapes and
    device). Returns False, having written nothing, where the kernel may not stand in for torch
    ops: a mode or tracer records them, a tensor is a subclass (a memory-mapped storage, say) or
    not on the CPU, a leaf is not contiguous, or the kernel could not be built. The caller then
    writes with torch ops.
    """
    stored = experience[0]
    if not (stored.is_cpu and _native.plain_eager()):
        return False
    # The rest of plain_eager's per-tensor checks, less what the preconditions settle (devices,
    # no functorch wrappers): run on every add, plain_eager(*tensors) cost 4-5 µs of ~60.
    for x in (*leaves, *experience):
        if type(x) is not torch.Tensor or not x.is_contiguous():
            return False
    lib = _RING_ROWS.get()
    if lib is None:
        return False
    plan, row_bytes = _ring_plan(layout_of(experience))
    # array.array: a pointer table in one call, about half what a ctypes array costs.
    pointers = array.array("q", [x.data_ptr() for x in leaves] + [g.data_ptr() for g in experience])
    ring = stored.shape[-2]
    outer = math.prod(stored.shape[:-2])
    lib.funrl_write_ring_rows(
        len(leaves), plan, row_bytes, pointers.buffer_info()[0], outer, steps, head, ring
    )
    return True


def draw_rows_native(
    experience: Any, key: torch.Tensor, n: int, high: int
) -> tuple[torch.Tensor, list[torch.Tensor]] | None:
    """Eager twin of ``rows = funrl.random.randint(key, (n,), 0, high)`` and then
    ``index_select(group, 0, rows)`` for each group of a packed ``[capacity, width]`` storage, in
    one C++ call (``funrl_randint_rows`` in ``threefry.cpp``): ``(rows, gathered groups)``, the
    same values. Separately, the draw and the gather cost ~22 µs for 256 rows, mostly per-call
    overhead; together ~10.

    For an eager sample of one buffer only, after :func:`check_fresh` read the count (so no
    transform is active). Returns None, having done nothing, where the kernel may not stand in:
    a mode or tracer records ops, the key is not a plain CPU int64 ``[2]`` tensor (``randint``
    then words the error), a group is not a plain contiguous CPU tensor, ``high`` is out of the
    kernel's range, or the kernel could not be built.
    """
    if not isinstance(key, torch.Tensor) or key.shape != (2,) or not 0 < high < 2**63:
        return None
    for g in experience:
        if type(g) is not torch.Tensor or not g.is_cpu or not g.is_contiguous():
            return None
    lib = _threefry_for(key)  # funrl.random's kernel, if plain eager with a plain CPU int64 key
    if lib is None:
        return None
    rows = torch.empty(n, dtype=torch.int64)
    outs = [torch.empty((n, g.shape[-1]), dtype=g.dtype) for g in experience]
    pointers = array.array("q", [g.data_ptr() for g in experience] + [o.data_ptr() for o in outs])
    row_bytes = array.array("q", [g.shape[-1] * g.element_size() for g in experience])
    sources = pointers.buffer_info()[0]
    lib.funrl_randint_rows(
        key.data_ptr(),
        key.stride(0),
        high,
        rows.data_ptr(),
        n,
        len(outs),
        sources,
        row_bytes.buffer_info()[0],
        sources + len(outs) * pointers.itemsize,
    )
    return rows, outs


def gather_rows(experience: Any, rows: torch.Tensor) -> Tree:
    """The items at rows ``rows`` (``[B]``, each in ``[0, capacity)``) of a packed storage: leaves
    ``[B, *item_shape]``, views of one gathered block per dtype (see ``Sample.items``).

    ``index_select`` rather than ``group[rows]``: the same gather under compile and vmap, and
    eagerly a few microseconds where indexing parses an index tuple for about 12.
    """
    return unpack(layout_of(experience), [torch.index_select(g, 0, rows) for g in experience])


def copy_state(state: Tree) -> Tree:
    """An independent deep copy of a buffer state (new storage, new shared counter).

    ``add`` donates its input; copy first when an older snapshot must stay usable.
    """
    return tree_map(torch.clone, state)
