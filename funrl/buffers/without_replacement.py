"""Epoch-style minibatching over a fixed batch, without replacement (PPO's sampler).

Each epoch is one uniformly random permutation of the batch, cut into ``num_minibatches``
equal minibatches, so every item is used exactly once per epoch (PureJaxRL's ``ppo.py`` update
loop; CleanRL's ``b_inds`` shuffle). Pure functions of a key: vmappable over keys and batches,
and they compile without graph breaks.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl import random as frandom
from funrl.buffers._core import check_positive_int, flatten_with_path, path_str, tree_map

__all__ = ["minibatches", "epochs"]


def _batch_size(batch: Any, batch_dims: int) -> int:
    paths, leaves, _ = flatten_with_path(batch)
    if not leaves:
        raise ValueError(f"batch: expected a pytree with at least one tensor leaf, got {batch!r}")
    lead = None
    for path, leaf in zip(paths, leaves, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(
                f"batch: leaf {path_str(path)} expected a torch.Tensor, got {type(leaf).__name__}"
            )
        if leaf.dim() < batch_dims:
            raise ValueError(
                f"batch: leaf {path_str(path)} expected at least {batch_dims} batch dim(s), "
                f"got shape {list(leaf.shape)}"
            )
        dims = tuple(leaf.shape[:batch_dims])
        if lead is None:
            lead, first = dims, path
        elif dims != lead:
            raise ValueError(
                f"batch: leaf {path_str(path)} has leading dims {list(dims)} but leaf "
                f"{path_str(first)} has {list(lead)}; all leaves must agree"
            )
    n = 1
    for d in lead:
        n *= d
    return n


def minibatches(key: torch.Tensor, batch: Any, num_minibatches: int, batch_dims: int = 1) -> Any:
    """Shuffle ``batch`` and cut it into ``num_minibatches`` minibatches (one epoch).

    Args:
      key: a ``funrl.random`` key.
      batch: pytree, leaves ``[*batch_shape, ...]`` where ``batch_shape`` is the first
        ``batch_dims`` dims (e.g. ``batch_dims=2`` for time-major rollouts ``[T, E, ...]``;
        they are flattened to ``N = prod(batch_shape)`` items first).
      num_minibatches: must divide ``N``.

    Returns:
      the pytree with leaves ``[num_minibatches, N // num_minibatches, ...]``: item ``i`` of the
      flattened batch appears exactly once across all minibatches.
    """
    check_positive_int(num_minibatches, "num_minibatches")
    check_positive_int(batch_dims, "batch_dims")
    n = _batch_size(batch, batch_dims)
    if n % num_minibatches:
        raise ValueError(f"num_minibatches: expected a divisor of the batch size {n}, got {num_minibatches}")
    order = frandom.permutation(key, n)
    size = n // num_minibatches

    def shuffle(leaf: torch.Tensor) -> torch.Tensor:
        flat = leaf.reshape(n, *leaf.shape[batch_dims:])
        return flat[order].reshape(num_minibatches, size, *leaf.shape[batch_dims:])

    return tree_map(shuffle, batch)


def epochs(key: torch.Tensor, batch: Any, num_epochs: int, num_minibatches: int, batch_dims: int = 1) -> Any:
    """``num_epochs`` independent shuffles: leaves ``[num_epochs, num_minibatches, mb_size, ...]``.

    Epoch ``e`` equals ``minibatches(split(key, num_epochs)[e], batch, num_minibatches)``; fold
    the first two dims together to scan over every minibatch of every epoch.
    """
    check_positive_int(num_epochs, "num_epochs")
    keys = frandom.split(key, num_epochs)
    # vmap over epoch keys: one traced permutation, not num_epochs copies of it, under compile.
    return torch.func.vmap(lambda k: minibatches(k, batch, num_minibatches, batch_dims))(keys)
