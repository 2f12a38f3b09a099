"""Packed storage: a buffer keeps its items as one tensor per dtype, one row per item.

A transition (obs f32[17], action f32[6], reward f32, done bool, next_obs f32[17]) stored leaf by
leaf lives in five places, so sampling a random row of a storage larger than the caches waits on
about 7 cache lines, one or two per leaf. Packed, the leaves of one dtype sit side by side in one
row (``[capacity, 41]`` float32 and ``[capacity, 1]`` bool here): about 4.5 lines per row and one
gather per dtype instead of one per leaf. BENCHMARKS.md has the measurements.

The item structure is static, so it lives in the *type* of the storage: :func:`packed_type` makes
(once per layout) a NamedTuple class ``PackedItems`` whose fields ``group0, group1, ...`` are the
group tensors ``[*storage_dims, width]`` and whose class attribute ``layout`` is the
:class:`ItemLayout`. A buffer state is therefore still a pytree of tensors that vmap, stacking,
``torch.compile`` and every pytree library handle natively, and equal layouts give the same class
(so states from separate ``init`` calls have equal tree structures).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

import optree
import torch

Tree = Any
NAMESPACE = "funrl"


def path_str(path: tuple[Any, ...]) -> str:
    return "item" + "".join(f"[{p!r}]" for p in path)


@dataclass(frozen=True)
class ItemLayout:
    """Where each leaf of an item lives in the packed storage.

    treespec: the item's structure (optree, ``funrl`` namespace, ``None`` is not a leaf).
    dtypes:   per group, its dtype (groups in order of the dtype's first leaf).
    widths:   per group, its columns (the summed sizes of its leaves).
    groups:   per leaf (tree order), its group.
    shapes:   per leaf, the item shape (no storage dims).
    members:  per group, its leaves in column order (tree order: a group's row is its leaves,
              flattened, one after the other).
    leaf_widths: per leaf, its columns (the item shape's size).
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
    leaf_paths: tuple[tuple[Any, ...], ...]
    dict_keys: tuple[Any, ...] | None
    dict_order: tuple[tuple[Any, int], ...] | None
    skeleton: Tree = field(compare=False, hash=False, repr=False)

    @staticmethod
    def of(example_item: Tree) -> ItemLayout:
        """The layout of ``example_item`` (tensor leaves, no batch dim)."""
        leaves, treespec = optree.tree_flatten(example_item, none_is_leaf=False, namespace=NAMESPACE)
        dtypes: list[torch.dtype] = []
        widths: list[int] = []
        groups, shapes = [], []
        for leaf in leaves:
            if leaf.dtype not in dtypes:
                dtypes.append(leaf.dtype)
                widths.append(0)
            g = dtypes.index(leaf.dtype)
            groups.append(g)
            shapes.append(tuple(leaf.shape))
            widths[g] += math.prod(leaf.shape)
        members = tuple(tuple(i for i, lg in enumerate(groups) if lg == g) for g in range(len(dtypes)))
        flat_dict = type(example_item) is dict and all(type(v) is torch.Tensor for v in example_item.values())
        dict_keys = tuple(p[0] for p in treespec.paths()) if flat_dict else None
        dict_order = tuple((k, dict_keys.index(k)) for k in example_item) if dict_keys is not None else None
        return ItemLayout(
            treespec,
            tuple(dtypes),
            tuple(widths),
            tuple(groups),
            tuple(shapes),
            members,
            tuple(math.prod(shape) for shape in shapes),
            tuple(tuple(p) for p in treespec.paths()),
            dict_keys,
            dict_order,
            optree.tree_unflatten(treespec, list(range(len(leaves)))),
        )

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
    """Per group, its leaves as ``[*batch_dims, leaf width]`` (views)."""
    parts: list[list[torch.Tensor]] = [[] for _ in layout.dtypes]
    for i, leaf in enumerate(leaves):
        # a 1-d item shape is already [*batch_dims, width]: no view op (each costs ~1 µs eagerly)
        ok = len(layout.shapes[i]) == 1
        parts[layout.groups[i]].append(leaf if ok else leaf.reshape(*batch_dims, layout.leaf_widths[i]))
    return parts


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
    of the groups (one ``split`` per group)."""
    leaves: list[torch.Tensor | None] = [None] * len(layout.groups)
    for group, members in zip(groups, layout.members, strict=True):
        # split_with_sizes: one C++ call (Tensor.split's Python wrapper costs a few µs more eagerly)
        pieces = (
            group.split_with_sizes([layout.leaf_widths[i] for i in members], -1)
            if len(members) > 1
            else (group,)
        )
        for i, piece in zip(members, pieces, strict=True):
            shape = layout.shapes[i]
            leaves[i] = (
                piece.squeeze(-1) if not shape else piece if len(shape) == 1 else piece.unflatten(-1, shape)
            )
    return _rebuild(layout, leaves)


def _rebuild(layout: ItemLayout, leaves: list[Any]) -> Tree:
    """The item of ``layout``'s structure holding ``leaves`` (tree order); traceable."""
    if layout.dict_order is not None:
        return {k: leaves[i] for k, i in layout.dict_order}
    return optree.tree_map(lambda i: leaves[i], layout.skeleton, none_is_leaf=False, namespace=NAMESPACE)


def item_example(layout: ItemLayout) -> Tree:
    """An item of ``layout``'s structure, dtypes and shapes on the meta device (no data):
    ``ItemLayout.of(item_example(layout)) == layout``."""
    leaves = [
        torch.empty(shape, dtype=layout.dtypes[g], device="meta")
        for g, shape in zip(layout.groups, layout.shapes, strict=True)
    ]
    return _rebuild(layout, leaves)


def storage_items(packed: Any) -> Tree:
    """The item pytree of a packed storage: leaves ``[*storage_dims, *item_shape]``, views."""
    return unpack(layout_of(packed), tuple(packed))
