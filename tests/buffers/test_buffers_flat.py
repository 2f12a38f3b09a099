"""Flat (uniform, circular) buffer: contents, sampling, donation rule, errors, vmap, compile."""

import errno
import mmap
from unittest import mock

import pytest
import torch
from buffer_checks import compiled_add_and_sample_equal_eager
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree
from funrl.buffers._core import HUGE_PAGE_BYTES, ring_rows, storage_zeros, write_ring_slices


def example_item():
    return {
        "obs": torch.zeros(3),
        "action": torch.zeros((), dtype=torch.int64),
        "done": torch.zeros((), dtype=torch.bool),
    }


def make_batch(start: int, size: int):
    ids = torch.arange(start, start + size)
    return {
        "obs": ids[:, None].float() * torch.tensor([1.0, 10.0, 100.0]),
        "action": ids,
        "done": ids % 3 == 0,
    }


def fill(buf, sizes):
    state = buf.init(example_item())
    total = 0
    for size in sizes:
        state = buf.add(state, make_batch(total, size))
        total += size
    return state, total


@given(capacity=st.integers(1, 20), sizes=st.lists(st.integers(1, 25), min_size=1, max_size=8))
def test_keeps_exactly_the_last_capacity_items_in_order(capacity, sizes):
    buf = fb.flat(capacity)
    state, total = fill(buf, sizes)
    kept = min(total, capacity)
    assert int(state.count) == total
    assert tree.tree_equal(fb.items_in_order(state), make_batch(total - kept, kept))


@given(
    capacity=st.integers(1, 20),
    sizes=st.lists(st.integers(1, 25), min_size=1, max_size=6),
    seed=st.integers(0, 2**31),
)
def test_every_sampled_item_was_added_and_is_still_stored(capacity, sizes, seed):
    buf = fb.flat(capacity)
    state, total = fill(buf, sizes)
    sample = buf.sample(state, frandom.key(seed), 64)
    ids = sample.items["action"]
    kept = min(total, capacity)
    assert bool(((ids >= total - kept) & (ids < total)).all())
    # each sampled item is the whole stored row at its index, leaves kept together
    assert tree.tree_equal(
        sample.items, tree.map(lambda x: x[sample.indices], fb.storage_items(state.experience))
    )
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[ids], make_batch(0, total)))
    assert torch.equal(sample.weights, torch.ones(64))


def test_sampling_is_uniform_over_stored_items():
    buf = fb.flat(10)
    state, _ = fill(buf, [7, 7])  # 14 added, the last 10 kept
    n = 20000
    ids = buf.sample(state, frandom.key(3), n).items["action"]
    counts = torch.bincount(ids - 4, minlength=10).double()
    assert counts.sum() == n
    expected = n / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 9 degrees of freedom: P(chi2 > 27.9) = 0.001 under uniformity.
    assert chi2 < 27.9, chi2


def test_sample_is_pure_and_key_dependent():
    buf = fb.flat(50)
    state, _ = fill(buf, [40])
    a = buf.sample(state, frandom.key(0), 16)
    b = buf.sample(state, frandom.key(0), 16)
    c = buf.sample(state, frandom.key(1), 16)
    assert tree.tree_equal(a, b)
    assert not torch.equal(a.indices, c.indices)


def test_add_costs_one_write_per_item_and_shares_storage():
    buf = fb.flat(8)
    state = buf.init(example_item())
    storage = fb.storage_items(state.experience)["obs"]
    new = buf.add(state, make_batch(0, 3))
    # donated: the same storage tensors, written in place, rows beyond the batch untouched
    # (two groups: float32 obs with done's byte at the end of its row, int64 action)
    assert len(new.experience) == 2 and all(
        a is b for a, b in zip(new.experience, state.experience, strict=True)
    )
    assert torch.equal(storage[:3], make_batch(0, 3)["obs"])
    assert torch.equal(storage[3:], torch.zeros(5, 3))


def test_stale_state_raises_on_add_and_sample():
    buf = fb.flat(8)
    old = buf.init(example_item())
    new = buf.add(old, make_batch(0, 3))
    with pytest.raises(fb.StaleStateError, match="add: state is stale"):
        buf.add(old, make_batch(3, 1))
    with pytest.raises(fb.StaleStateError, match="sample: state is stale"):
        buf.sample(old, frandom.key(0), 2)
    newer = buf.add(new, make_batch(3, 1))  # the returned state stays usable
    with pytest.raises(fb.StaleStateError):
        buf.sample(new, frandom.key(0), 2)
    assert int(newer.count) == 4


