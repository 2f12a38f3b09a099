"""Flat (uniform, circular) buffer: contents, sampling, donation rule, errors, vmap, compile."""

import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree
from funrl.testing import replay_buffer_invariants


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
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[sample.indices], state.experience))
    assert tree.tree_equal(sample.items, tree.map(lambda x: x[ids], make_batch(0, total)))
    assert torch.equal(sample.weights, torch.ones(64))


def test_flat_passes_the_replay_buffer_battery():
    # FIFO overwrite order, only written rows sampled (whole), uniform draws by a chi-squared test.
    replay_buffer_invariants(fb.flat, max_examples=8)


def test_sample_is_pure_and_key_dependent():
    buf = fb.flat(50)
    state, _ = fill(buf, [40])
    a = buf.sample(state, frandom.key(0), 16)
    b = buf.sample(state, frandom.key(0), 16)
    c = buf.sample(state, frandom.key(1), 16)
    assert tree.tree_equal(a, b)
    assert not torch.equal(a.indices, c.indices)


def test_add_writes_in_place_and_shares_storage():
    buf = fb.flat(8)
    state = buf.init(example_item())
    assert {k: (v.shape, v.dtype) for k, v in state.experience.items()} == {
        k: ((8, *v.shape), v.dtype) for k, v in example_item().items()
    }
    new = buf.add(state, make_batch(0, 3))
    # donated: the same storage tensors, written in place, rows beyond the batch untouched
    assert all(new.experience[k] is state.experience[k] for k in state.experience)
    assert torch.equal(state.experience["obs"][:3], make_batch(0, 3)["obs"])
    assert torch.equal(state.experience["obs"][3:], torch.zeros(5, 3))


def test_a_sampled_item_is_a_copy_of_its_row():
    buf = fb.flat(8)
    state, _ = fill(buf, [8])
    before = tree.map(torch.clone, state.experience)
    sample = buf.sample(state, frandom.key(0), 5)
    sample.items["obs"].add_(1.0)
    assert tree.tree_equal(state.experience, before)


def test_re_adding_stored_rows_as_views_is_refused_by_torch():
    # the documented rule: a batch that is a view of the storage must be cloned first
    buf = fb.flat(8)
    state, _ = fill(buf, [6])
    views = tree.map(lambda x: x[2:5], state.experience)
    with pytest.raises(RuntimeError, match="clone"):
        buf.add(state, views)
    state = buf.add(fb.copy_state(state), tree.map(torch.clone, views))
    assert tree.tree_equal(tree.map(lambda x: x[6:], state.experience), tree.map(lambda x: x[:2], views))


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


def test_stacked_states_outside_vmap_are_a_clear_error():
    buf = fb.flat(8)
    stacked = tree.stack([fill(buf, [2])[0], fill(buf, [3])[0]])
    for call in (lambda: buf.add(stacked, make_batch(0, 1)), lambda: buf.sample(stacked, frandom.key(0), 2)):
        with pytest.raises(
            ValueError,
            match=r"expected the state of one buffer .* shape \[2\]; map over stacked states with torch.func.vmap",
        ):
            call()


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


FRESH_PROCESS_COMPILE = textwrap.dedent(
    """
    import torch
    import funrl.buffers as fb
    from funrl import random as frandom
    from funrl import tree
    from funrl.control import compile

    item = {"obs": torch.zeros(3), "action": torch.zeros((), dtype=torch.int64),
            "done": torch.zeros((), dtype=torch.bool)}
    buf = fb.flat(6)

    def step(state, batch, key):
        state = buf.add(state, batch)
        return state, buf.sample(state, key, 5)

    compiled = compile(step)  # fullgraph: a graph break is an error
    eager = buf.init(item)
    mine = fb.copy_state(eager)
    for start in (0, 4, 8, 12):  # wraps twice
        ids = torch.arange(start, start + 4)
        batch = {"obs": ids[:, None] * torch.ones(3), "action": ids, "done": ids % 3 == 0}
        mine, mine_sample = compiled(mine, batch, frandom.key(start))  # compiled first: see the test
        eager, eager_sample = step(eager, batch, frandom.key(start))
        assert tree.tree_equal(mine, eager) and tree.tree_equal(mine_sample, eager_sample)
    try:  # the compiled add advanced the shared counter: an older state is refused eagerly
        buf.add(fb.FlatState(mine.experience, mine.count - 4, mine.storage_count), batch)
    except fb.StaleStateError:
        print("ok")
    """
)


@pytest.mark.slow
def test_compiled_add_and_sample_in_a_fresh_process_equal_eager():
    # A fresh process, compiled before any eager call: nothing computed earlier (a value cached
    # on first use, as a cached_property, whose lock dynamo cannot trace) can hide a graph break.
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_COMPILE], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-4000:]
