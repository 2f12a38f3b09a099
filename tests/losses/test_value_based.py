"""DQN, Double DQN, n-step targets, C51 and QR-DQN: funrl.testing's TD-target battery, invariants,
references from the papers, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl.losses import (
    c51_loss,
    categorical_projection,
    categorical_q_learning_target,
    discounted_returns,
    double_q_learning_target,
    dqn_loss,
    n_step_q_targets,
    q_learning_target,
    qr_dqn_loss,
    quantile_huber_loss,
    quantile_q_learning_target,
)
from funrl.testing import assert_pure, assert_vmap_equals_loop, td_target_invariants

DTYPE = torch.float64
batches = st.tuples(st.integers(0, 2**16), st.integers(1, 32), st.integers(2, 6))
gammas = st.sampled_from([0.0, 0.5, 0.99, 1.0])


def make(seed: int, batch: int, actions: int, atoms: int = 11) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "q": torch.randn(batch, actions, generator=g, dtype=DTYPE),
        "next_q": torch.randn(batch, actions, generator=g, dtype=DTYPE),
        "next_q_online": torch.randn(batch, actions, generator=g, dtype=DTYPE),
        "actions": torch.randint(0, actions, (batch,), generator=g),
        "rewards": torch.randn(batch, generator=g, dtype=DTYPE),
        "terminated": torch.rand(batch, generator=g) < 0.3,
        "logits": torch.randn(batch, actions, atoms, generator=g, dtype=DTYPE),
        "next_logits": torch.randn(batch, actions, atoms, generator=g, dtype=DTYPE),
        "quantiles": torch.randn(batch, actions, atoms, generator=g, dtype=DTYPE).sort(-1).values,
        "next_quantiles": torch.randn(batch, actions, atoms, generator=g, dtype=DTYPE).sort(-1).values,
    }


def ref_bellemare_projection(values, probs, v_min, v_max):
    """Bellemare et al. (2017) Algorithm 1, per sample and atom, with b on an atom kept whole."""
    batch, num_atoms = values.shape
    delta = (v_max - v_min) / (num_atoms - 1)
    out = torch.zeros_like(probs)
    for i in range(batch):
        for j in range(num_atoms):
            tz = min(max(float(values[i, j]), v_min), v_max)
            b = (tz - v_min) / delta
            lower, upper = math.floor(b), math.ceil(b)
            if lower == upper:
                out[i, lower] += probs[i, j]
            else:
                out[i, lower] += probs[i, j] * (upper - b)
                out[i, upper] += probs[i, j] * (b - lower)
    return out


def ref_quantile_huber(quantiles, targets, delta):
    """Dabney et al. (2017) eq. 9-10 per sample: Σ_i mean_j |τ̂_i - 1{u<0}| L_δ(u) / δ."""
    n, m = quantiles.shape[-1], targets.shape[-1]
    total = 0.0
    for i in range(n):
        tau = (2 * i + 1) / (2 * n)
        for j in range(m):
            u = float(targets[j] - quantiles[i])
            huber = 0.5 * u * u if abs(u) <= delta else delta * (abs(u) - 0.5 * delta)
            total += abs(tau - (u < 0)) * huber / delta / m
    return total


# ------------------------------------------------------------------------------------------
# DQN
# ------------------------------------------------------------------------------------------


@given(batches, gammas)
def test_dqn_loss_is_zero_when_q_equals_its_target(batch, gamma):
    d = make(*batch)
    targets = q_learning_target(d["rewards"], d["next_q"], d["terminated"], gamma)
    q = d["q"].clone()
    q[torch.arange(len(targets)), d["actions"]] = targets
    for loss_type in ("huber", "mse"):
        loss, metrics = dqn_loss(q, d["actions"], targets, loss_type)
        assert loss == 0 and metrics["td_error_abs"] == 0


@given(batches, gammas, st.sampled_from([0.5, 1.0, 2.0]))
def test_dqn_loss_matches_equations(batch, gamma, delta):
    d = make(*batch)
    targets = q_learning_target(d["rewards"], d["next_q"], d["terminated"], gamma)
    expected_targets = d["rewards"] + gamma * (~d["terminated"]).to(DTYPE) * d["next_q"].max(-1).values
    torch.testing.assert_close(targets, expected_targets)
    q_taken = d["q"][torch.arange(len(targets)), d["actions"]]
    u = (targets - q_taken).abs()
    huber = torch.where(u <= delta, 0.5 * u**2, delta * (u - 0.5 * delta)).mean()
    torch.testing.assert_close(dqn_loss(d["q"], d["actions"], targets, "huber", delta)[0], huber)
    torch.testing.assert_close(huber, torch.nn.functional.huber_loss(q_taken, targets, delta=delta))
    torch.testing.assert_close(dqn_loss(d["q"], d["actions"], targets, "mse")[0], (u**2).mean())


@given(batches, gammas)
def test_double_dqn_target_evaluates_the_online_greedy_action_with_the_target_net(batch, gamma):
    d = make(*batch)
    got = double_q_learning_target(d["rewards"], d["next_q_online"], d["next_q"], d["terminated"], gamma)
    greedy = d["next_q_online"].argmax(-1)
    bootstrap = d["next_q"][torch.arange(len(greedy)), greedy]
    torch.testing.assert_close(got, d["rewards"] + gamma * (~d["terminated"]).to(DTYPE) * bootstrap)
    # With the online net equal to the target net it reduces to the plain Q-learning target.
    same = double_q_learning_target(d["rewards"], d["next_q"], d["next_q"], d["terminated"], gamma)
    torch.testing.assert_close(same, q_learning_target(d["rewards"], d["next_q"], d["terminated"], gamma))


def test_dqn_gradient_only_reaches_the_taken_action_and_not_the_target():
    d = make(0, 5, 3)
    q = d["q"].clone().requires_grad_(True)
    targets = d["rewards"].clone().requires_grad_(True)
    loss, _ = dqn_loss(q, d["actions"], targets)
    loss.backward()
    mask = torch.zeros_like(q, dtype=torch.bool)
    mask[torch.arange(5), d["actions"]] = True
    assert torch.all(q.grad[~mask] == 0) and torch.all(q.grad[mask] != 0)
    assert targets.grad is None


def one_step_q_learning(rewards, next_q_values, terminated, truncated, gamma, n):
    return q_learning_target(rewards, next_q_values, terminated, gamma)


def one_step_double_q_learning_with_one_network(rewards, next_q_values, terminated, truncated, gamma, n):
    return double_q_learning_target(rewards, next_q_values, next_q_values, terminated, gamma)


def n_step_double_q_targets_with_one_network(rewards, next_q_values, terminated, truncated, gamma, n):
    return n_step_q_targets(rewards, next_q_values, terminated, truncated, gamma, n, next_q_values)


@pytest.mark.parametrize(
    "target",
    [
        n_step_q_targets,
        n_step_double_q_targets_with_one_network,
        one_step_q_learning,
        one_step_double_q_learning_with_one_network,
    ],
)
def test_q_targets_pass_the_td_target_battery(target):
    # Terminal masking, gamma=0 gives the reward, n=1 is the one-step target, no flow across ends.
    td_target_invariants(target, max_examples=10)


@given(st.integers(0, 2**16), st.integers(1, 12), gammas)
def test_n_step_q_targets(seed, length, gamma):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(length, 3, generator=g, dtype=DTYPE)
    next_q = torch.randn(length, 3, 4, generator=g, dtype=DTYPE)
    next_online = torch.randn(length, 3, 4, generator=g, dtype=DTYPE)
    terminated = torch.rand(length, 3, generator=g) < 0.2
    truncated = (torch.rand(length, 3, generator=g) < 0.2) & ~terminated
    one_double = n_step_q_targets(rewards, next_q, terminated, truncated, gamma, 1, next_online)
    torch.testing.assert_close(
        one_double, double_q_learning_target(rewards, next_online, next_q, terminated, gamma)
    )
    long = n_step_q_targets(rewards, next_q, terminated, truncated, gamma, length)
    mc = discounted_returns(rewards, next_q.max(-1).values, terminated, truncated, gamma)
    torch.testing.assert_close(long, mc)


# ------------------------------------------------------------------------------------------
# C51
# ------------------------------------------------------------------------------------------


@given(st.integers(0, 2**16), st.integers(1, 8), st.sampled_from([2, 5, 11, 51]))
def test_categorical_projection_matches_bellemare_algorithm_and_conserves_mass(seed, batch, atoms):
    g = torch.Generator().manual_seed(seed)
    values = 15 * torch.randn(batch, atoms, generator=g, dtype=DTYPE)
    values[:, 0] = -10.0 + 20.0 / (atoms - 1) * torch.randint(0, atoms, (batch,), generator=g)  # on atoms
    probs = torch.softmax(torch.randn(batch, atoms, generator=g, dtype=DTYPE), -1)
    got = categorical_projection(values, probs, -10.0, 10.0)
    torch.testing.assert_close(got, ref_bellemare_projection(values, probs, -10.0, 10.0))
    torch.testing.assert_close(got.sum(-1), torch.ones(batch, dtype=DTYPE))
    assert torch.all(got >= 0)


@given(st.integers(0, 2**16), st.sampled_from([5, 11, 51]))
def test_categorical_projection_is_identity_on_the_support_and_preserves_the_mean_inside(seed, atoms):
    g = torch.Generator().manual_seed(seed)
    support = torch.linspace(-3.0, 7.0, atoms, dtype=DTYPE).expand(4, atoms)
    probs = torch.softmax(torch.randn(4, atoms, generator=g, dtype=DTYPE), -1)
    torch.testing.assert_close(categorical_projection(support, probs, -3.0, 7.0), probs)
    inside = -3.0 + 10.0 * torch.rand(4, atoms, generator=g, dtype=DTYPE)
    projected = categorical_projection(inside, probs, -3.0, 7.0)
    torch.testing.assert_close((projected * support).sum(-1), (probs * inside).sum(-1))


@given(batches, gammas)
def test_c51_target_and_loss(batch, gamma):
    d = make(*batch)
    target = categorical_q_learning_target(d["rewards"], d["next_logits"], d["terminated"], gamma, -5.0, 5.0)
    atoms = torch.linspace(-5.0, 5.0, 11, dtype=DTYPE)
    probs = torch.softmax(d["next_logits"], -1)
    greedy = (probs * atoms).sum(-1).argmax(-1)
    chosen = probs[torch.arange(len(greedy)), greedy]
    shifted = d["rewards"][:, None] + gamma * (~d["terminated"]).to(DTYPE)[:, None] * atoms
    torch.testing.assert_close(target, ref_bellemare_projection(shifted, chosen, -5.0, 5.0))
    loss, _ = c51_loss(d["logits"], d["actions"], target)
    taken = torch.log_softmax(d["logits"][torch.arange(len(greedy)), d["actions"]], -1)
    torch.testing.assert_close(loss, -(target * taken).sum(-1).mean())
    # The loss is minimised (gradient zero) when the predicted distribution equals the target.
    logits = d["logits"].clone()
    logits[torch.arange(len(greedy)), d["actions"]] = target.clamp_min(1e-30).log()
    logits.requires_grad_(True)
    (grad,) = torch.autograd.grad(c51_loss(logits, d["actions"], target)[0], logits)
    torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-12, rtol=0)


def test_double_c51_selects_with_the_online_network():
    d = make(2, 6, 3)
    online = d["logits"]
    double = categorical_q_learning_target(
        d["rewards"], d["next_logits"], d["terminated"], 0.9, -5.0, 5.0, next_logits_online=online
    )
    atoms = torch.linspace(-5.0, 5.0, 11, dtype=DTYPE)
    greedy = (torch.softmax(online, -1) * atoms).sum(-1).argmax(-1)
    chosen = torch.softmax(d["next_logits"], -1)[torch.arange(6), greedy]
    shifted = d["rewards"][:, None] + 0.9 * (~d["terminated"]).to(DTYPE)[:, None] * atoms
    torch.testing.assert_close(double, ref_bellemare_projection(shifted, chosen, -5.0, 5.0))


# ------------------------------------------------------------------------------------------
# QR-DQN
# ------------------------------------------------------------------------------------------


@given(st.integers(0, 2**16), st.integers(1, 9), st.integers(1, 9), st.sampled_from([0.5, 1.0, 3.0]))
def test_quantile_huber_loss_matches_dabney_equation(seed, n, m, delta):
    g = torch.Generator().manual_seed(seed)
    quantiles = torch.randn(3, n, generator=g, dtype=DTYPE)
    targets = 2 * torch.randn(3, m, generator=g, dtype=DTYPE)
    got = quantile_huber_loss(quantiles, targets, delta)
    expected = [ref_quantile_huber(quantiles[b], targets[b], delta) for b in range(3)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=DTYPE))


def test_quantile_loss_minimiser_is_the_target_quantiles():
    # Descend on the quantiles of a fixed sample: they converge to its τ̂-quantiles (QR's point).
    samples = torch.arange(1.0, 101.0, dtype=DTYPE)[None]
    quantiles = torch.zeros(1, 4, dtype=DTYPE, requires_grad=True)
    for _ in range(400):
        (grad,) = torch.autograd.grad(quantile_huber_loss(quantiles, samples, 1e-3).sum(), quantiles)
        quantiles = (quantiles - 2.0 * grad).detach().requires_grad_(True)
    # τ̂ = 1/8, 3/8, 5/8, 7/8 of 1..100: between the 12th/13th, 37th/38th, 62nd/63rd, 87th/88th values.
    torch.testing.assert_close(
        quantiles.detach()[0], torch.tensor([13.0, 38.0, 63.0, 88.0], dtype=DTYPE), atol=1.0, rtol=0
    )


@given(batches, gammas)
def test_qr_dqn_target_and_loss(batch, gamma):
    d = make(*batch)
    target = quantile_q_learning_target(d["rewards"], d["next_quantiles"], d["terminated"], gamma)
    greedy = d["next_quantiles"].mean(-1).argmax(-1)
    chosen = d["next_quantiles"][torch.arange(len(greedy)), greedy]
    expected = d["rewards"][:, None] + gamma * (~d["terminated"]).to(DTYPE)[:, None] * chosen
    torch.testing.assert_close(target, expected)
    loss, _ = qr_dqn_loss(d["quantiles"], d["actions"], target)
    taken = d["quantiles"][torch.arange(len(greedy)), d["actions"]]
    torch.testing.assert_close(loss, quantile_huber_loss(taken, target).mean())
    equal_loss, _ = qr_dqn_loss(d["quantiles"], d["actions"], torch.zeros_like(target) + taken.mean(-1, True))
    assert equal_loss >= 0


def test_qr_dqn_loss_is_zero_for_a_point_mass_matched():
    quantiles = torch.full((2, 3, 5), 1.5, dtype=DTYPE)
    loss, _ = qr_dqn_loss(quantiles, torch.tensor([0, 2]), torch.full((2, 7), 1.5, dtype=DTYPE))
    assert loss == 0


# ------------------------------------------------------------------------------------------
# Every loss: finite gradients, batch-order invariance, purity, vmap over an ensemble
# ------------------------------------------------------------------------------------------


def _losses(d, gamma=0.9):
    q_targets = double_q_learning_target(
        d["rewards"], d["next_q_online"], d["next_q"], d["terminated"], gamma
    )
    c51_targets = categorical_q_learning_target(
        d["rewards"], d["next_logits"], d["terminated"], gamma, -5.0, 5.0
    )
    qr_targets = quantile_q_learning_target(d["rewards"], d["next_quantiles"], d["terminated"], gamma)
    return {
        "dqn_huber": dqn_loss(d["q"], d["actions"], q_targets)[0],
        "dqn_mse": dqn_loss(d["q"], d["actions"], q_targets, "mse")[0],
        "c51": c51_loss(d["logits"], d["actions"], c51_targets)[0],
        "qr_dqn": qr_dqn_loss(d["quantiles"], d["actions"], qr_targets)[0],
    }


@given(batches)
def test_every_loss_has_finite_gradients(batch):
    d = make(*batch)
    for k in ("q", "logits", "quantiles"):
        d[k].requires_grad_(True)
    for name, loss in _losses(d).items():
        grads = torch.autograd.grad(loss, [d["q"], d["logits"], d["quantiles"]], allow_unused=True)
        assert torch.isfinite(loss), name
        assert any(g is not None for g in grads) and all(g is None or torch.isfinite(g).all() for g in grads)


@given(batches, st.integers(0, 2**16))
def test_every_loss_is_batch_order_invariant(batch, perm_seed):
    d = make(*batch)
    perm = torch.randperm(batch[1], generator=torch.Generator().manual_seed(perm_seed))
    shuffled = {k: v[perm] for k, v in d.items()}
    expected = _losses(d)
    for name, loss in _losses(shuffled).items():
        torch.testing.assert_close(loss, expected[name], msg=name)


def test_every_loss_is_pure():
    assert_pure(_losses, make(1, 8, 3))


def test_vmap_over_an_ensemble_equals_a_loop():
    members = [make(seed, 7, 3) for seed in range(4)]
    stacked = {k: torch.stack([m[k] for m in members]) for k in members[0]}

    def losses(*columns):
        return tuple(_losses(dict(zip(stacked, columns, strict=True))).values())

    assert_vmap_equals_loop(losses, 0, *stacked.values())


def test_vmap_over_gamma_equals_a_loop():
    d = make(3, 9, 4)
    gammas = torch.tensor([0.0, 0.5, 0.99], dtype=DTYPE)
    assert_vmap_equals_loop(lambda g: _losses(d, g)["c51"], 0, gammas)


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


def test_bad_input_raises_value_error_naming_the_argument():
    d = make(0, 4, 3)
    t = q_learning_target(d["rewards"], d["next_q"], d["terminated"], 0.9)
    cases = [
        (lambda: dqn_loss(d["q"], d["actions"].double(), t), "actions: expected an integer tensor"),
        (lambda: dqn_loss(d["q"], d["actions"][:3], t), "actions: expected shape \\(4,\\)"),
        (lambda: dqn_loss(d["q"], d["actions"], t[:3]), "q_values: expected shape"),
        (lambda: dqn_loss(d["q"], d["actions"], t, "l1"), "loss_type: expected one of"),
        (lambda: dqn_loss(d["q"], d["actions"], t, huber_delta=0.0), "huber_delta: expected a value > 0"),
        (lambda: q_learning_target(d["rewards"], d["next_q"], d["terminated"].double(), 0.9), "terminated"),
        (
            lambda: q_learning_target(d["rewards"], d["next_q"], d["terminated"], 1.2),
            "gamma: expected a value in",
        ),
        (lambda: q_learning_target(d["rewards"], d["next_q"][:, 0], d["terminated"], 0.9), "next_q_values"),
        (
            lambda: double_q_learning_target(
                d["rewards"], d["next_q"], d["next_q"][:, :2], d["terminated"], 0.9
            ),
            "next_q_target: expected shape",
        ),
        (
            lambda: categorical_projection(d["logits"][:, 0], d["logits"][:, 0].softmax(-1), 1.0, -1.0),
            "v_max: expected a value > v_min",
        ),
        (
            lambda: categorical_projection(d["logits"][:, 0], d["logits"][:, 0, :5], -1.0, 1.0),
            "probs: expected shape",
        ),
        (lambda: c51_loss(d["logits"], d["actions"], d["logits"][:, 0, :5]), "target_probs: expected shape"),
        (
            lambda: quantile_huber_loss(d["quantiles"][:, 0], d["quantiles"][:3, 0]),
            "targets: expected the batch",
        ),
        (lambda: qr_dqn_loss(d["quantiles"], d["actions"], t), "target_quantiles: expected shape"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
