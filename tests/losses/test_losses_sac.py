"""SAC losses: actor, temperature, target entropy, objectives on networks, compiled and vmapped updates."""

import math

import pytest
import torch
from actor_critic_data import (
    ACT_DIM,
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

from funrl import control, nets, random, tree
from funrl import losses as L
from funrl.testing import assert_pure, assert_trees_close, assert_vmap_equals_loop


@given(seed=seeds, batch=st.integers(2, 17))
def test_critic_and_actor_losses_are_batch_order_invariant(seed, batch):
    d = transitions(seed, batch)
    perm = torch.randperm(batch, generator=generator(seed + 1))
    loss, _ = L.sac_critic_loss(d["q_values"], d["reward"])
    loss_perm, _ = L.sac_critic_loss(d["q_values"][:, perm], d["reward"][perm])
    torch.testing.assert_close(loss, loss_perm, rtol=1e-12, atol=1e-12)
    actor, _ = L.sac_actor_loss(d["q_values"], d["log_prob"], 0.2)
    actor_perm, _ = L.sac_actor_loss(d["q_values"][:, perm], d["log_prob"][perm], 0.2)
    torch.testing.assert_close(actor, actor_perm, rtol=1e-12, atol=1e-12)
    temp, _ = L.sac_temperature_loss(torch.tensor(0.3, dtype=torch.float64), d["log_prob"], -2.0)
    temp_perm, _ = L.sac_temperature_loss(torch.tensor(0.3, dtype=torch.float64), d["log_prob"][perm], -2.0)
    torch.testing.assert_close(temp, temp_perm, rtol=1e-12, atol=1e-12)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_losses_have_finite_gradients_on_finite_input(seed, batch, ensemble):
    d = transitions(seed, batch, ensemble)
    q = (d["q_values"] * 1e3).requires_grad_(True)
    log_prob = (d["log_prob"] * 1e3).requires_grad_(True)
    log_alpha = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    losses = [
        L.sac_critic_loss(q, d["reward"])[0],
        L.sac_critic_loss(q, d["reward"], "smooth_l1")[0],
        L.sac_actor_loss(q, log_prob, log_alpha.exp())[0],
        L.sac_temperature_loss(log_alpha, log_prob, -3.0)[0],
        L.ddpg_actor_loss(q[0])[0],
    ]
    grads = torch.autograd.grad(sum(losses), (q, log_prob, log_alpha))
    assert all(torch.isfinite(g).all() for g in grads)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, alpha=st.floats(0.0, 2.0))
def test_sac_actor_loss_matches_reference(seed, batch, ensemble, alpha):
    d = transitions(seed, batch, ensemble)
    loss, metrics = L.sac_actor_loss(d["q_values"], d["log_prob"], alpha)
    expected = sum(
        alpha * d["log_prob"][b].item() - min(d["q_values"][e, b].item() for e in range(ensemble))
        for b in range(batch)
    )
    assert loss.item() == pytest.approx(expected / batch, rel=1e-10, abs=1e-12)
    assert metrics["entropy"].item() == pytest.approx(-d["log_prob"].mean().item())


def test_sac_actor_loss_does_not_train_alpha():
    d = transitions(1, 5)
    log_alpha = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    log_prob = d["log_prob"].clone().requires_grad_(True)
    loss, _ = L.sac_actor_loss(d["q_values"], log_prob, log_alpha.exp())
    grad_alpha, grad_log_prob = torch.autograd.grad(loss, (log_alpha, log_prob), allow_unused=True)
    assert grad_alpha is None
    torch.testing.assert_close(grad_log_prob, torch.full_like(log_prob, math.exp(0.1) / 5))


@given(seed=seeds, batch=batch_sizes, target_entropy=st.floats(-6.0, 6.0))
def test_temperature_gradient_raises_alpha_when_entropy_below_target(seed, batch, target_entropy):
    log_prob = torch.randn(batch, generator=generator(seed), dtype=torch.float64)
    log_alpha = torch.tensor(-0.7, dtype=torch.float64, requires_grad=True)
    loss, metrics = L.sac_temperature_loss(log_alpha, log_prob, target_entropy)
    (grad,) = torch.autograd.grad(loss, (log_alpha,))
    entropy = -log_prob.mean().item()
    # d loss / d log_alpha = -(mean log_prob + target_entropy) = entropy - target_entropy.
    assert grad.item() == pytest.approx(entropy - target_entropy, rel=1e-10, abs=1e-12)
    assert loss.item() == pytest.approx(0.7 * (-entropy + target_entropy), rel=1e-10, abs=1e-12)
    assert metrics["alpha"].item() == pytest.approx(math.exp(-0.7))


