"""Packed storage: a buffer keeps its items as one tensor per dtype, one row per item.

A transition (obs f32[17], action f32[6], reward f32, done bool, next_obs f32[17]) stored leaf by
leaf lives in five places, so sampling a random row of a storage larger than the caches waits on
about 7 cache lines, one or two per leaf. Packed, the leaves of one dtype sit side by side in one
row: about 4.5 lines per row and one gather per dtype instead of one per leaf.

Bool leaves (flags: ``done``, ``terminated``, masks) ride as bytes at the end of the row of the
item's largest 4- or 8-byte group, padded to whole elements, rather than in a bool group of their
own: the transition is then one ``[capacity, 42]`` float32 row, its 42nd float holding ``done``'s
byte, and a sample waits on one random row per item instead of two (8 compiled samples of 256 at
1e7 items, in ``benchmarks/buffers.py``: 46.7 -> 35.5 µs each). Eagerly the bool leaves are views
of the row's bytes; where a view of another element size cannot be traced (``torch.compile``,
``torch.func``), they are computed from the row's words with shifts (the same bits on a
little-endian machine; big-endian machines keep a bool group). BENCHMARKS.md has the measurements.

The item structure is static, so it lives in the *type* of the storage: :func:`packed_type` makes
(once per layout) a NamedTuple class ``PackedItems`` whose fields ``group0, group1, ...`` are the
group tensors ``[*storage_dims, width]`` and whose class attribute ``layout`` is the
:class:`ItemLayout`. A buffer state is therefore still a pytree of tensors that vmap, stacking,
``torch.compile`` and every pytree library handle natively, and equal layouts give the same class
(so states from separate ``init`` calls have equal tree structures).
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import optree
import torch

Tree = Any
NAMESPACE = "funrl"

_WORD_INTS = {4: torch.int32, 8: torch.int64}
"""The integer dtype of each element size a row can host bool bytes in."""


def in_transform() -> bool:
    """True while ``torch.compile`` traces or a ``torch.func`` transform (vmap, grad) is active.

    Value-dependent checks (host syncs) run only when this is False, and views that change the
    element size (bool bytes out of a float row) are used only then.
    """
    return torch.compiler.is_compiling() or torch._C._functorch.maybe_current_level() is not None


def path_str(path: tuple[Any, ...]) -> str:
    return "item" + "".join(f"[{p!r}]" for p in path)


@dataclass(frozen=True)
class ItemLayout:
    """Where each leaf of an item lives in the packed storage.

    treespec: the item's structure (optree, ``funrl`` namespace, ``None`` is not a leaf).
    dtypes:   per group, its dtype (groups in order of the dtype's first leaf; no bool group when
              the bool leaves are hosted).
    widths:   per group, its columns (the summed sizes of its leaves, and the host's words of
              bool bytes).
    groups:   per leaf (tree order), its group.
    shapes:   per leaf, the item shape (no storage dims).
    members:  per group, its own-dtype leaves in column order (tree order: a group's row is its
              leaves, flattened, one after the other, then any hosted bool bytes).
    leaf_widths: per leaf, its elements (the item shape's size).
    leaf_dtypes: per leaf, its dtype.
    offsets:  per leaf, its first byte in its group's row.
    hosted:   the bool leaves stored as bytes at the end of another group's row (tree order);
              empty when the item has no bool leaf or no group to host them (``host``: the
              group holding them).
    leaf_paths: per leaf, its path (keys and indices from the root).
    dict_keys: the keys in tree order when the item is a flat dict of tensors (the usual
              transition; its batches are then checked without a pytree flatten), else None.
    dict_order: for such an item, ``(key, leaf position)`` in the example's key order (items
              are rebuilt in that order), else None.
    skeleton: the item with each leaf replaced by its position in tree order. Code traced by
              ``torch.compile`` rebuilds items from it: dynamo cannot use a ``PyTreeSpec`` made
              outside the trace.
    """

    treespec: optree.PyTreeSpec
    dtypes: tuple[torch.dtype, ...]
    widths: tuple[int, ...]
    groups: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    members: tuple[tuple[int, ...], ...]
    leaf_widths: tuple[int, ...]
    leaf_dtypes: tuple[torch.dtype, ...]
    offsets: tuple[int, ...]
    hosted: tuple[int, ...]
    leaf_paths: tuple[tuple[Any, ...], ...]
    dict_keys: tuple[Any, ...] | None
    dict_order: tuple[tuple[Any, int], ...] | None
    skeleton: Tree = field(compare=False, hash=False, repr=False)

    @staticmethod
    def of(example_item: Tree) -> ItemLayout:
        """The layout of ``example_item`` (tensor leaves, no batch dim)."""
        leaves, treespec = optree.tree_flatten(example_item, none_is_leaf=False, namespace=NAMESPACE)
        leaf_dtypes = tuple(leaf.dtype for leaf in leaves)
        shapes = tuple(tuple(leaf.shape) for leaf in leaves)
        leaf_widths = tuple(math.prod(shape) for shape in shapes)
        host = _host_dtype(leaf_dtypes, leaf_widths)
        hosted = tuple(i for i, d in enumerate(leaf_dtypes) if host is not None and d is torch.bool)
        dtypes = list(dict.fromkeys(d for i, d in enumerate(leaf_dtypes) if i not in hosted))
        groups = tuple(dtypes.index(host if i in hosted else d) for i, d in enumerate(leaf_dtypes))
        members = tuple(
            tuple(i for i, g in enumerate(groups) if g == group and i not in hosted)
            for group in range(len(dtypes))
        )
        row_bytes = [0] * len(dtypes)
        offsets = [0] * len(leaves)
        for i in (*itertools.chain.from_iterable(members), *hosted):
            offsets[i] = row_bytes[groups[i]]
            row_bytes[groups[i]] += leaf_widths[i] * leaf_dtypes[i].itemsize
        # a group's row is whole elements: the hosted bytes are padded to the host's element size
        widths = [-(-nbytes // dtype.itemsize) for nbytes, dtype in zip(row_bytes, dtypes, strict=True)]
        flat_dict = type(example_item) is dict and all(type(v) is torch.Tensor for v in example_item.values())
        dict_keys = tuple(p[0] for p in treespec.paths()) if flat_dict else None
        dict_order = tuple((k, dict_keys.index(k)) for k in example_item) if dict_keys is not None else None
        return ItemLayout(
            treespec,
            tuple(dtypes),
            tuple(widths),
            groups,
            shapes,
            members,
            leaf_widths,
            leaf_dtypes,
            tuple(offsets),
            hosted,
            tuple(tuple(p) for p in treespec.paths()),
            dict_keys,
            dict_order,
            optree.tree_unflatten(treespec, list(range(len(leaves)))),
        )

    @functools.cached_property
    def host(self) -> int | None:
        """The group holding the ``hosted`` bool leaves (its dtype 4 or 8 bytes, not complex), or
        None when nothing is hosted."""
        return self.groups[self.hosted[0]] if self.hosted else None

    @functools.cached_property
    def unpack_plan(self) -> UnpackPlan:
        """:func:`unpack`'s steps for this layout (computed on first use, then kept)."""
        groups = []
        for g, members in enumerate(self.members):
            sizes = [self.leaf_widths[i] for i in members]
            if g == self.host:
                sizes.append(_hosted_words(self)[1])
            pieces = tuple((i, self.shapes[i]) for i in members)
            groups.append((g, tuple(sizes) if len(sizes) > 1 else None, pieces))
        hosted = tuple((i, self.offsets[i], self.leaf_widths[i], self.shapes[i]) for i in self.hosted)
        return UnpackPlan(tuple(groups), hosted)

    @property
    def paths(self) -> list[str]:
        return [path_str(p) for p in self.leaf_paths]

    def flatten(self, tree: Tree) -> tuple[list[Any], bool]:
        """``tree``'s leaves in tree order, and whether it has the item's structure (one flatten;
        under ``torch.compile`` the structure is compared by leaf paths)."""
        if not torch.compiler.is_compiling():
            leaves, spec = optree.tree_flatten(tree, none_is_leaf=False, namespace=NAMESPACE)
            return leaves, spec == self.treespec
        # Dynamo can neither use a PyTreeSpec made outside the trace nor flatten a container made
        # inside it; it flattens the traced batch with paths, and paths are plain tuples.
        paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False, namespace=NAMESPACE)
        return leaves, tuple(paths) == self.leaf_paths


