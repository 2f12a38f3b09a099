"""Sum-tree and proportional prioritised replay (flat and trajectory variants)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree
from funrl.buffers import sum_tree
from funrl.control import compile as funrl_compile
from funrl.testing import replay_buffer_invariants


def check_tree_consistent(t: torch.Tensor, capacity: int) -> None:
    half = t.shape[0] // 2
    parents = torch.arange(1, half)
    assert torch.allclose(t[parents], t[2 * parents] + t[2 * parents + 1], rtol=1e-12, atol=0)
    assert torch.allclose(sum_tree.total(t), t[half : half + capacity].sum(), rtol=1e-12, atol=0)
    assert bool((t[half + capacity :] == 0).all())


@given(
    capacity=st.integers(1, 40),
    updates=st.lists(
        st.lists(st.tuples(st.integers(0, 39), st.floats(0, 100)), min_size=1, max_size=12), max_size=6
    ),
)
def test_root_is_the_sum_of_priorities_after_any_updates(capacity, updates):
    t = sum_tree.init(capacity)
    reference = torch.zeros(capacity, dtype=torch.float64)
    for batch in updates:
        idx = torch.tensor([i % capacity for i, _ in batch])
        val = torch.tensor([v for _, v in batch], dtype=torch.float64)
        sum_tree.update(t, idx, val)
        reference[idx] = val  # same duplicate resolution as the tree's own index_put_
        check_tree_consistent(t, capacity)
        assert torch.equal(sum_tree.leaf_values(t, torch.arange(capacity)), reference)


def test_tree_checker_catches_a_planted_inconsistency():
    t = sum_tree.init(5)
    sum_tree.update(t, torch.arange(5), torch.arange(1.0, 6.0))
    check_tree_consistent(t, 5)
    t[3] += 1.0  # an internal node no longer the sum of its children
    with pytest.raises(AssertionError):
        check_tree_consistent(t, 5)


@given(values=st.lists(st.floats(0, 10), min_size=1, max_size=33), seed=st.integers(0, 2**31))
def test_find_agrees_with_a_cumulative_sum_search(values, seed):
    values = torch.tensor(values, dtype=torch.float64)
    if values.sum() == 0:
        values[0] = 1.0
    t = sum_tree.update(sum_tree.init(len(values)), torch.arange(len(values)), values)
    targets = frandom.uniform(frandom.key(seed), (64,), dtype=torch.float64) * values.sum()
    found = sum_tree.find(t, targets)
    expected = torch.searchsorted(values.cumsum(0), targets, right=True)
    assert torch.equal(found, expected)
    assert bool((values[found] > 0).all())  # zero-priority items are never returned


def test_prioritised_passes_the_replay_buffer_battery():
    # FIFO overwrite order, only written rows sampled (whole), P(i) ∝ p_i ** alpha by chi-squared.
    alpha = 0.7
    replay_buffer_invariants(
        lambda capacity: fb.prioritised(capacity, alpha=alpha), alpha=alpha, max_examples=8
    )


def test_zero_priorities_are_never_drawn_and_weights_correct_the_bias():
    capacity, alpha = 10, 0.7
    buf = fb.prioritised(capacity, alpha=alpha, beta=0.5)
    state = buf.add(buf.init({"id": torch.zeros((), dtype=torch.int64)}), {"id": torch.arange(capacity)})
    priorities = torch.tensor([0.1, 0.5, 1.0, 2.0, 3.0, 0.0, 4.0, 0.7, 1.5, 2.5], dtype=torch.float64)
    state = buf.update_priorities(state, torch.arange(capacity), priorities)
    probs = priorities**alpha / (priorities**alpha).sum()
    sample = buf.sample(state, frandom.key(1), 2000)
    assert not bool((sample.items["id"] == 5).any())  # zero priority: never drawn
    # importance weights: (N * P(i)) ** -beta over the batch maximum
    w = (capacity * probs[sample.indices]) ** -0.5
    assert torch.allclose(sample.weights, (w / w.max()).float())
    assert torch.allclose(buf.sample(state, frandom.key(1), 8, beta=1.0).weights.max(), torch.tensor(1.0))


def test_new_items_get_the_max_priority_seen():
    buf = fb.prioritised(6, alpha=1.0)
    state = buf.init({"x": torch.zeros(2)})
    state = buf.add(state, {"x": torch.zeros(3, 2)})
    assert torch.equal(
        sum_tree.leaf_values(state.sum_tree, torch.arange(6)), torch.tensor([1.0, 1, 1, 0, 0, 0]).double()
    )
    state = buf.update_priorities(state, torch.tensor([0, 1]), torch.tensor([7.0, 0.5]))
    state = buf.add(state, {"x": torch.zeros(4, 2)})  # rows 3, 4, 5, 0
    leaves = sum_tree.leaf_values(state.sum_tree, torch.arange(6))
    assert torch.equal(leaves, torch.tensor([7.0, 0.5, 1, 7, 7, 7]).double())
    check_tree_consistent(state.sum_tree, 6)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        # The bounds come back in one transfer off the CPU: that path runs where a GPU is lent.
        pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")),
    ],
)
def test_update_priorities_bad_input(device: str):
    buf = fb.prioritised(4)
    state = buf.add(buf.init({"x": torch.zeros((), device=device)}), {"x": torch.zeros(4, device=device)})

    def tensor(values, **kwargs):
        return torch.tensor(values, device=device, **kwargs)

    with pytest.raises(ValueError, match="priorities: expected finite non-negative"):
        buf.update_priorities(state, tensor([0]), tensor([-1.0]))
    with pytest.raises(ValueError, match="priorities: expected finite non-negative"):
        buf.update_priorities(state, tensor([0]), tensor([float("nan")]))
    for bad in ([0.5, float("nan"), 2.0], [1.0, 0.5, float("inf")], [2.0, -0.0, -1e-30]):
        with pytest.raises(ValueError, match="priorities: expected finite non-negative"):
            buf.update_priorities(state, tensor([0, 1, 2]), tensor(bad, dtype=torch.float64))
    for bad in ([-1], [0, 5, 1], [3, -2]):
        with pytest.raises(ValueError, match=r"indices: expected values in \[0, 4\)"):
            buf.update_priorities(state, tensor(bad), torch.ones(len(bad), device=device))
    # nothing was written by the refused calls; a good one still goes through
    assert sum_tree.leaf_values(state.sum_tree, tensor(range(4))).tolist() == [1.0] * 4
    buf.update_priorities(state, tensor([0, 3]), tensor([0.0, 2.0], dtype=torch.float16))
    with pytest.raises(ValueError, match=r"priorities: expected shape \[2\]"):
        buf.update_priorities(state, tensor([0, 1]), tensor([1.0]))
    with pytest.raises(TypeError, match="indices: expected an int64 tensor"):
        buf.update_priorities(state, tensor([0.0]), tensor([1.0]))
    with pytest.raises(ValueError, match=r"indices: expected values in \[0, 4\)"):
        buf.update_priorities(state, tensor([4]), tensor([1.0]))
    with pytest.raises(ValueError, match="alpha: expected a non-negative float"):
        fb.prioritised(4, alpha=-1.0)


STEP = {"step": torch.zeros((), dtype=torch.int64), "env": torch.zeros((), dtype=torch.int64)}


def steps(num_envs, start, length):
    t = torch.arange(start, start + length).expand(num_envs, length)
    return {"step": t, "env": torch.arange(num_envs)[:, None].expand(num_envs, length)}


@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 10),
    seq_len=st.integers(1, 4),
    sizes=st.lists(st.integers(1, 10), min_size=1, max_size=8),
    seed=st.integers(0, 2**31),
)
def test_trajectory_priorities_are_nonzero_exactly_on_valid_windows(
    num_envs, max_length, seq_len, sizes, seed
):
    seq_len = min(seq_len, max_length)
    buf = fb.prioritised_trajectory(num_envs, max_length, seq_len, alpha=1.0)
    state = buf.init(STEP)
    total = 0
    for i, size in enumerate(sizes):
        size = min(size, max_length - seq_len + 1)
        state = buf.add(state, steps(num_envs, total, size))
        total += size
        # a valid start slot holds a step s with oldest <= s <= total - L
        slot_steps = state.experience["step"][0]
        written = torch.arange(max_length) < min(total, max_length)
        valid = written & (slot_steps >= max(0, total - max_length)) & (slot_steps <= total - seq_len)
        leaves = sum_tree.leaf_values(state.sum_tree, torch.arange(num_envs * max_length)).view(num_envs, -1)
        assert torch.equal(leaves > 0, valid.expand(num_envs, -1))
        check_tree_consistent(state.sum_tree, num_envs * max_length)
        if bool(buf.can_sample(state)):
            sample = buf.sample(state, frandom.key(seed + i), 16)
            items = sample.items
            assert bool((items["env"] == items["env"][:, :1]).all())
            assert bool((items["step"] - items["step"][:, :1] == torch.arange(seq_len)).all())
            assert bool((items["step"] >= max(0, total - max_length)).all() & (items["step"] < total).all())
            # priorities change sampling, never validity
            state = buf.update_priorities(
                state, sample.indices, torch.rand(16, generator=torch.Generator().manual_seed(i)) + 0.1
            )


def test_trajectory_update_ignores_windows_invalidated_since_sampling():
    buf = fb.prioritised_trajectory(1, 6, 3, alpha=1.0)
    state = buf.add(buf.init(STEP), steps(1, 0, 4))
    sample = buf.sample(state, frandom.key(0), 8)
    state = buf.add(state, steps(1, 4, 4))  # overwrites slots 4, 5, 0, 1: head at slot 2
    state = buf.update_priorities(state, sample.indices, torch.full((8,), 9.0))
    slot_steps = state.experience["step"][0]
    leaves = sum_tree.leaf_values(state.sum_tree, torch.arange(6))
    assert torch.equal(leaves > 0, (slot_steps >= 2) & (slot_steps <= 5))


def test_vmap_over_prioritised_states_equals_a_loop():
    buf = fb.prioritised(5, alpha=0.8)
    keys = frandom.split(frandom.key(2), 3)
    singles = [buf.add(buf.init({"x": torch.zeros(())}), {"x": torch.arange(i + 1.0)}) for i in range(3)]
    batched = tree.stack([fb.copy_state(s) for s in singles])
    batches = [{"x": torch.arange(3.0) + 10 * i} for i in range(3)]
    singles = [buf.add(s, b) for s, b in zip(singles, batches, strict=True)]
    batched = vmap(buf.add)(batched, tree.stack(batches))
    prios = torch.tensor([[0.5, 2.0], [3.0, 0.1], [1.0, 1.0]])
    idx = torch.tensor([[0, 1], [2, 3], [4, 0]])
    singles = [buf.update_priorities(s, i, p) for s, i, p in zip(singles, idx, prios, strict=True)]
    batched = vmap(buf.update_priorities)(batched, idx, prios)
    assert tree.tree_allclose(batched, tree.stack(singles))
    mapped = vmap(buf.sample, in_dims=(0, 0, None))(batched, keys, 6)
    looped = tree.stack([buf.sample(s, k, 6) for s, k in zip(singles, keys, strict=True)])
    assert tree.tree_allclose(mapped, looped)


@pytest.mark.slow
def test_compiled_prioritised_step_equals_eager():
    buf = fb.prioritised(16, alpha=0.6, beta=0.4)

    def step(state, batch, key):
        state = buf.add(state, batch)
        sample = buf.sample(state, key, 8)
        state = buf.update_priorities(state, sample.indices, sample.items["x"].abs() + 0.01)
        return state, sample

    compiled = funrl_compile(step)
    eager_state = buf.init({"x": torch.zeros(())})
    compiled_state = fb.copy_state(eager_state)
    for i in range(4):
        batch = {"x": torch.linspace(-1, 1, 6) * (i + 1)}
        eager_state, eager_sample = step(eager_state, batch, frandom.key(i))
        compiled_state, compiled_sample = compiled(compiled_state, batch, frandom.key(i))
        assert tree.tree_allclose(compiled_sample, eager_sample)
        assert tree.tree_allclose(compiled_state, eager_state)


def test_sampling_before_min_length_is_a_clear_error_and_can_sample_tells():
    buf = fb.prioritised(8, min_length=3)
    state = buf.init({"x": torch.zeros(2)})
    state = buf.add(state, {"x": torch.ones(2, 2)})
    assert not bool(buf.can_sample(state))
    with pytest.raises(ValueError, match=r"^sample: the buffer holds 2 items, fewer than min_length=3"):
        buf.sample(state, frandom.key(0), 4)
    state = buf.add(state, {"x": torch.ones(1, 2)})
    assert bool(buf.can_sample(state)) and buf.sample(state, frandom.key(0), 4).indices.shape == (4,)
