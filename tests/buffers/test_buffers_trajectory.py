"""Trajectory buffer: time-major per-env storage; windows never cross the head nor mix envs."""

import pytest
import torch
from buffer_checks import compiled_add_and_sample_equal_eager
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.buffers as fb
from funrl import random as frandom
from funrl import tree

EXAMPLE = {
    "step": torch.zeros((), dtype=torch.int64),
    "env": torch.zeros((), dtype=torch.int64),
    "obs": torch.zeros(2),
}


def steps(num_envs: int, start: int, length: int):
    """Items stamped with their env and global step, so any window can be checked."""
    t = torch.arange(start, start + length).expand(num_envs, length)
    env = torch.arange(num_envs)[:, None].expand(num_envs, length)
    return {"step": t, "env": env, "obs": torch.stack([t.float(), env.float()], dim=-1)}


def fill(buf, num_envs, sizes):
    state = buf.init(EXAMPLE)
    total = 0
    for size in sizes:
        state = buf.add(state, steps(num_envs, total, size))
        total += size
    return state, total


def check_windows(sample, total, max_length, seq_len, num_envs):
    items = sample.items
    assert items["step"].shape[1] == seq_len
    # never mixes environments
    assert bool((items["env"] == items["env"][:, :1]).all())
    # consecutive steps: never joins the newest step to the oldest across the write head
    assert bool((items["step"] - items["step"][:, :1] == torch.arange(seq_len)).all())
    # entirely inside what is stored now
    oldest = max(0, total - max_length)
    assert bool((items["step"] >= oldest).all()) and bool((items["step"] < total).all())
    # indices name the window's first slot
    envs, starts = sample.indices // max_length, sample.indices % max_length
    assert torch.equal(envs, items["env"][:, 0])
    assert torch.equal(starts, items["step"][:, 0] % max_length)
    assert bool((envs < num_envs).all())


@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 12),
    seq_len=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    seed=st.integers(0, 2**31),
)
def test_windows_never_cross_the_head_or_mix_envs(num_envs, max_length, seq_len, sizes, seed):
    seq_len = min(seq_len, max_length)
    sizes = [min(s, max_length) for s in sizes]
    buf = fb.trajectory(num_envs, max_length, seq_len)
    state, total = fill(buf, num_envs, sizes)
    assert int(state.count) == total
    # storage holds exactly the last max_length steps of each env at slot step % max_length
    kept = torch.arange(max(0, total - max_length), total)
    assert torch.equal(state.experience["step"][:, kept % max_length], kept.expand(num_envs, -1))
    if total < seq_len:
        assert not bool(buf.can_sample(state))
        return
    sample = buf.sample(state, frandom.key(seed), 32)
    check_windows(sample, total, max_length, seq_len, num_envs)


def test_every_valid_window_is_sampled_uniformly():
    num_envs, max_length, seq_len = 2, 6, 3
    buf = fb.trajectory(num_envs, max_length, seq_len)
    state, total = fill(buf, num_envs, [4, 5])  # 9 steps: stored 3..8, head at slot 3
    sample = buf.sample(state, frandom.key(0), 12000)
    first = sample.items["env"][:, 0] * 100 + sample.items["step"][:, 0]
    values, counts = torch.unique(first, return_counts=True)
    # valid starts 3..6 in each env: 8 windows, each about 1/8 of the draws
    assert values.tolist() == [3, 4, 5, 6, 103, 104, 105, 106]
    expected = 12000 / 8
    chi2 = float(((counts.double() - expected) ** 2 / expected).sum())
    assert chi2 < 24.3, chi2  # 7 degrees of freedom, p = 0.001


def test_errors_and_stale_state():
    buf = fb.trajectory(2, 5, 3)
    state = buf.init(EXAMPLE)
    with pytest.raises(ValueError, match="holds 0 time steps per environment, fewer than min_length=3"):
        buf.sample(state, frandom.key(0), 2)
    with pytest.raises(ValueError, match="expected leading dim num_envs=2, got 3"):
        buf.add(state, steps(3, 0, 2))
    with pytest.raises(ValueError, match="at most 5 time steps per add"):
        buf.add(state, steps(2, 0, 6))
    with pytest.raises(ValueError, match=r"leaf item\['obs'\] expected shape"):
        buf.add(state, {**steps(2, 0, 2), "obs": torch.zeros(2, 2, 3)})
    new = buf.add(state, steps(2, 0, 3))
    with pytest.raises(fb.StaleStateError):
        buf.add(state, steps(2, 3, 1))
    buf.sample(new, frandom.key(0), 2)
    with pytest.raises(ValueError, match="sequence_length: expected at most max_length=4, got 5"):
        fb.trajectory(2, 4, 5)
    with pytest.raises(ValueError, match="min_length: expected at least sequence_length=3, got 2"):
        fb.trajectory(2, 4, 3, min_length=2)


def test_vmap_over_buffer_states_equals_a_loop():
    buf = fb.trajectory(2, 5, 2)
    keys = frandom.split(frandom.key(4), 3)
    singles = [fill(buf, 2, [i + 1])[0] for i in range(3)]
    batched = tree.stack([fb.copy_state(s) for s in singles])
    for size in (2, 3, 4):
        batches = [tree.map(lambda x, i=i: x + 50 * i, steps(2, 10, size)) for i in range(3)]
        singles = [buf.add(s, b) for s, b in zip(singles, batches, strict=True)]
        batched = vmap(buf.add)(batched, tree.stack(batches))
    assert tree.tree_equal(batched, tree.stack(singles))
    mapped = vmap(buf.sample, in_dims=(0, 0, None))(batched, keys, 4)
    looped = tree.stack([buf.sample(s, k, 4) for s, k in zip(singles, keys, strict=True)])
    assert tree.tree_equal(mapped, looped)


@pytest.mark.slow
def test_compiled_add_and_sample_equal_eager_without_graph_breaks():
    buf = fb.trajectory(2, 7, 3)
    added = [(steps(2, 3 * i, 3), frandom.key(i)) for i in range(4)]  # 12 steps into 7 slots: wraps
    compiled_add_and_sample_equal_eager(buf, buf.init(EXAMPLE), added, 5)