def _host_dtype(leaf_dtypes: tuple[torch.dtype, ...], leaf_widths: tuple[int, ...]) -> torch.dtype | None:
    """The dtype whose row hosts the bool leaves: of the 4- and 8-byte real dtypes, the one with
    the most bytes per item (the first on a tie); None without bool leaves or such a dtype, or on
    a big-endian machine (where the traced byte extraction would read the wrong end of a word)."""
    if torch.bool not in leaf_dtypes or sys.byteorder != "little":
        return None
    row_bytes: dict[torch.dtype, int] = {}
    for dtype, width in zip(leaf_dtypes, leaf_widths, strict=True):
        if dtype.itemsize in _WORD_INTS and not dtype.is_complex:
            row_bytes[dtype] = row_bytes.get(dtype, 0) + width * dtype.itemsize
    return max(row_bytes, key=row_bytes.__getitem__, default=None)


_TYPES: dict[ItemLayout, type] = {}


def packed_type(layout: ItemLayout) -> type:
    """The ``PackedItems`` NamedTuple class of ``layout`` (one class per distinct layout)."""
    cls = _TYPES.get(layout)
    if cls is None:
        fields = [f"group{g}" for g in range(len(layout.dtypes))]
        base = collections.namedtuple("PackedItems", fields)  # noqa: PYI024 - fields vary per layout
        doc = "Packed item storage: one tensor ``[*storage_dims, width]`` per dtype (see ``layout``)."
        namespace = {"__slots__": (), "layout": layout, "__doc__": doc, "__reduce__": _reduce_packed}
        made = type("PackedItems", (base,), namespace)
        made.__module__ = __name__
        cls = _TYPES.setdefault(layout, made)
    return cls


