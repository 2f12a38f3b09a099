"""Epoch-style minibatching without replacement: a permutation per epoch, pure, vmap, compile."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.buffers as fb
from funrl import control, tree
from funrl import random as frandom
from funrl.buffers import without_replacement as wr


def rollout(n: int):
    ids = torch.arange(n)
    return {"obs": ids[:, None].float() * torch.tensor([1.0, -1.0]), "id": ids, "nested": {"r": ids.double()}}


@given(num_minibatches=st.integers(1, 8), size=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_one_epoch_uses_every_item_exactly_once(num_minibatches, size, seed):
    n = num_minibatches * size
    out = fb.minibatches(frandom.key(seed), rollout(n), num_minibatches)
    ids = out["id"]
    assert ids.shape == (num_minibatches, size)
    assert torch.equal(ids.flatten().sort().values, torch.arange(n))
    # every leaf is shuffled by the same permutation: rows stay whole
    assert tree.tree_equal(
        out, tree.map(lambda x: x[ids.flatten()].reshape(num_minibatches, size, *x.shape[1:]), rollout(n))
    )


def test_time_major_rollouts_flatten_leading_dims():
    t, e = 4, 6
    batch = {"obs": torch.arange(t * e * 2.0).reshape(t, e, 2), "reward": torch.arange(t * e).reshape(t, e)}
    out = wr.minibatches(frandom.key(0), batch, 3, batch_dims=2)
    assert out["obs"].shape == (3, 8, 2) and out["reward"].shape == (3, 8)
    assert torch.equal(out["reward"].flatten().sort().values, torch.arange(t * e))
    assert torch.equal(out["obs"][..., 0], out["reward"] * 2.0)


def test_permutation_is_uniform_over_positions():
    # position of item 0 after shuffling 8 items, over many keys: uniform over 8 slots
    keys = frandom.split(frandom.key(5), 4000)
    firsts = vmap(lambda k: wr.minibatches(k, {"id": torch.arange(8)}, 2)["id"].flatten().argsort()[0])(keys)
    counts = torch.bincount(firsts, minlength=8).double()
    expected = 4000 / 8
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 7 degrees of freedom: P(chi2 > 24.3) = 0.001 under uniformity.
    assert chi2 < 24.3, chi2


def test_pure_and_key_dependent():
    a = fb.minibatches(frandom.key(1), rollout(32), 4)
    b = fb.minibatches(frandom.key(1), rollout(32), 4)
    c = fb.minibatches(frandom.key(2), rollout(32), 4)
    assert tree.tree_equal(a, b)
    assert not torch.equal(a["id"], c["id"])


def test_epochs_stack_independent_shuffles():
    key = frandom.key(7)
    out = wr.epochs(key, rollout(12), num_epochs=3, num_minibatches=4)
    assert out["id"].shape == (3, 4, 3)
    keys = frandom.split(key, 3)
    for e in range(3):
        assert tree.tree_equal(tree.index(out, e), wr.minibatches(keys[e], rollout(12), 4))
    assert not torch.equal(out["id"][0], out["id"][1])


def test_vmap_over_keys_and_batches_equals_a_loop():
    keys = frandom.split(frandom.key(3), 4)
    batches = tree.stack([tree.map(lambda x, i=i: x + 100 * i, rollout(12)) for i in range(4)])
    mapped = vmap(lambda k, b: wr.minibatches(k, b, 3))(keys, batches)
    looped = tree.stack([wr.minibatches(keys[i], tree.index(batches, i), 3) for i in range(4)])
    assert tree.tree_equal(mapped, looped)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="num_minibatches: expected a divisor of the batch size 10, got 3"):
        wr.minibatches(frandom.key(0), rollout(10), 3)
    with pytest.raises(ValueError, match="num_minibatches: expected a positive int, got 0"):
        wr.minibatches(frandom.key(0), rollout(10), 0)
    with pytest.raises(
        ValueError, match=r"leaf item\['obs'\] has leading dims \[4\] but leaf item\['id'\] has \[5\]"
    ):
        wr.minibatches(frandom.key(0), {"id": torch.arange(5), "obs": torch.zeros(4)}, 1)
    with pytest.raises(ValueError, match=r"leaf item\['x'\] expected at least 2 batch dim"):
        wr.minibatches(frandom.key(0), {"x": torch.zeros(4)}, 1, batch_dims=2)
    with pytest.raises(TypeError, match=r"leaf item\['x'\]\[0\] expected a torch.Tensor, got int"):
        wr.minibatches(frandom.key(0), {"x": [1, 2]}, 1)


@pytest.mark.slow
def test_compiled_equals_eager():
    fn = control.compile(lambda k, b: wr.minibatches(k, b, 4))
    for seed in (11, 12):
        key = frandom.key(seed)
        assert tree.tree_equal(fn(key, rollout(16)), wr.minibatches(key, rollout(16), 4))
