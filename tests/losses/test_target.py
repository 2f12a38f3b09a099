"""Target-network updates: polyak / hard / periodic as pure functions on params pytrees."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl import tree
from funrl.losses.target import hard_update, periodic_update, polyak
from funrl.testing import assert_pure, assert_vmap_equals_loop


def _params(seed: int, scale: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "layer0": {"weight": scale * torch.randn(4, 3, generator=g), "bias": torch.randn(4, generator=g)},
        "head": {"weight": scale * torch.randn(1, 4, generator=g, dtype=torch.float64)},
    }


seeds = st.integers(0, 2**16)
taus = st.floats(0.0, 1.0, allow_nan=False)


@given(seed=seeds)
def test_polyak_tau_one_copies_online(seed):
    target, online = _params(seed), _params(seed + 1, scale=1e3)
    assert tree.tree_equal(polyak(target, online, 1.0), online)


@given(seed=seeds)
def test_polyak_tau_zero_is_identity(seed):
    target, online = _params(seed, scale=1e-3), _params(seed + 1, scale=1e3)
    assert tree.tree_equal(polyak(target, online, 0.0), target)


@given(seed=seeds, tau=taus)
def test_polyak_matches_convex_combination(seed, tau):
    target, online = _params(seed), _params(seed + 1)
    new = polyak(target, online, tau)
    expected = tree.map(lambda t, o: (1.0 - tau) * t + tau * o, target, online)
    assert tree.tree_allclose(new, expected, rtol=1e-6, atol=1e-6)


def test_polyak_planted_bug_swapped_arguments_is_detected():
    # The convex-combination check above must be able to fail: swapping target and online does.
    target, online = _params(0), _params(1)
    swapped = polyak(online, target, 0.25)
    expected = tree.map(lambda t, o: 0.75 * t + 0.25 * o, target, online)
    assert not tree.tree_allclose(swapped, expected, rtol=1e-6, atol=1e-6)


@given(seed=seeds, tau=taus)
def test_polyak_is_pure_and_does_not_modify_inputs(seed, tau):
    assert_pure(polyak, _params(seed), _params(seed + 1), tau)


def test_polyak_vmap_over_tau_sweep_equals_loop():
    target, online = _params(3), _params(4)
    tau_sweep = torch.tensor([0.0, 0.005, 0.5, 1.0])
    assert_vmap_equals_loop(lambda tau: polyak(target, online, tau), 0, tau_sweep, rtol=0, atol=0)


def test_polyak_vmap_over_seeds_equals_loop():
    targets = tree.stack([_params(s) for s in range(3)])
    onlines = tree.stack([_params(10 + s) for s in range(3)])
    assert_vmap_equals_loop(lambda t, o: polyak(t, o, 0.1), 0, targets, onlines, rtol=0, atol=0)


def test_hard_update_copies_without_aliasing():
    target, online = _params(0), _params(1)
    new = hard_update(target, online)
    assert tree.tree_equal(new, online)
    for new_leaf, online_leaf in zip(tree.leaves(new), tree.leaves(online), strict=True):
        assert new_leaf.data_ptr() != online_leaf.data_ptr()


@given(step=st.integers(0, 1000), period=st.integers(1, 50))
def test_periodic_update_copies_exactly_on_the_period(step, period):
    target, online = _params(0), _params(1)
    for step_value in (step, torch.tensor(step)):
        new = periodic_update(target, online, step_value, period)
        assert tree.tree_equal(new, online if step % period == 0 else target)


def test_periodic_update_vmap_over_steps_equals_loop():
    target, online = _params(0), _params(1)
    steps = torch.arange(7)
    assert_vmap_equals_loop(lambda s: periodic_update(target, online, s, 3), 0, steps, rtol=0, atol=0)


def test_periodic_update_accepts_integer_leaves_for_optimiser_state():
    old = {"count": torch.tensor(4), "mu": torch.zeros(3)}
    new = {"count": torch.tensor(5), "mu": torch.ones(3)}
    assert tree.tree_equal(periodic_update(old, new, 2, 2), new)
    assert tree.tree_equal(periodic_update(old, new, 3, 2), old)


@pytest.mark.parametrize("tau", [-0.1, 1.5, float("nan")])
def test_polyak_rejects_tau_outside_unit_interval(tau):
    with pytest.raises(ValueError, match="tau"):
        polyak(_params(0), _params(1), tau)


def test_polyak_rejects_non_scalar_tau_tensor():
    with pytest.raises(ValueError, match="tau"):
        polyak(_params(0), _params(1), torch.tensor([0.1, 0.2]))


def test_bad_trees_are_rejected_with_names():
    target, online = _params(0), _params(1)
    wrong_shape = tree.map(lambda x: x, online)
    wrong_shape["head"]["weight"] = torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="target.*shape"):
        polyak(target, wrong_shape, 0.1)
    with pytest.raises(ValueError, match="target"):
        polyak(target, {"layer0": online["layer0"]}, 0.1)
    with pytest.raises(ValueError, match="dtype"):
        hard_update(target, tree.map(lambda x: x.double(), online))
    int_tree = tree.map(lambda x: x.long(), online)
    with pytest.raises(ValueError, match="floating-point"):
        polyak(int_tree, int_tree, 0.1)


@pytest.mark.parametrize("period", [0, -3, 2.0, True])
def test_periodic_update_rejects_bad_period(period):
    with pytest.raises(ValueError, match="period"):
        periodic_update(_params(0), _params(1), 3, period)


@pytest.mark.parametrize("step", [torch.tensor(1.0), torch.tensor([1, 2]), 1.5])
def test_periodic_update_rejects_bad_step(step):
    with pytest.raises(ValueError, match="step"):
        periodic_update(_params(0), _params(1), step, 2)
