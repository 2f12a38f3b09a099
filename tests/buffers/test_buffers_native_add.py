"""The eager add's C++ row writer (``_core.write_ring_native``) and the eager sample's draw-and-gather
kernel (``_core.draw_rows_native``) against the torch ops they stand in for: the same bytes in the
same rows for any item layout, and the torch ops wherever something must see them (a dispatch
mode, a non-contiguous leaf, a tensor subclass)."""

from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree
from funrl.buffers import _core, flat_buffer, trajectory_buffer

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]
SHAPES = [(), (1,), (3,), (2, 2), (0,)]


def random_leaf(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -(2**31)), min(info.max, 2**31 - 1), shape, generator=generator).to(
        dtype
    )


@st.composite
def item_layouts(draw) -> dict:
    """An example item: 1-5 leaves of any dtype and shape, a nested one among them sometimes."""
    leaves = draw(
        st.lists(st.tuples(st.sampled_from(DTYPES), st.sampled_from(SHAPES)), min_size=1, max_size=5)
    )
    item = {f"leaf{i}": torch.zeros(shape, dtype=dtype) for i, (dtype, shape) in enumerate(leaves)}
    if draw(st.booleans()) and len(item) > 1:  # a nested pytree (the non-dict path of the checks)
        first, *rest = item
        item = {"nested": (item[first], {"inner": item[rest[0]]}), **{k: item[k] for k in rest[1:]}}
    return item


def batch_like(example, batch_dims: tuple[int, ...], generator: torch.Generator):
    return _core.tree_map(lambda x: random_leaf((*batch_dims, *x.shape), x.dtype, generator), example)


def recording_native_calls():
    """``write_ring_native`` wrapped to record what it returned (True: the kernel wrote)."""
    results: list[bool] = []
    real = _core.write_ring_native

    def spy(*args):
        results.append(real(*args))
        return results[-1]

    return results, spy


def adds_write_alike(buf, module, example, batches) -> None:
    """Add ``batches`` in turn to two states of ``buf``, one through the kernel and one with it
    off in ``module`` (the buffer's module): after every add the storages and counts agree."""
    results, spy = recording_native_calls()
    native, torch_ops = buf.init(example), buf.init(example)
    for batch in batches:
        with mock.patch.object(module, "write_ring_native", spy):
            native = buf.add(native, batch)
        with mock.patch.object(module, "write_ring_native", return_value=False):
            torch_ops = buf.add(torch_ops, batch)
        assert all(torch.equal(x, y) for x, y in zip(native.experience, torch_ops.experience, strict=True))
        assert int(native.count) == int(torch_ops.count) == int(native.storage_count)
    assert results == [True] * len(batches)  # every add above went through the kernel


def test_the_kernel_builds_here():
    # Every comparison below is vacuous without it: CI has the compiler torch.compile needs.
    assert _core._RING_ROWS.get() is not None


@settings(max_examples=40, deadline=None)
@given(
    example=item_layouts(),
    capacity=st.integers(1, 12),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    seed=st.integers(0, 2**31),
)
def test_flat_native_add_writes_what_the_torch_ops_write(example, capacity, sizes, seed):
    buf = fb.flat(capacity)
    generator = torch.Generator().manual_seed(seed)
    batches = [batch_like(example, (size,), generator) for size in sizes]
    adds_write_alike(buf, flat_buffer, example, batches)


@settings(max_examples=30, deadline=None)
@given(
    example=item_layouts(),
    num_envs=st.integers(1, 4),
    max_length=st.integers(1, 9),
    steps=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    seed=st.integers(0, 2**31),
)
def test_trajectory_native_add_writes_what_the_torch_ops_write(example, num_envs, max_length, steps, seed):
    buf = fb.trajectory(num_envs, max_length, sequence_length=1)
    generator = torch.Generator().manual_seed(seed)
    batches = [batch_like(example, (num_envs, min(t, max_length)), generator) for t in steps]
    adds_write_alike(buf, trajectory_buffer, example, batches)


