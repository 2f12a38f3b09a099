"""Sample from several buffers in fixed proportions (online + offline data), like flashbax's mixer.

``mixer(buffers, proportions)`` returns ``Mixer(sample, can_sample, split_sizes)``.
``sample(states, key, batch_size)`` draws ``split_sizes(batch_size)[i]`` items from buffer ``i``
(one independent key each) and concatenates them in buffer order; ``indices`` and ``weights``
are each buffer's own, so ``sample.indices[offset_i : offset_i + size_i]`` go back to buffer
``i``'s ``update_priorities``. Split sizes are static Python ints (the largest-remainder rounding
of ``batch_size * proportion``), so the whole thing compiles and vmaps like the buffers do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from funrl import random as frandom
from funrl.buffers._core import Sample, check_positive_int, flatten_with_path, tree_map

__all__ = ["Mixer", "mixer"]


class Mixer(NamedTuple):
    sample: Callable[..., Sample]
    can_sample: Callable[..., torch.Tensor]
    split_sizes: Callable[[int], tuple[int, ...]]


def _split_sizes(batch_size: int, fractions: tuple[float, ...]) -> tuple[int, ...]:
    exact = [batch_size * f for f in fractions]
    sizes = [math.floor(x) for x in exact]
    # Largest remainder first; ties to the earlier buffer, so the split is deterministic.
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[: batch_size - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


def mixer(buffers: Sequence[Any], proportions: Sequence[float]) -> Mixer:
    """Mix ``buffers`` (each a ``Buffer`` or ``PrioritisedBuffer``) in ``proportions`` (>= 0, any scale).

    Every buffer must hold items of the same tree structure, dtypes and shapes (e.g. two flat
    buffers of transitions); ``states`` passed to ``sample`` / ``can_sample`` are in the same
    order as ``buffers``. ``can_sample`` is true when every buffer with a non-zero share can.
    """
    buffers = tuple(buffers)
    if not buffers:
        raise ValueError("buffers: expected at least one buffer, got none")
    if len(proportions) != len(buffers):
        raise ValueError(
            f"proportions: expected {len(buffers)} values (one per buffer), got {len(proportions)}"
        )
    props = [float(p) for p in proportions]
    if any(not p >= 0 or math.isinf(p) for p in props) or sum(props) <= 0:
        raise ValueError(f"proportions: expected finite non-negative values with a positive sum, got {props}")
    fractions = tuple(p / sum(props) for p in props)

    def split_sizes(batch_size: int) -> tuple[int, ...]:
        check_positive_int(batch_size, "batch_size")
        return _split_sizes(batch_size, fractions)

    def check_states(states: Sequence[Any]) -> None:
        if len(states) != len(buffers):
            raise ValueError(
                f"states: expected {len(buffers)} buffer states (one per buffer), got {len(states)}"
            )

    def can_sample(states: Sequence[Any]) -> torch.Tensor:
        check_states(states)
        ready = [buf.can_sample(s) for buf, s, f in zip(buffers, states, fractions, strict=True) if f > 0]
        return torch.stack(ready).all()

    def sample(states: Sequence[Any], key: torch.Tensor, batch_size: int) -> Sample:
        check_states(states)
        sizes = split_sizes(batch_size)
        keys = frandom.split(key, len(buffers))
        parts = [
            buf.sample(state, keys[i], size)
            for i, (buf, state, size) in enumerate(zip(buffers, states, sizes, strict=True))
            if size > 0
        ]
        first = flatten_with_path(parts[0].items)[2]
        for part in parts[1:]:
            if flatten_with_path(part.items)[2] != first:
                raise ValueError("states: buffers hold items of different tree structures; a mixer needs one")
        items = tree_map(lambda *xs: torch.cat(xs), *[p.items for p in parts])
        return Sample(
            items=items,
            indices=torch.cat([p.indices for p in parts]),
            weights=torch.cat([p.weights for p in parts]),
        )

    return Mixer(sample=sample, can_sample=can_sample, split_sizes=split_sizes)
