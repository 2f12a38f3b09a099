"""Pytree helpers on optree: params dicts, NamedTuple states and their batched (stacked) forms.

``NamedTuple`` states are pytrees natively in optree, in torch's own pytree library (so ``vmap`` and
``torch.compile`` see through them) and in tensordict, so all three agree on their structure;
``register_state`` exists for users' own non-NamedTuple containers.

Leading-dimension helpers (``stack``, ``unstack``, ``index``, ``concatenate``) are what turns one
network into an ensemble, one run into a batch of seeds, and back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import optree
import torch

from funrl import control

__all__ = [
    "map",
    "map_with_path",
    "leaves",
    "structure",
    "flatten",
    "unflatten",
    "stack",
    "unstack",
    "index",
    "concatenate",
    "tree_equal",
    "tree_allclose",
    "size_bytes",
    "num_elements",
    "to",
    "zeros_like",
    "register_state",
    "check_same_structure",
]

Tree = Any
_NAMESPACE = "funrl"


def _is_none(x: Any) -> bool:
    return x is None


def map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:  # noqa: A001 - optax/jax name
    """Apply ``fn`` leaf-wise over ``tree`` (and trees of the same structure in ``rest``)."""
    for i, other in enumerate(rest):
        check_same_structure(tree, other, f"rest[{i}]")
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False, namespace=_NAMESPACE)


def map_with_path(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    """Like :func:`map`, with the leaf's path (a tuple of keys) as ``fn``'s first argument."""
    for i, other in enumerate(rest):
        check_same_structure(tree, other, f"rest[{i}]")
    return optree.tree_map_with_path(fn, tree, *rest, namespace=_NAMESPACE)


def leaves(tree: Tree) -> list[Any]:
    """The leaves of ``tree`` in optree's canonical order (dict keys sorted)."""
    return optree.tree_leaves(tree, namespace=_NAMESPACE)


def structure(tree: Tree) -> optree.PyTreeSpec:
    """The tree structure (a ``PyTreeSpec``) of ``tree``."""
    return optree.tree_structure(tree, namespace=_NAMESPACE)


def flatten(tree: Tree) -> tuple[list[Any], optree.PyTreeSpec]:
    """``(leaves, structure)`` of ``tree``."""
    return optree.tree_flatten(tree, namespace=_NAMESPACE)


def unflatten(spec: optree.PyTreeSpec, leaves_: Sequence[Any]) -> Tree:
    """Inverse of :func:`flatten`."""
    return optree.tree_unflatten(spec, list(leaves_))


def check_same_structure(a: Tree, b: Tree, name: str = "tree") -> None:
    """Raise ``ValueError`` naming ``name`` if ``b``'s structure differs from ``a``'s."""
    sa, sb = structure(a), structure(b)
    if sa != sb:
        raise ValueError(f"{name}: expected tree structure {sa}, got {sb}")


def _check_tensor_leaves(tree: Tree, name: str) -> list[torch.Tensor]:
    out = leaves(tree)
    for path, leaf in zip(optree.tree_paths(tree, namespace=_NAMESPACE), out, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"{name}: expected tensor leaves, got {type(leaf).__name__} at path {path}")
    return out


def stack(trees: Sequence[Tree], dim: int = 0) -> Tree:
    """Stack a sequence of same-structure trees leaf-wise along a new dimension ``dim``.

    ``stack([params_1, ..., params_k])`` is an ensemble of ``k`` networks for ``vmap``.
    """
    if isinstance(trees, torch.Tensor) or not isinstance(trees, Sequence) or len(trees) == 0:
        raise ValueError("trees: expected a non-empty sequence of pytrees")
    first = trees[0]
    for i, t in enumerate(trees[1:], start=1):
        check_same_structure(first, t, f"trees[{i}]")
    per_tree = [_check_tensor_leaves(t, f"trees[{i}]") for i, t in enumerate(trees)]
    stacked = [torch.stack(group, dim=dim) for group in zip(*per_tree, strict=True)]
    return unflatten(structure(first), stacked)


