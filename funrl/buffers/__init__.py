"""Replay buffers as pure functions over pytrees of tensors (flashbax for PyTorch).

``buf = flat(capacity)`` (or ``trajectory(...)``, ``prioritised(...)``) gives
``Buffer(init, add, sample, can_sample)``::

    state = buf.init(example_item)            # one item, no batch dim
    state = buf.add(state, batch)             # leaves [B, ...]; donates `state` (in-place write)
    sample = buf.sample(state, key, 256)      # Sample(items, indices, weights)

``add`` writes into the storage of the state it receives and returns the state to use from then
on; using an older state raises :class:`StaleStateError` in eager mode (see ``_core``).
``add`` and ``sample`` cost O(batch), vmap over stacked states (one buffer per seed) and compile
with ``torch.compile(fullgraph=True)``. ``state.experience`` is the item pytree with storage dims
in front of every leaf (``[capacity, ...]``), as in flashbax: ``add`` writes each leaf's new rows
with one ``index_put_``, ``sample`` gathers each leaf's rows with one index.

Also here:

- ``prioritised(capacity, alpha, beta)`` / ``prioritised_trajectory(...)``: proportional PER on a
  tensor sum-tree, with ``update_priorities(state, indices, priorities)``;
- ``without_replacement.minibatches(key, batch, num_minibatches)`` (and ``epochs``): PPO's
  shuffle-and-split sampler over a fixed batch;
- ``mixer(buffers, proportions)``: one sample drawn from several buffers in fixed shares;
- ``save(state, path)`` / ``load(path, mmap=True)``: atomic, checksummed, memory-mapped files;
- ``to_tensordict`` / ``from_tensordict``: items under TorchRL's keys, both ways.
"""

from funrl.buffers import sum_tree, without_replacement
from funrl.buffers._core import Buffer, Sample, StaleStateError, copy_state
from funrl.buffers.flat_buffer import FlatState, flat, items_in_order
from funrl.buffers.interop import TORCHRL_KEYS, from_tensordict, to_tensordict
from funrl.buffers.mixer import Mixer, mixer
from funrl.buffers.persistence import BufferFileError, load, save
from funrl.buffers.prioritised_buffer import (
    PrioritisedBuffer,
    PrioritisedState,
    prioritised,
    prioritised_trajectory,
)
from funrl.buffers.trajectory_buffer import TrajectoryState, trajectory
from funrl.buffers.without_replacement import minibatches

__all__ = [
    "Buffer",
    "Sample",
    "StaleStateError",
    "copy_state",
    "FlatState",
    "flat",
    "items_in_order",
    "TrajectoryState",
    "trajectory",
    "PrioritisedBuffer",
    "PrioritisedState",
    "prioritised",
    "prioritised_trajectory",
    "sum_tree",
    "Mixer",
    "mixer",
    "save",
    "load",
    "BufferFileError",
    "TORCHRL_KEYS",
    "to_tensordict",
    "from_tensordict",
    "without_replacement",
    "minibatches",
]