def _reduce_packed(packed: Any) -> tuple[Any, tuple[Any, ...]]:
    # The classes are made at run time, so pickle cannot find them by name: rebuild from the layout.
    return _rebuild_packed, (type(packed).layout, tuple(packed))


def _rebuild_packed(layout: ItemLayout, groups: tuple[torch.Tensor, ...]) -> Any:
    return packed_type(layout)(*groups)


def layout_of(packed: Any) -> ItemLayout:
    layout = getattr(type(packed), "layout", None)
    if not isinstance(layout, ItemLayout):
        raise TypeError(f"experience: expected a packed item storage, got {type(packed).__name__}")
    return layout


def is_packed(node: Any) -> bool:
    return isinstance(getattr(type(node), "layout", None), ItemLayout)


def _group_parts(
    layout: ItemLayout, leaves: list[torch.Tensor], batch_dims: tuple[int, ...]
) -> list[list[torch.Tensor]]:
    """Per group, its leaves as ``[*batch_dims, leaf width]`` (views), and for the host the words
    holding the hosted bool bytes."""
    parts: list[list[torch.Tensor]] = [[] for _ in layout.dtypes]
    for i in itertools.chain.from_iterable(layout.members):
        leaf = leaves[i]
        # a 1-d item shape is already [*batch_dims, width]: no view op (each costs ~1 µs eagerly)
        ok = len(layout.shapes[i]) == 1
        parts[layout.groups[i]].append(leaf if ok else leaf.reshape(*batch_dims, layout.leaf_widths[i]))
    if layout.host is not None:
        parts[layout.host].append(_bytes_to_words(layout, [leaves[i] for i in layout.hosted], batch_dims))
    return parts


def _hosted_words(layout: ItemLayout) -> tuple[int, int]:
    """``(first column, columns)`` of the host row's words holding the hosted bool bytes."""
    assert layout.host is not None
    first = layout.offsets[layout.hosted[0]] // layout.dtypes[layout.host].itemsize
    return first, layout.widths[layout.host] - first


def _bytes_to_words(
    layout: ItemLayout, flags: list[torch.Tensor], batch_dims: tuple[int, ...]
) -> torch.Tensor:
    """The hosted bool leaves ``flags`` as the host's words ``[*batch_dims, words]``: their bytes
    one after the other, zero-padded to whole words, byte ``k`` of a word shifted to bits
    ``8k..8k+7`` (little-endian, as ``_host_dtype`` requires). Pointwise ops only (no view that
    changes the element size, no reduction), so this traces under compile and vmap and fuses
    into the add's write."""
    host = layout.dtypes[layout.host]
    size = host.itemsize
    _, words = _hosted_words(layout)
    data = [f.reshape(*batch_dims, layout.leaf_widths[i]) for f, i in zip(flags, layout.hosted, strict=True)]
    ints = (data[0] if len(data) == 1 else torch.cat(data, dim=-1)).to(_WORD_INTS[size])
    nbytes = ints.shape[-1]
    if nbytes == 0:
        return torch.zeros((*batch_dims, 0), dtype=host, device=ints.device)
    packed = None
    for k in range(min(size, nbytes)):
        lane = ints[..., k::size]  # byte k of every word; the last word's may be padding
        if lane.shape[-1] < words:
            lane = torch.nn.functional.pad(lane, (0, words - lane.shape[-1]))
        term = lane << (8 * k) if k else lane
        packed = term if packed is None else packed | term
    assert packed is not None
    return packed.view(host)