def transition(size: int, start: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.arange(start, start + size)
    return {"obs": ids[:, None].float() * torch.tensor([1.0, 2.0, 3.0]), "done": ids % 2 == 0}


def test_a_non_contiguous_leaf_is_written_by_torch_ops():
    buf = fb.flat(5)
    state = buf.init({"obs": torch.zeros(3), "done": torch.zeros((), dtype=torch.bool)})
    batch = transition(4)
    batch["obs"] = batch["obs"].t().contiguous().t()  # same values, column-major
    results, spy = recording_native_calls()
    with mock.patch.object(flat_buffer, "write_ring_native", spy):
        state = buf.add(state, batch)
    assert results == [False]
    assert torch.equal(fb.items_in_order(state)["obs"], transition(4)["obs"])


def test_a_tensor_subclass_leaf_is_written_by_torch_ops():
    buf = fb.flat(5)
    state = buf.init({"obs": torch.zeros(3), "done": torch.zeros((), dtype=torch.bool)})
    batch = transition(4)
    batch["obs"] = torch.nn.Parameter(batch["obs"], requires_grad=False)  # a subclass of Tensor
    results, spy = recording_native_calls()
    with mock.patch.object(flat_buffer, "write_ring_native", spy):
        state = buf.add(state, batch)
    assert results == [False]
    assert torch.equal(fb.items_in_order(state)["obs"], transition(4)["obs"])


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("buffer", ["flat", "trajectory"])
def test_a_dispatch_mode_sees_the_writes_as_torch_ops(buffer):
    # Anything that records or transforms ops (a profiler, a tracer) must see the add's writes.
    if buffer == "flat":
        buf, batch = fb.flat(6), transition(4)
    else:
        buf, batch = (
            fb.trajectory(2, 6, sequence_length=1),
            _core.tree_map(lambda x: x.reshape(2, 2, *x.shape[1:]), transition(4)),
        )
    state = buf.init({"obs": torch.zeros(3), "done": torch.zeros((), dtype=torch.bool)})
    recorder = _Recorder()
    with recorder:
        new = buf.add(state, batch)
    writes = [op for op in recorder.ops if "copy_" in op or "cat" in op or "index_put" in op]
    assert writes, recorder.ops
    stored = fb.storage_items(new.experience)["obs"].reshape(-1, 3)
    assert stored.abs().sum() == batch["obs"].abs().sum()


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "torch-ops"])
@pytest.mark.parametrize("buffer", ["flat", "trajectory"])
def test_re_adding_stored_items_as_views_writes_their_values_before_the_add(buffer, native):
    # Views of the storage's own rows, written one row after them (head 6 <- row 5, 7 <- 6, ...):
    # every item must land as it was before the add, where a row-by-row copy in place would read
    # row 6 after writing it.
    example = {"obs": torch.zeros(2), "done": torch.zeros((), dtype=torch.bool)}
    if buffer == "flat":
        buf, module, first = fb.flat(8), flat_buffer, transition(6)
        first["obs"] = first["obs"][:, :2]
        rows = (slice(5, 8),)
    else:
        buf, module = fb.trajectory(2, 8, sequence_length=1), trajectory_buffer
        first = _core.tree_map(lambda x: x.reshape(2, 3, *x.shape[1:]), transition(6))
        first["obs"] = first["obs"][..., :2]
        rows = (slice(None), slice(2, 5))
    state = buf.add(buf.init(example), first)

    def view(state):
        return _core.tree_map(lambda x: x[rows], fb.storage_items(state.experience))

    expected = _core.tree_map(torch.clone, view(state))
    reference = buf.add(fb.copy_state(state), expected)
    with mock.patch.object(
        module, "write_ring_native", _core.write_ring_native if native else lambda *a: False
    ):
        state = buf.add(state, view(state))
    assert all(torch.equal(a, b) for a, b in zip(state.experience, reference.experience, strict=True))


def samples_alike(buf, state, keys, batch_size) -> None:
    """Eager samples of ``state`` with ``keys``, through the draw-and-gather kernel and with it off:
    the same indices and items; every native call must have stood in."""
    results: list[bool] = []
    real = _core.draw_rows_native

    def spy(*args):
        out = real(*args)
        results.append(out is not None)
        return out

    for key in keys:
        with mock.patch.object(flat_buffer, "draw_rows_native", spy):
            native = buf.sample(state, key, batch_size)
        with mock.patch.object(flat_buffer, "draw_rows_native", return_value=None):
            torch_ops = buf.sample(state, key, batch_size)
        assert tree.tree_equal(native, torch_ops)  # indices, items (same dtypes and shapes), weights
    assert results == [True] * len(keys)


@settings(max_examples=40, deadline=None)
@given(
    example=item_layouts(),
    capacity=st.integers(1, 40),
    added=st.integers(1, 60),
    batch_size=st.integers(1, 50),
    seed=st.integers(0, 2**31),
)
def test_flat_native_sample_draws_and_gathers_what_the_torch_ops_do(
    example, capacity, added, batch_size, seed
):
    buf = fb.flat(capacity)
    generator = torch.Generator().manual_seed(seed)
    state = buf.add(buf.init(example), batch_like(example, (added,), generator))
    keys = list(frandom.split(frandom.key(seed), 3))
    keys.append(frandom.split(frandom.key(seed + 1), 4).t()[:, 2])  # a strided key
    samples_alike(buf, state, keys, batch_size)


def test_the_sample_kernel_steps_aside_for_modes_subclasses_and_bad_keys():
    buf = fb.flat(6)
    state = buf.add(buf.init({"obs": torch.zeros(3)}), {"obs": torch.randn(4, 3)})
    key = frandom.key(0)
    with TorchDispatchMode():
        assert _core.draw_rows_native(state.experience, key, 5, 4) is None
    assert _core.draw_rows_native(state.experience, key.to(torch.int32), 5, 4) is None
    mapped = type(state.experience)(torch.nn.Parameter(state.experience[0], requires_grad=False))
    assert _core.draw_rows_native(mapped, key, 5, 4) is None
    # the torch path then words the bad key
    with pytest.raises(TypeError, match="key: expected dtype torch.int64"):
        buf.sample(state, key.to(torch.int32), 5)
    assert _core.draw_rows_native(state.experience, "not a key", 5, 4) is None
    with pytest.raises(TypeError, match="key: expected a key tensor"):
        buf.sample(state, "not a key", 5)


def test_a_group_of_zero_size_leaves_samples_through_the_kernel():
    # its storage has no memory (data_ptr 0): the kernel copies nothing from it
    buf = fb.flat(5)
    example = {"empty": torch.zeros(0), "id": torch.zeros((), dtype=torch.int64)}
    state = buf.add(buf.init(example), {"empty": torch.zeros(3, 0), "id": torch.arange(3)})
    assert state.experience[0].shape == (5, 0)
    samples_alike(buf, state, list(frandom.split(frandom.key(7), 3)), 4)