def test_sac_target_entropy_is_minus_action_dim():
    assert L.sac_target_entropy(6) == -6.0
    with pytest.raises(ValueError, match="action_dim"):
        L.sac_target_entropy(0)


def test_sac_objectives_equal_their_tensor_level_composition():
    n, b, key = networks(), replay_batch(1), random.key(7)
    dist = nets.distributions.tanh_normal
    loss, _ = L.sac_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key,
        actor=n["actor"], critic=n["critic"], gamma=0.99,
    )  # fmt: skip
    next_action, next_log_prob = dist.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    next_q = loop_q(n["critic"], n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * (next_q.min(0).values - 0.2 * next_log_prob)
    q = loop_q(n["critic"], n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)

    actor_loss, metrics = L.sac_actor_objective(
        n["actor_params"], n["critic_params"], 0.2, b, key, actor=n["actor"], critic=n["critic"]
    )
    action, log_prob = dist.sample_and_log_prob(key, *nets.apply(n["actor"], n["actor_params"], b["obs"]))
    q_pi = loop_q(n["critic"], n["critic_params"], b["obs"], action)
    torch.testing.assert_close(actor_loss, (0.2 * log_prob - q_pi.min(0).values).mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["log_prob"], log_prob, rtol=1e-6, atol=1e-6)


def test_sac_objectives_draw_through_the_given_sampler():
    """``sample`` replaces the one-key draw: a sampler drawing each row with its own key gives
    the losses of the composition with those rows' draws."""
    n, b = networks(), replay_batch(1)
    keys = random.split(random.key(5), b["obs"].shape[0])
    dist = nets.distributions.tanh_normal
    seen = []

    def per_row(actor, actor_params, obs, row_keys):
        seen.append(obs)
        loc, scale = nets.apply(actor, actor_params, obs)
        draws = [
            dist.sample_and_log_prob(k, loc[i : i + 1], scale[i : i + 1]) for i, k in enumerate(row_keys)
        ]
        return torch.cat([a for a, _ in draws]), torch.cat([lp for _, lp in draws])

    kwargs = {"actor": n["actor"], "critic": n["critic"], "sample": per_row}
    loss, _ = L.sac_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, keys, gamma=0.99, **kwargs
    )
    next_action, next_log_prob = per_row(n["actor"], n["actor_params"], b["next_obs"], keys)
    next_q = loop_q(n["critic"], n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * (next_q.min(0).values - 0.2 * next_log_prob)
    q = loop_q(n["critic"], n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)

    actor_loss, metrics = L.sac_actor_objective(n["actor_params"], n["critic_params"], 0.2, b, keys, **kwargs)
    action, log_prob = per_row(n["actor"], n["actor_params"], b["obs"], keys)
    q_pi = loop_q(n["critic"], n["critic_params"], b["obs"], action)
    torch.testing.assert_close(actor_loss, (0.2 * log_prob - q_pi.min(0).values).mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["log_prob"], log_prob, rtol=1e-6, atol=1e-6)
    assert seen[0] is b["next_obs"] and seen[2] is b["obs"]  # the objectives drew through it


def test_sac_objective_gradients_reach_only_the_trained_params():
    n, b, key = networks(), replay_batch(2), random.key(3)
    kwargs = {"actor": n["actor"], "critic": n["critic"]}
    grads, (loss, _) = torch.func.grad_and_value(L.sac_critic_objective, has_aux=True)(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key, gamma=0.99, **kwargs
    )
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in tree.leaves(grads))
    assert tree.structure(grads) == tree.structure(n["critic_params"])
    # Actor loss through autograd: the critic params must not receive gradients.
    critic_params = tree.map(lambda p: p.clone().requires_grad_(True), n["critic_params"])
    actor_params = tree.map(lambda p: p.clone().requires_grad_(True), n["actor_params"])
    loss, _ = L.sac_actor_objective(actor_params, critic_params, 0.2, b, key, **kwargs)
    loss.backward()
    assert all(p.grad is None for p in tree.leaves(critic_params))
    assert all(torch.isfinite(p.grad).all() for p in tree.leaves(actor_params))