def unstack(tree: Tree, dim: int = 0) -> list[Tree]:
    """Inverse of :func:`stack`: split every leaf along ``dim`` into a list of trees."""
    flat, spec = flatten(tree)
    _check_tensor_leaves(tree, "tree")
    if not flat:
        raise ValueError("tree: expected at least one tensor leaf to unstack")
    sizes = {leaf.shape[dim] for leaf in flat}
    if len(sizes) != 1:
        raise ValueError(f"tree: expected every leaf to share dimension {dim}, got sizes {sizes}")
    parts = [leaf.unbind(dim) for leaf in flat]
    return [unflatten(spec, group) for group in zip(*parts, strict=True)]


def index(tree: Tree, idx: Any) -> Tree:
    """Index every leaf's leading dimensions with ``idx`` (an int, slice or index tensor)."""
    return map(lambda x: x[idx], tree)


def concatenate(trees: Sequence[Tree], dim: int = 0) -> Tree:
    """Concatenate same-structure trees leaf-wise along an existing dimension ``dim``."""
    if not trees:
        raise ValueError("trees: expected a non-empty sequence of pytrees")
    for i, t in enumerate(trees[1:], start=1):
        check_same_structure(trees[0], t, f"trees[{i}]")
    groups = zip(*[leaves(t) for t in trees], strict=True)
    return unflatten(structure(trees[0]), [torch.cat(g, dim=dim) for g in groups])


def tree_equal(a: Tree, b: Tree) -> bool:
    """True when ``a`` and ``b`` have the same structure and bitwise-equal leaves (NaNs equal)."""
    if structure(a) != structure(b):
        return False
    for x, y in zip(leaves(a), leaves(b), strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not torch.equal(x, y) and not bool(
                torch.all((x == y) | (torch.isnan(x) & torch.isnan(y)))
                if x.dtype.is_floating_point
                else False
            ):
                return False
        elif x != y:
            return False
    return True


def tree_allclose(a: Tree, b: Tree, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """True when ``a`` and ``b`` have the same structure and leaves close as ``torch.allclose``."""
    if structure(a) != structure(b):
        return False
    for x, y in zip(leaves(a), leaves(b), strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return False
            if not torch.allclose(x, y.to(x.dtype), rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def size_bytes(tree: Tree) -> int:
    """Total bytes held by the tensor leaves of ``tree``."""
    return sum(x.numel() * x.element_size() for x in leaves(tree) if isinstance(x, torch.Tensor))


def num_elements(tree: Tree) -> int:
    """Total number of elements in the tensor leaves of ``tree`` (e.g. a network's parameters)."""
    return sum(x.numel() for x in leaves(tree) if isinstance(x, torch.Tensor))


def to(
    tree: Tree,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tree:
    """Move tensor leaves to ``device``; cast floating leaves to ``dtype`` (integer leaves keep theirs)."""

    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        target = dtype if dtype is not None and x.dtype.is_floating_point else x.dtype
        return x.to(device=device, dtype=target)

    return map(move, tree)


def zeros_like(tree: Tree) -> Tree:
    """A tree of zeros with ``tree``'s structure, shapes and dtypes."""
    return map(torch.zeros_like, tree)


def register_state(cls: type) -> type:
    """Register a dataclass as a pytree with optree (namespace ``funrl``) and with torch's pytree
    library (through :func:`funrl.control.register_pytree_node`).

    NamedTuples need no registration; use this for a ``@dataclass`` state of your own. Fields
    are children; the class is rebuilt with them in declaration order.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"cls: expected a dataclass type, got {cls!r}")
    names = [f.name for f in dataclasses.fields(cls)]

    def flatten_fn(obj: Any) -> tuple[list[Any], None, tuple[str, ...]]:
        return [getattr(obj, n) for n in names], None, tuple(names)

    def unflatten_fn(_: None, children: Sequence[Any]) -> Any:
        return cls(**dict(zip(names, children, strict=True)))

    optree.register_pytree_node(cls, flatten_fn, unflatten_fn, namespace=_NAMESPACE)
    control.register_pytree_node(
        cls,
        lambda obj: ([getattr(obj, n) for n in names], None),
        lambda children, _: cls(**dict(zip(names, children, strict=True))),
    )
    return cls