def _bool_bytes(layout: ItemLayout, row: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The bytes of the host rows ``row`` (``[*dims, width]``) as bool ``[*dims, n]``, and the row
    byte the first of them is: eagerly a view of the whole row (one op); traced, the hosted words'
    bytes shifted out of them (a view that changes the element size does not trace)."""
    if not in_transform() and row.stride(-1) == 1:
        return row.view(torch.bool), 0
    first, words = _hosted_words(layout)
    size = layout.dtypes[layout.host].itemsize
    shifts = torch.arange(0, 8 * size, 8, dtype=_WORD_INTS[size], device=row.device)
    packed = row.narrow(-1, first, words).view(_WORD_INTS[size])
    return ((packed.unsqueeze(-1) >> shifts) & 0xFF).flatten(-2) != 0, first * size


def pack(layout: ItemLayout, leaves: list[torch.Tensor], batch_dims: tuple[int, ...]) -> list[torch.Tensor]:
    """The group tensors ``[*batch_dims, width]`` of a batch given as flat ``leaves`` (tree order);
    a group of one leaf is a view of it, otherwise one ``cat``."""
    return [p[0] if len(p) == 1 else torch.cat(p, dim=-1) for p in _group_parts(layout, leaves, batch_dims)]


def pack_into(layout: ItemLayout, leaves: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
    """:func:`pack` written straight into ``outs`` (contiguous ``[B, width]`` per group, e.g. storage
    rows): the eager add's write, with no packed copy of the batch in between."""
    for out, p in zip(outs, _group_parts(layout, leaves, tuple(outs[0].shape[:-1])), strict=True):
        if len(p) == 1:
            out.copy_(p[0])
        else:
            torch.cat(p, dim=-1, out=out)


def unpack(layout: ItemLayout, groups: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> Tree:
    """The item pytree of group tensors ``[*dims, width]``: leaves ``[*dims, *item_shape]``, views
    of the groups (one ``split`` per group; hosted bool leaves computed from the host's words when
    traced, see the module's docstring)."""
    plan = layout.unpack_plan
    leaves: list[torch.Tensor | None] = [None] * len(layout.groups)
    for g, sizes, pieces in plan.groups:
        group = groups[g]
        # split_with_sizes: one C++ call (Tensor.split's Python wrapper costs a few µs more eagerly)
        split = group.split_with_sizes(sizes, -1) if sizes else (group,)
        for (i, shape), piece in zip(pieces, split, strict=False):  # the host's last piece: bool bytes
            leaves[i] = (
                piece if len(shape) == 1 else piece.squeeze(-1) if not shape else piece.unflatten(-1, shape)
            )
    if plan.hosted:
        flags, start = _bool_bytes(layout, groups[layout.host])
        for i, at, width, shape in plan.hosted:
            if not shape:
                leaves[i] = flags.select(-1, at - start)
            else:
                piece = flags.narrow(-1, at - start, width)
                leaves[i] = piece if len(shape) == 1 else piece.unflatten(-1, shape)
    return _rebuild(layout, leaves)


class UnpackPlan(NamedTuple):
    """:func:`unpack`'s steps for one layout, worked out once (an eager sample runs them each call).

    groups: per group ``(group, split sizes or None for one piece, ((leaf, item shape), ...))``.
    hosted: per hosted bool leaf ``(leaf, first byte in the host row, bytes, item shape)``.
    """

    groups: tuple[tuple[int, tuple[int, ...] | None, tuple[tuple[int, tuple[int, ...]], ...]], ...]
    hosted: tuple[tuple[int, int, int, tuple[int, ...]], ...]


def _rebuild(layout: ItemLayout, leaves: list[Any]) -> Tree:
    """The item of ``layout``'s structure holding ``leaves`` (tree order); traceable."""
    if layout.dict_order is not None:
        return {k: leaves[i] for k, i in layout.dict_order}
    return optree.tree_map(lambda i: leaves[i], layout.skeleton, none_is_leaf=False, namespace=NAMESPACE)


def item_example(layout: ItemLayout) -> Tree:
    """An item of ``layout``'s structure, dtypes and shapes on the meta device (no data):
    ``ItemLayout.of(item_example(layout)) == layout``."""
    leaves = [
        torch.empty(shape, dtype=dtype, device="meta")
        for dtype, shape in zip(layout.leaf_dtypes, layout.shapes, strict=True)
    ]
    return _rebuild(layout, leaves)


def storage_items(packed: Any) -> Tree:
    """The item pytree of a packed storage: leaves ``[*storage_dims, *item_shape]``, views."""
    return unpack(layout_of(packed), tuple(packed))