def test_objectives_reject_incomplete_batches():
    n, b = networks(), replay_batch(0)
    del b["terminated"]
    with pytest.raises(ValueError, match="batch"):
        L.sac_critic_objective(
            n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, random.key(0),
            actor=n["actor"], critic=n["critic"], gamma=0.99,
        )  # fmt: skip


def _sac_sgd_step(actor_params, critic_params, target_critic_params, log_alpha, batch, key, actor, critic):
    """One full SAC update with plain SGD (critic, actor, temperature, polyak): a pure function."""
    critic_key, actor_key = random.split(key)
    alpha = log_alpha.exp()
    critic_grads, (critic_loss, _) = torch.func.grad_and_value(L.sac_critic_objective, has_aux=True)(
        critic_params, actor_params, target_critic_params, alpha, batch, critic_key,
        actor=actor, critic=critic, gamma=0.99,
    )  # fmt: skip
    critic_params = tree.map(lambda p, g: p - 1e-2 * g, critic_params, critic_grads)
    actor_grads, (actor_loss, metrics) = torch.func.grad_and_value(L.sac_actor_objective, has_aux=True)(
        actor_params, critic_params, alpha, batch, actor_key, actor=actor, critic=critic
    )
    actor_params = tree.map(lambda p, g: p - 1e-2 * g, actor_params, actor_grads)
    alpha_grad, (alpha_loss, _) = torch.func.grad_and_value(L.sac_temperature_loss, has_aux=True)(
        log_alpha, metrics["log_prob"], -float(ACT_DIM)
    )
    log_alpha = log_alpha - 1e-2 * alpha_grad
    target_critic_params = L.polyak(target_critic_params, critic_params, 0.005)
    losses = torch.stack([critic_loss, actor_loss, alpha_loss])
    return actor_params, critic_params, target_critic_params, log_alpha, losses


@pytest.mark.slow
def test_sac_update_compiled_equals_eager():
    n, b = networks(), replay_batch(8)
    args = (
        n["actor_params"],
        n["critic_params"],
        n["target_critic_params"],
        torch.tensor(0.0),
        b,
        random.key(9),
    )
    eager = _sac_sgd_step(*args, n["actor"], n["critic"])
    compiled = control.compile(_sac_sgd_step)(*args, n["actor"], n["critic"])
    assert_trees_close(compiled, eager, rtol=1e-5, atol=1e-6)
    # Purity: the same inputs give the same outputs, and the step did change the params.
    assert_pure(_sac_sgd_step, *args, n["actor"], n["critic"])
    assert not tree.tree_allclose(eager[1], n["critic_params"])


def test_sac_objective_is_pure_and_vmap_over_keys_equals_loop():
    n, b = networks(), replay_batch(9)
    keys = random.split(random.key(12), 3)

    def critic_loss(key):
        return L.sac_critic_objective(
            n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key,
            actor=n["actor"], critic=n["critic"], gamma=0.99,
        )[0]  # fmt: skip

    assert_vmap_equals_loop(critic_loss, 0, keys, rtol=1e-5, atol=1e-6)
    assert_pure(critic_loss, keys[0])
    assert len({float(critic_loss(k)) for k in keys}) == 3  # the key drives the next-action sample


def test_bad_inputs_raise_value_errors_naming_the_argument():
    d = transitions(0, 4)
    with pytest.raises(ValueError, match="alpha"):
        L.sac_actor_loss(d["q_values"], d["log_prob"], -0.1)
    with pytest.raises(ValueError, match="log_prob"):
        L.sac_actor_loss(d["q_values"], d["log_prob"].bool(), 0.1)
    with pytest.raises(ValueError, match="log_alpha"):
        L.sac_temperature_loss(torch.zeros(1), d["log_prob"], -1.0)
