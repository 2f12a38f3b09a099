"""A sum-tree held in one tensor: O(log N) batched updates and stratified proportional sampling.

Layout (as an implicit binary heap, like flashbax's ``sum_tree.py`` and the PER paper's
implementation notes): ``tree`` has ``2 * P`` entries for ``P = next_power_of_two(capacity)``;
entry 1 is the root (the total), entry ``i`` has children ``2i`` and ``2i + 1``, and leaf ``j``
(item ``j``) lives at ``P + j``. Entry 0 is unused. Padding leaves ``capacity .. P - 1`` hold 0,
so they are never sampled. Sums are float64 so that a million small priorities add up without
visible rounding.

Every function is batched over a vector of items, costs ``O(batch * log P)``, writes in place
(``index_put_``) and compiles without graph breaks (the depth is a Python int).
"""

from __future__ import annotations

import torch

__all__ = ["init", "depth", "total", "leaf_values", "update", "sample_stratified", "find"]


def _num_leaves(capacity: int) -> int:
    return 1 << max(0, (capacity - 1).bit_length())


def init(capacity: int, device: torch.device | str | None = None) -> torch.Tensor:
    """An all-zero tree for ``capacity`` items: float64 ``[2 * next_power_of_two(capacity)]``."""
    return torch.zeros(2 * _num_leaves(capacity), dtype=torch.float64, device=device)


def depth(tree: torch.Tensor) -> int:
    """Number of levels below the root (``log2 P``)."""
    return (tree.shape[-1] // 2 - 1).bit_length()


def total(tree: torch.Tensor) -> torch.Tensor:
    """The root: the sum of all leaf values (a float64 scalar)."""
    return tree[1]


def leaf_values(tree: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Values stored for items ``indices``."""
    return tree[tree.shape[-1] // 2 + indices]


def update(tree: torch.Tensor, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Set leaves ``indices`` (int64 ``[B]``) to ``values`` (``[B]``), then refresh their ancestors.

    In place; returns ``tree``. Each ancestor is recomputed as the sum of its two children
    (never by adding a delta), so repeated indices in one call leave a consistent tree and
    rounding errors do not accumulate over updates; for a repeated index one of its values is
    kept (which one is unspecified, as for ``index_put_``).
    """
    leaf_node = indices + tree.shape[-1] // 2
    tree.index_put_((leaf_node,), values.to(tree.dtype))
    for level in range(1, depth(tree) + 1):
        # The ancestor `level` steps up, shifted from the leaf directly: inductor inlines index
        # arithmetic, so a chain `node // 2` per level became depth**2 / 2 vector divisions per
        # item (most of a compiled update's time); a shift is one cheap op per use.
        node = torch.bitwise_right_shift(leaf_node, level)
        left = torch.bitwise_left_shift(node, 1)
        tree.index_put_((node,), tree[left] + tree[left + 1])
    return tree


def find(tree: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Items whose cumulative-value interval holds ``targets`` (values in ``[0, total)``), int64.

    Descends from the root: go right (subtracting the left sum) when the target is at least the
    left child's sum. Only items with a positive value are returned while the total is positive.
    """
    node = torch.ones_like(targets, dtype=torch.int64)
    remaining = targets.to(tree.dtype)
    for _ in range(depth(tree)):
        left = tree[2 * node]
        right = tree[2 * node + 1]
        # Never step into an all-zero subtree, even when rounding puts the target on its edge:
        # a zero-priority item (padding, or an invalid trajectory window) is never returned.
        go_right = ((remaining >= left) & (right > 0)) | (left <= 0)
        remaining = torch.where(go_right, remaining - left, remaining)
        node = 2 * node + go_right.to(torch.int64)
    return node - tree.shape[-1] // 2


def sample_stratified(
    tree: torch.Tensor, uniforms: torch.Tensor, num_items: int | torch.Tensor
) -> torch.Tensor:
    """Stratified proportional sampling: item ``i`` of ``B`` is drawn from the ``i``-th of ``B``
    equal slices of the total mass, at relative position ``uniforms[i]`` in ``[0, 1)``.

    Returns int64 ``[B]`` item indices, clamped to ``[0, num_items - 1]`` against rounding at
    the far edge (a target equal to the total).
    """
    batch = uniforms.shape[-1]
    strata = torch.arange(batch, device=uniforms.device, dtype=torch.float64)
    targets = (strata + uniforms.to(torch.float64)) / batch * total(tree)
    items = find(tree, targets)
    return torch.minimum(items, torch.as_tensor(num_items, device=items.device) - 1).clamp(min=0)
