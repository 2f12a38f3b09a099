"""Shared actor-critic pieces: Bellman and soft targets, the ensemble critic loss, ensemble_q."""

import pytest
import torch
from actor_critic_data import (
    batch_sizes,
    ensemble_sizes,
    generator,
    loop_q,
    networks,
    replay_batch,
    seeds,
    transitions,
)
from hypothesis import given
from hypothesis import strategies as st

from funrl import losses as L
from funrl.losses.bellman import DISTANCES
from funrl.testing import assert_vmap_equals_loop


@given(seed=seeds, batch=batch_sizes, gamma=st.floats(0.0, 1.0))
def test_bellman_target_matches_per_sample_reference(seed, batch, gamma):
    d = transitions(seed, batch)
    next_value = d["next_q_values"][0]
    out = L.bellman_target(d["reward"], d["terminated"], next_value, gamma)
    for b in range(batch):
        bootstrap = 0.0 if d["terminated"][b] else gamma * next_value[b].item()
        assert out[b].item() == pytest.approx(d["reward"][b].item() + bootstrap, rel=1e-12, abs=1e-12)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, alpha=st.floats(0.0, 2.0))
def test_soft_state_value_is_min_over_critics_minus_entropy_term(seed, batch, ensemble, alpha):
    d = transitions(seed, batch, ensemble)
    out = L.soft_state_value(d["next_q_values"], d["next_log_prob"], alpha)
    for b in range(batch):
        min_q = min(d["next_q_values"][e, b].item() for e in range(ensemble))
        expected = min_q - alpha * d["next_log_prob"][b].item()
        assert out[b].item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_critic_loss_zero_when_every_critic_equals_target(seed, batch, ensemble):
    target = torch.randn(batch, generator=generator(seed))
    for distance in DISTANCES:
        loss, _ = L.sac_critic_loss(target.expand(ensemble, batch).clone(), target, distance)
        assert loss.item() == 0.0


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_critic_loss_matches_reference_sum_over_critics_mean_over_batch(seed, batch, ensemble):
    d = transitions(seed, batch, ensemble)
    target = d["reward"]
    for distance, fn in (
        ("l2", lambda x: x * x),
        ("l1", abs),
        ("smooth_l1", lambda x: 0.5 * x * x if abs(x) < 1.0 else abs(x) - 0.5),
    ):
        loss, metrics = L.td3_critic_loss(d["q_values"], target, distance)
        expected = sum(
            fn(d["q_values"][e, b].item() - target[b].item()) for e in range(ensemble) for b in range(batch)
        )
        assert loss.item() == pytest.approx(expected / batch, rel=1e-10)
        assert metrics["td_error_abs_max"].shape == (batch,)


def test_critic_loss_treats_target_as_constant():
    d = transitions(0, 8)
    q = d["q_values"].clone().requires_grad_(True)
    target = d["reward"].clone().requires_grad_(True)
    loss, _ = L.sac_critic_loss(q, target)
    grad_q, grad_target = torch.autograd.grad(loss, (q, target), allow_unused=True)
    assert grad_target is None
    # d/dq_eb of mean_b sum_e (q_eb - y_b)^2 = 2 (q_eb - y_b) / B
    torch.testing.assert_close(grad_q, 2.0 * (d["q_values"] - d["reward"]) / 8)


def test_vmap_over_seeds_of_critic_loss_equals_loop():
    batches = [transitions(s, 6) for s in range(4)]
    q = torch.stack([b["q_values"] for b in batches])
    y = torch.stack([b["reward"] for b in batches])
    assert_vmap_equals_loop(L.sac_critic_loss, 0, q, y, rtol=0, atol=0)


def test_ensemble_q_vmap_equals_loop_over_members():
    n = networks(num_critics=5)
    b = replay_batch(0)
    torch.testing.assert_close(
        L.ensemble_q(n["critic"], n["critic_params"], b["obs"], b["action"]),
        loop_q(n["critic"], n["critic_params"], b["obs"], b["action"]),
        rtol=1e-6,
        atol=1e-6,
    )


def test_bad_inputs_raise_value_errors_naming_the_argument():
    d = transitions(0, 4)
    with pytest.raises(ValueError, match="terminated"):
        L.bellman_target(d["reward"], d["terminated"].double(), d["reward"], 0.9)
    with pytest.raises(ValueError, match="next_value"):
        L.bellman_target(d["reward"], d["terminated"], d["reward"][:3], 0.9)
    with pytest.raises(ValueError, match="gamma"):
        L.bellman_target(d["reward"], d["terminated"], d["reward"], 1.5)
    with pytest.raises(ValueError, match="gamma"):
        L.bellman_target(d["reward"], d["terminated"], d["reward"], torch.ones(5))
    with pytest.raises(ValueError, match="q_values"):
        L.ensemble_critic_loss(d["q_values"][:, :3], d["reward"])
    with pytest.raises(ValueError, match="q_values"):
        L.ensemble_critic_loss(d["q_values"][0], d["reward"])
    with pytest.raises(ValueError, match="distance"):
        L.ensemble_critic_loss(d["q_values"], d["reward"], "mse")
    with pytest.raises(ValueError, match="alpha"):
        L.soft_state_value(d["next_q_values"], d["next_log_prob"], -0.1)
