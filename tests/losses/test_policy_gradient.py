"""PPO, A2C, REINFORCE: funrl.testing's policy-loss battery, invariants (hypothesis), gradients,
transforms, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl.losses import (
    a2c_loss,
    normalize_advantages,
    ppo_clip_loss,
    ppo_loss,
    ppo_value_loss,
    reinforce_loss,
)
from funrl.testing import (
    assert_compile_equals_eager,
    assert_pure,
    assert_vmap_equals_loop,
    policy_loss_invariants,
)

DTYPE = torch.float64
batches = st.tuples(st.integers(0, 2**16), st.integers(2, 64))
clips = st.sampled_from([0.1, 0.2, 0.3])


def make(seed: int, size: int, spread: float = 0.5) -> dict:
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(size, generator=g, dtype=DTYPE)
    return {
        "log_prob": old + spread * torch.randn(size, generator=g, dtype=DTYPE),
        "old_log_prob": old,
        "advantages": torch.randn(size, generator=g, dtype=DTYPE),
        "values": torch.randn(size, generator=g, dtype=DTYPE),
        "old_values": torch.randn(size, generator=g, dtype=DTYPE),
        "returns": torch.randn(size, generator=g, dtype=DTYPE),
        "entropy": torch.rand(size, generator=g, dtype=DTYPE),
    }


# ------------------------------------------------------------------------------------------
# PPO policy term
# ------------------------------------------------------------------------------------------


@given(batches, clips)
def test_ppo_loss_at_ratio_one_is_minus_mean_advantage(batch, clip_eps):
    d = make(*batch)
    loss, metrics = ppo_clip_loss(d["old_log_prob"], d["old_log_prob"], d["advantages"], clip_eps)
    torch.testing.assert_close(loss, -d["advantages"].mean())
    assert metrics["approx_kl"] == 0 and metrics["clip_fraction"] == 0
    # Plus its other terms: the combined loss adds vf_coef * value loss - ent_coef * entropy.
    total, _ = ppo_loss(
        d["old_log_prob"],
        d["old_log_prob"],
        d["advantages"],
        d["values"],
        d["old_values"],
        d["returns"],
        d["entropy"],
        clip_eps,
        vf_coef=0.5,
        ent_coef=0.01,
        normalize=False,
    )
    value = 0.5 * ((d["values"] - d["returns"]) ** 2).mean()
    torch.testing.assert_close(total, -d["advantages"].mean() + 0.5 * value - 0.01 * d["entropy"].mean())


@given(batches, clips)
def test_ppo_loss_matches_surrogate_equation(batch, clip_eps):
    d = make(*batch)
    loss, metrics = ppo_clip_loss(d["log_prob"], d["old_log_prob"], d["advantages"], clip_eps)
    ratio = (d["log_prob"] - d["old_log_prob"]).exp()
    per_sample = [
        min(float(r) * float(a), min(max(float(r), 1 - clip_eps), 1 + clip_eps) * float(a))
        for r, a in zip(ratio, d["advantages"], strict=True)
    ]
    torch.testing.assert_close(loss, -torch.tensor(per_sample, dtype=DTYPE).mean())
    log_ratio = d["log_prob"] - d["old_log_prob"]
    torch.testing.assert_close(metrics["approx_kl"], ((ratio - 1) - log_ratio).mean())
    outside = sum(abs(float(r) - 1) > clip_eps for r in ratio) / len(ratio)
    torch.testing.assert_close(metrics["clip_fraction"], torch.tensor(outside, dtype=DTYPE))


def test_ppo_clip_loss_passes_the_policy_loss_battery():
    # Zero gradient where the clip saturates, -r A / B elsewhere, the vanilla gradient on-policy,
    # scaling with the advantages, the pessimistic bound.
    policy_loss_invariants(ppo_clip_loss, max_examples=15)


@given(batches)
def test_ppo_normalized_advantages_at_ratio_one_give_zero_loss(batch):
    d = make(*batch)
    loss, _ = ppo_clip_loss(d["old_log_prob"], d["old_log_prob"], d["advantages"], 0.2, normalize=True)
    torch.testing.assert_close(loss, torch.zeros((), dtype=DTYPE), atol=1e-12, rtol=0)
    normed = normalize_advantages(d["advantages"])
    torch.testing.assert_close(normed.mean(), torch.zeros((), dtype=DTYPE), atol=1e-12, rtol=0)
    torch.testing.assert_close(normed.std(), torch.ones((), dtype=DTYPE), atol=1e-6, rtol=0)


def test_ppo_advantages_are_detached():
    d = make(0, 8)
    adv = d["advantages"].clone().requires_grad_(True)
    log_prob = d["log_prob"].clone().requires_grad_(True)
    loss, metrics = ppo_clip_loss(log_prob, d["old_log_prob"], adv, 0.2)
    loss.backward()
    assert adv.grad is None and log_prob.grad is not None
    assert all(not m.requires_grad for m in metrics.values())


# ------------------------------------------------------------------------------------------
# PPO value term
# ------------------------------------------------------------------------------------------


@given(batches, clips)
def test_ppo_value_loss_matches_equation(batch, clip_eps):
    d = make(*batch)
    loss, _ = ppo_value_loss(d["values"], d["old_values"], d["returns"])
    torch.testing.assert_close(loss, 0.5 * ((d["values"] - d["returns"]) ** 2).mean())
    loss, metrics = ppo_value_loss(d["values"], d["old_values"], d["returns"], clip_eps)
    clipped_v = d["old_values"] + (d["values"] - d["old_values"]).clamp(-clip_eps, clip_eps)
    expected = 0.5 * torch.maximum((d["values"] - d["returns"]) ** 2, (clipped_v - d["returns"]) ** 2).mean()
    torch.testing.assert_close(loss, expected)
    frac = ((d["values"] - d["old_values"]).abs() > clip_eps).double().mean()
    torch.testing.assert_close(metrics["value_clip_fraction"], frac)


def test_ppo_value_loss_is_zero_when_values_equal_returns_and_grad_stops_when_clipped():
    returns = torch.tensor([1.0, 2.0, 3.0], dtype=DTYPE)
    loss, _ = ppo_value_loss(returns.clone(), returns - 5, returns, clip_eps=0.2)
    # V moved 5 away from V_old: the clipped error (4.8^2) is the max, so no gradient flows.
    assert loss > 0
    values = returns.clone().requires_grad_(True)
    loss, _ = ppo_value_loss(values, returns - 5, returns, clip_eps=0.2)
    (grad,) = torch.autograd.grad(loss, values)
    assert torch.all(grad == 0)
    loss, _ = ppo_value_loss(returns.clone(), returns, returns, clip_eps=0.2)
    assert loss == 0


# ------------------------------------------------------------------------------------------
# A2C, REINFORCE
# ------------------------------------------------------------------------------------------


@given(batches)
def test_a2c_loss_matches_equation(batch):
    d = make(*batch)
    loss, metrics = a2c_loss(
        d["log_prob"], d["advantages"], d["values"], d["returns"], d["entropy"], 0.5, 0.01
    )
    policy = -(d["log_prob"] * d["advantages"]).mean()
    value = 0.5 * ((d["values"] - d["returns"]) ** 2).mean()
    torch.testing.assert_close(loss, policy + 0.5 * value - 0.01 * d["entropy"].mean())
    torch.testing.assert_close(metrics["policy_loss"], policy)


@given(batches)
def test_reinforce_gradient_is_minus_weighted_mean(batch):
    d = make(*batch)
    log_prob = d["log_prob"].clone().requires_grad_(True)
    loss, _ = reinforce_loss(log_prob, d["returns"], baseline=d["values"])
    (grad,) = torch.autograd.grad(loss, log_prob)
    torch.testing.assert_close(grad, -(d["returns"] - d["values"]) / len(grad))
    plain, _ = reinforce_loss(d["log_prob"], d["returns"])
    torch.testing.assert_close(plain, -(d["log_prob"] * d["returns"]).mean())


# ------------------------------------------------------------------------------------------
# Every loss: finite gradients, batch-order invariance, vmap over an ensemble, compile
# ------------------------------------------------------------------------------------------


def _all_losses(d):
    return {
        "ppo_clip": ppo_clip_loss(d["log_prob"], d["old_log_prob"], d["advantages"], 0.2, normalize=True)[0],
        "ppo_value": ppo_value_loss(d["values"], d["old_values"], d["returns"], 0.2)[0],
        "ppo": ppo_loss(
            d["log_prob"],
            d["old_log_prob"],
            d["advantages"],
            d["values"],
            d["old_values"],
            d["returns"],
            d["entropy"],
            value_clip_eps=0.2,
        )[0],
        "a2c": a2c_loss(d["log_prob"], d["advantages"], d["values"], d["returns"], d["entropy"])[0],
        "reinforce": reinforce_loss(d["log_prob"], d["returns"], d["values"])[0],
    }


@given(batches)
def test_every_loss_has_finite_gradients(batch):
    d = make(*batch)
    d["log_prob"].requires_grad_(True)
    d["values"].requires_grad_(True)
    d["entropy"].requires_grad_(True)
    for name, loss in _all_losses(d).items():
        grads = torch.autograd.grad(loss, [d["log_prob"], d["values"], d["entropy"]], allow_unused=True)
        assert torch.isfinite(loss), name
        assert all(g is None or torch.isfinite(g).all() for g in grads), name


@given(batches, st.integers(0, 2**16))
def test_every_loss_is_batch_order_invariant(batch, perm_seed):
    d = make(*batch)
    perm = torch.randperm(batch[1], generator=torch.Generator().manual_seed(perm_seed))
    shuffled = {k: v[perm] for k, v in d.items()}
    for name, loss in _all_losses(d).items():
        torch.testing.assert_close(_all_losses(shuffled)[name], loss, msg=name)


def test_every_loss_is_pure():
    assert_pure(_all_losses, make(3, 16))


def test_vmap_over_an_ensemble_equals_a_loop():
    members = [make(seed, 12) for seed in range(5)]
    stacked = {k: torch.stack([m[k] for m in members]) for k in members[0]}

    def losses(*columns):
        return tuple(_all_losses(dict(zip(stacked, columns, strict=True))).values())

    assert_vmap_equals_loop(losses, 0, *stacked.values())


def test_grad_and_value_with_aux_applies_directly():
    d = make(1, 10)

    def objective(log_prob):
        return ppo_clip_loss(log_prob, d["old_log_prob"], d["advantages"], 0.2)

    grad, (loss, metrics) = torch.func.grad_and_value(objective, has_aux=True)(d["log_prob"])
    torch.testing.assert_close(loss, objective(d["log_prob"])[0])
    assert grad.shape == d["log_prob"].shape and set(metrics) >= {"approx_kl", "clip_fraction"}


@pytest.mark.slow
def test_compiled_ppo_loss_equals_eager():
    d = {k: v.float() for k, v in make(4, 32).items()}

    def step(log_prob, old_log_prob, advantages, values, old_values, returns, entropy):
        return ppo_loss(
            log_prob, old_log_prob, advantages, values, old_values, returns, entropy, value_clip_eps=0.2
        )

    args = [
        d[k] for k in ["log_prob", "old_log_prob", "advantages", "values", "old_values", "returns", "entropy"]
    ]
    assert_compile_equals_eager(step, *args, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


def test_bad_input_raises_value_error_naming_the_argument():
    d = make(0, 6)
    with pytest.raises(ValueError, match="old_log_prob: expected shape \\(6,\\)"):
        ppo_clip_loss(d["log_prob"], d["old_log_prob"][:5], d["advantages"], 0.2)
    with pytest.raises(ValueError, match="advantages: expected a floating-point tensor"):
        ppo_clip_loss(d["log_prob"], d["old_log_prob"], d["advantages"] > 0, 0.2)
    with pytest.raises(ValueError, match="clip_eps: expected a value > 0"):
        ppo_clip_loss(d["log_prob"], d["old_log_prob"], d["advantages"], 0.0)
    with pytest.raises(ValueError, match="returns: expected shape"):
        ppo_value_loss(d["values"], d["old_values"], d["returns"][None], 0.2)
    with pytest.raises(ValueError, match="clip_eps: expected a value > 0"):
        ppo_value_loss(d["values"], d["old_values"], d["returns"], -0.2)
    with pytest.raises(ValueError, match="vf_coef: expected a value >= 0"):
        a2c_loss(d["log_prob"], d["advantages"], d["values"], d["returns"], d["entropy"], vf_coef=-1.0)
    with pytest.raises(ValueError, match="baseline: expected shape"):
        reinforce_loss(d["log_prob"], d["returns"], d["values"][:2])
    with pytest.raises(ValueError, match="log_prob: expected at least one element"):
        ppo_clip_loss(torch.zeros(0), torch.zeros(0), torch.zeros(0), 0.2)