def test_copy_state_keeps_an_independent_snapshot():
    buf = fb.flat(4)
    state, _ = fill(buf, [3])
    snapshot = fb.copy_state(state)
    state = buf.add(state, make_batch(3, 4))
    assert tree.tree_equal(fb.items_in_order(snapshot), make_batch(0, 3))
    assert tree.tree_equal(fb.items_in_order(state), make_batch(3, 4))
    snapshot = buf.add(snapshot, make_batch(100, 1))  # a copy has its own counter
    assert tree.tree_equal(
        fb.items_in_order(snapshot), tree.concatenate([make_batch(0, 3), make_batch(100, 1)])
    )


def test_sampling_before_min_length_is_a_clear_error():
    buf = fb.flat(10, min_length=5)
    state = buf.init(example_item())
    assert not bool(buf.can_sample(state))
    with pytest.raises(ValueError, match="holds 0 items, fewer than min_length=5"):
        buf.sample(state, frandom.key(0), 4)
    state = buf.add(state, make_batch(0, 4))
    assert not bool(buf.can_sample(state))
    state = buf.add(state, make_batch(4, 1))
    assert bool(buf.can_sample(state))
    buf.sample(state, frandom.key(0), 4)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"obs": torch.zeros(2, 3)}, r"missing leaves: \[\"item\['action'\]\", \"item\['done'\]\"\]"),
        ({**make_batch(0, 2), "done": [True, False]}, r"unexpected leaves: \[\"item\['done'\]\[0\]\""),
        (
            {**make_batch(0, 2), "obs": torch.zeros(2, 3, dtype=torch.float64)},
            r"leaf item\['obs'\] expected dtype torch.float32",
        ),
        ({**make_batch(0, 2), "obs": torch.zeros(2, 4)}, r"leaf item\['obs'\] expected shape"),
        ({**make_batch(0, 2), "obs": torch.zeros(3)}, r"leaf item\['obs'\] expected shape"),
        # the first leaf in tree order (keys sorted) sets the batch dims: it must have one
        ({**make_batch(0, 2), "action": torch.tensor(3)}, r"leaf item\['action'\] expected shape"),
        (
            {**make_batch(0, 2), "action": torch.zeros(3, dtype=torch.int64)},
            r"leaf item\['done'\] has leading batch dims \[2\] but leaf item\['action'\] has \[3\]",
        ),
        ({**make_batch(0, 2), "done": 1.0}, r"leaf item\['done'\] expected a torch.Tensor, got float"),
    ],
)
def test_bad_batch_names_the_leaf(bad, match):
    buf = fb.flat(8)
    state = buf.init(example_item())
    with pytest.raises((ValueError, TypeError), match=match):
        buf.add(state, bad)
    # nothing was written, the state is still fresh
    assert int(state.count) == 0 and int(state.storage_count) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="capacity: expected a positive int, got 0"):
        fb.flat(0)
    with pytest.raises(ValueError, match="min_length"):
        fb.flat(4, min_length=-1)
    buf = fb.flat(4)
    with pytest.raises(TypeError, match=r"example_item: leaf item\['x'\] expected a torch.Tensor"):
        buf.init({"x": 1.0})
    state, _ = fill(buf, [2])
    with pytest.raises(ValueError, match="batch_size: expected a positive int, got 0"):
        buf.sample(state, frandom.key(0), 0)


@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=4), seed=st.integers(0, 2**31))
def test_vmap_over_buffer_states_equals_a_loop(sizes, seed):
    num_seeds, capacity = 3, 7
    buf = fb.flat(capacity)
    keys = frandom.split(frandom.key(seed), num_seeds)
    # one buffer per seed; seeds start from different fills so their heads differ
    singles = [fill(buf, [s + 1])[0] for s in range(num_seeds)]
    batched = tree.stack([fb.copy_state(s) for s in singles])
    for step, size in enumerate(sizes):
        batches = [make_batch(1000 * step + 100 * s, size) for s in range(num_seeds)]
        singles = [buf.add(s, b) for s, b in zip(singles, batches, strict=True)]
        batched = vmap(buf.add)(batched, tree.stack(batches))
    assert tree.tree_equal(batched, tree.stack(singles))
    looped = tree.stack([buf.sample(s, k, 5) for s, k in zip(singles, keys, strict=True)])
    mapped = vmap(buf.sample, in_dims=(0, 0, None))(batched, keys, 5)
    assert tree.tree_equal(mapped, looped)


@pytest.mark.slow
def test_compiled_add_and_sample_equal_eager_without_graph_breaks():
    buf = fb.flat(6)
    steps = [(make_batch(start, 4), frandom.key(start)) for start in (0, 4, 8, 12)]  # wraps twice
    mine, _ = compiled_add_and_sample_equal_eager(buf, fill(buf, [])[0], steps, 5)
    with pytest.raises(fb.StaleStateError):  # the compiled add advanced the shared counter
        buf.add(fb.FlatState(mine.experience, mine.count - 4, mine.storage_count), make_batch(0, 4))


@given(
    capacity=st.integers(1, 30),
    head=st.integers(0, 29),
    length=st.integers(0, 30),
    count=st.integers(0, 10**12),
)
def test_eager_slice_writes_equal_the_traced_index_writes(capacity, head, length, count):
    # eager add writes slices at a Python-int head; traced add (compile, vmap) writes rows
    # ring_rows(count, ...) with index_put_: both must put every item in the same row
    head, length = head % capacity, min(length, capacity)
    stored = [torch.zeros(capacity, 2), torch.zeros(capacity, dtype=torch.int64)]
    new = [torch.randn(length, 2), torch.arange(1, length + 1)]
    write_ring_slices(stored, head, new)
    indexed = [torch.zeros(capacity, 2), torch.zeros(capacity, dtype=torch.int64)]
    rows = ring_rows(torch.tensor(head), length, capacity)
    for s, b in zip(indexed, new, strict=True):
        s.index_put_((rows,), b)
    assert all(torch.equal(a, b) for a, b in zip(stored, indexed, strict=True))
    assert torch.equal(rows, (head + torch.arange(length)) % capacity)
    big = torch.tensor(count)  # the head is reduced once, whatever the count
    assert torch.equal(ring_rows(big, length, capacity), (count + torch.arange(length)) % capacity)


def _vma_flags(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds ``address``."""
    fields: dict[str, str] = {}
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    return fields


def test_huge_page_storage_falls_back_to_plain_zeros_when_the_kernel_refuses_madvise():
    class RefusingMapping(mmap.mmap):
        closed_mappings = 0

        def madvise(self, *args: int) -> None:
            raise OSError(errno.EINVAL, "Invalid argument")

        def close(self) -> None:
            RefusingMapping.closed_mappings += 1
            super().close()

    shape = (HUGE_PAGE_BYTES // 4 + 17, 2)
    with mock.patch.object(mmap, "mmap", RefusingMapping):
        storage = storage_zeros(shape, torch.float32)
    assert RefusingMapping.closed_mappings == 1  # the unused mapping is released, not leaked
    assert torch.equal(storage, torch.zeros(shape))
    storage[-1] = 1.0
    assert float(storage.sum()) == 2.0


def test_large_cpu_storages_ask_for_transparent_huge_pages():
    small = storage_zeros((1000, 3), torch.float32)
    assert torch.equal(small, torch.zeros(1000, 3))
    shape = (HUGE_PAGE_BYTES // 4 + 17, 2)  # a bit over two huge pages of float32
    big = storage_zeros(shape, torch.float32)
    assert big.shape == shape and big.dtype == torch.float32 and big.is_contiguous()
    assert big.data_ptr() % HUGE_PAGE_BYTES == 0
    assert not bool(big.any())
    big[-1] = 5.0  # writable to the last row, and the tensor keeps its mapping alive
    assert float(big.sum()) == 10.0
    flags = storage_zeros((HUGE_PAGE_BYTES,), torch.bool)
    assert flags.dtype == torch.bool and not bool(flags.any())
    buf = fb.flat(HUGE_PAGE_BYTES // 12 + 1)  # obs rows of 12 bytes: just over 2 MiB
    storage = next(g for g in buf.init(example_item()).experience if g.dtype == torch.float32)  # obs's rows
    assert storage.dtype == torch.float32 and storage.data_ptr() % HUGE_PAGE_BYTES == 0
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except OSError:
        pytest.skip("no transparent huge page support on this system")
    if "[never]" in mode:
        pytest.skip("transparent huge pages are disabled on this system")
    # madvise(MADV_HUGEPAGE) marks the mapping eligible (what `madvise` mode requires)
    assert _vma_flags(big.data_ptr()).get("THPeligible") == "1"
    assert _vma_flags(storage.data_ptr()).get("THPeligible") == "1"
