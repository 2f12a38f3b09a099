"""Continuous-control losses (DDPG, TD3, SAC, discrete SAC, REDQ, CrossQ): invariants and references.

Reference values are written here from the papers' equations with explicit Python loops over
critics and samples, independently of the vectorised implementation.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from funrl import nets, random, tree
from funrl.losses import continuous as C
from funrl.losses.target import periodic_update, polyak

seeds = st.integers(0, 2**16)
ensemble_sizes = st.integers(1, 5)
batch_sizes = st.integers(1, 17)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _transitions(seed: int, batch: int, ensemble: int = 2) -> dict:
    g = _gen(seed)
    return {
        "q_values": torch.randn(ensemble, batch, generator=g, dtype=torch.float64),
        "next_q_values": torch.randn(ensemble, batch, generator=g, dtype=torch.float64),
        "reward": torch.randn(batch, generator=g, dtype=torch.float64),
        "terminated": torch.rand(batch, generator=g) < 0.3,
        "log_prob": torch.randn(batch, generator=g, dtype=torch.float64),
        "next_log_prob": torch.randn(batch, generator=g, dtype=torch.float64),
    }


# ----------------------------------------------------------------------------------------------
# Targets.


@given(seed=seeds, batch=batch_sizes, gamma=st.floats(0.0, 1.0))
def test_bellman_target_matches_per_sample_reference(seed, batch, gamma):
    d = _transitions(seed, batch)
    next_value = d["next_q_values"][0]
    out = C.bellman_target(d["reward"], d["terminated"], next_value, gamma)
    for b in range(batch):
        bootstrap = 0.0 if d["terminated"][b] else gamma * next_value[b].item()
        assert out[b].item() == pytest.approx(d["reward"][b].item() + bootstrap, rel=1e-12, abs=1e-12)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, alpha=st.floats(0.0, 2.0))
def test_soft_state_value_is_min_over_critics_minus_entropy_term(seed, batch, ensemble, alpha):
    d = _transitions(seed, batch, ensemble)
    out = C.soft_state_value(d["next_q_values"], d["next_log_prob"], alpha)
    for b in range(batch):
        min_q = min(d["next_q_values"][e, b].item() for e in range(ensemble))
        expected = min_q - alpha * d["next_log_prob"][b].item()
        assert out[b].item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------------------------
# Ensemble critic loss (SAC / TD3 / DDPG).


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_critic_loss_zero_when_every_critic_equals_target(seed, batch, ensemble):
    target = torch.randn(batch, generator=_gen(seed))
    for distance in C.DISTANCES:
        loss, _ = C.sac_critic_loss(target.expand(ensemble, batch).clone(), target, distance)
        assert loss.item() == 0.0


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_critic_loss_matches_reference_sum_over_critics_mean_over_batch(seed, batch, ensemble):
    d = _transitions(seed, batch, ensemble)
    target = d["reward"]
    for distance, fn in (
        ("l2", lambda x: x * x),
        ("l1", abs),
        ("smooth_l1", lambda x: 0.5 * x * x if abs(x) < 1.0 else abs(x) - 0.5),
    ):
        loss, metrics = C.td3_critic_loss(d["q_values"], target, distance)
        expected = sum(
            fn(d["q_values"][e, b].item() - target[b].item()) for e in range(ensemble) for b in range(batch)
        )
        assert loss.item() == pytest.approx(expected / batch, rel=1e-10)
        assert metrics["td_error_abs_max"].shape == (batch,)


def test_critic_loss_treats_target_as_constant():
    d = _transitions(0, 8)
    q = d["q_values"].clone().requires_grad_(True)
    target = d["reward"].clone().requires_grad_(True)
    loss, _ = C.sac_critic_loss(q, target)
    grad_q, grad_target = torch.autograd.grad(loss, (q, target), allow_unused=True)
    assert grad_target is None
    # d/dq_eb of mean_b sum_e (q_eb - y_b)^2 = 2 (q_eb - y_b) / B
    torch.testing.assert_close(grad_q, 2.0 * (d["q_values"] - d["reward"]) / 8)


@given(seed=seeds, batch=st.integers(2, 17))
def test_critic_and_actor_losses_are_batch_order_invariant(seed, batch):
    d = _transitions(seed, batch)
    perm = torch.randperm(batch, generator=_gen(seed + 1))
    loss, _ = C.sac_critic_loss(d["q_values"], d["reward"])
    loss_perm, _ = C.sac_critic_loss(d["q_values"][:, perm], d["reward"][perm])
    torch.testing.assert_close(loss, loss_perm, rtol=1e-12, atol=1e-12)
    actor, _ = C.sac_actor_loss(d["q_values"], d["log_prob"], 0.2)
    actor_perm, _ = C.sac_actor_loss(d["q_values"][:, perm], d["log_prob"][perm], 0.2)
    torch.testing.assert_close(actor, actor_perm, rtol=1e-12, atol=1e-12)
    temp, _ = C.sac_temperature_loss(torch.tensor(0.3, dtype=torch.float64), d["log_prob"], -2.0)
    temp_perm, _ = C.sac_temperature_loss(torch.tensor(0.3, dtype=torch.float64), d["log_prob"][perm], -2.0)
    torch.testing.assert_close(temp, temp_perm, rtol=1e-12, atol=1e-12)


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes)
def test_losses_have_finite_gradients_on_finite_input(seed, batch, ensemble):
    d = _transitions(seed, batch, ensemble)
    q = (d["q_values"] * 1e3).requires_grad_(True)
    log_prob = (d["log_prob"] * 1e3).requires_grad_(True)
    log_alpha = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    losses = [
        C.sac_critic_loss(q, d["reward"])[0],
        C.sac_critic_loss(q, d["reward"], "smooth_l1")[0],
        C.sac_actor_loss(q, log_prob, log_alpha.exp())[0],
        C.sac_temperature_loss(log_alpha, log_prob, -3.0)[0],
        C.ddpg_actor_loss(q[0])[0],
    ]
    grads = torch.autograd.grad(sum(losses), (q, log_prob, log_alpha))
    assert all(torch.isfinite(g).all() for g in grads)


def test_vmap_over_seeds_of_critic_loss_equals_loop():
    batches = [_transitions(s, 6) for s in range(4)]
    q = torch.stack([b["q_values"] for b in batches])
    y = torch.stack([b["reward"] for b in batches])
    losses, metrics = torch.func.vmap(C.sac_critic_loss)(q, y)
    for i in range(4):
        loss, m = C.sac_critic_loss(q[i], y[i])
        torch.testing.assert_close(losses[i], loss, rtol=0, atol=0)
        torch.testing.assert_close(metrics["td_error_abs_max"][i], m["td_error_abs_max"], rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# SAC actor and temperature.


@given(seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, alpha=st.floats(0.0, 2.0))
def test_sac_actor_loss_matches_reference(seed, batch, ensemble, alpha):
    d = _transitions(seed, batch, ensemble)
    loss, metrics = C.sac_actor_loss(d["q_values"], d["log_prob"], alpha)
    expected = sum(
        alpha * d["log_prob"][b].item() - min(d["q_values"][e, b].item() for e in range(ensemble))
        for b in range(batch)
    )
    assert loss.item() == pytest.approx(expected / batch, rel=1e-10, abs=1e-12)
    assert metrics["entropy"].item() == pytest.approx(-d["log_prob"].mean().item())


def test_sac_actor_loss_does_not_train_alpha():
    d = _transitions(1, 5)
    log_alpha = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    log_prob = d["log_prob"].clone().requires_grad_(True)
    loss, _ = C.sac_actor_loss(d["q_values"], log_prob, log_alpha.exp())
    grad_alpha, grad_log_prob = torch.autograd.grad(loss, (log_alpha, log_prob), allow_unused=True)
    assert grad_alpha is None
    torch.testing.assert_close(grad_log_prob, torch.full_like(log_prob, math.exp(0.1) / 5))


@given(seed=seeds, batch=batch_sizes, target_entropy=st.floats(-6.0, 6.0))
def test_temperature_gradient_raises_alpha_when_entropy_below_target(seed, batch, target_entropy):
    log_prob = torch.randn(batch, generator=_gen(seed), dtype=torch.float64)
    log_alpha = torch.tensor(-0.7, dtype=torch.float64, requires_grad=True)
    loss, metrics = C.sac_temperature_loss(log_alpha, log_prob, target_entropy)
    (grad,) = torch.autograd.grad(loss, (log_alpha,))
    entropy = -log_prob.mean().item()
    # d loss / d log_alpha = -(mean log_prob + target_entropy) = entropy - target_entropy.
    assert grad.item() == pytest.approx(entropy - target_entropy, rel=1e-10, abs=1e-12)
    assert loss.item() == pytest.approx(0.7 * (-entropy + target_entropy), rel=1e-10, abs=1e-12)
    assert metrics["alpha"].item() == pytest.approx(math.exp(-0.7))


def test_sac_target_entropy_is_minus_action_dim():
    assert C.sac_target_entropy(6) == -6.0
    with pytest.raises(ValueError, match="action_dim"):
        C.sac_target_entropy(0)


# ----------------------------------------------------------------------------------------------
# TD3 target policy smoothing and DDPG actor.


@given(
    seed=seeds,
    policy_noise=st.floats(0.0, 3.0),
    noise_clip=st.floats(0.0, 1.0),
    low=st.floats(-2.0, 0.0),
    width=st.floats(0.0, 3.0),
)
def test_td3_smoothing_noise_is_clipped_and_actions_stay_in_bounds(
    seed, policy_noise, noise_clip, low, width
):
    key = random.key(seed)
    noise = C.td3_smoothing_noise(key, (64, 3), policy_noise, noise_clip)
    assert noise.shape == (64, 3) and noise.dtype == torch.float32
    assert noise.abs().max().item() <= float(torch.tensor(noise_clip))  # the clip in float32
    next_action = 4.0 * torch.randn(64, 3, generator=_gen(seed))
    # Bounds rounded to float32 first, so the comparison is exact in the actions' dtype.
    low, high = float(torch.tensor(low)), float(torch.tensor(low + width))
    action = C.smoothed_target_action(next_action, noise, low, high)
    assert action.min().item() >= low and action.max().item() <= high
    inside = (next_action + noise >= low) & (next_action + noise <= high)
    torch.testing.assert_close(action[inside], (next_action + noise)[inside])


def test_td3_smoothing_noise_is_pure_and_key_dependent():
    a = C.td3_smoothing_noise(random.key(3), (128,), 0.2, 0.5)
    b = C.td3_smoothing_noise(random.key(3), (128,), 0.2, 0.5)
    c = C.td3_smoothing_noise(random.key(4), (128,), 0.2, 0.5)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)
    # Unclipped part is N(0, 0.2^2): with clip 0.5 (2.5 sigma) about 1.2% of samples are clipped.
    big = C.td3_smoothing_noise(random.key(5), (20000,), 0.2, 0.5)
    assert abs(big.std().item() - 0.2) < 0.01
    assert 0.005 < (big.abs() == 0.5).float().mean().item() < 0.025


def test_td3_target_uses_clipped_double_q():
    d = _transitions(2, 9)
    target = C.bellman_target(d["reward"], d["terminated"], d["next_q_values"].min(0).values, 0.99)
    # Planted bug: averaging the critics instead of the minimum gives a different (higher) target.
    wrong = C.bellman_target(d["reward"], d["terminated"], d["next_q_values"].mean(0), 0.99)
    assert (target <= wrong + 1e-12).all() and not torch.allclose(target, wrong)


def test_ddpg_actor_loss_is_negative_mean_q():
    q = torch.tensor([1.0, -2.0, 4.0])
    loss, metrics = C.td3_actor_loss(q)
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["q_actor_mean"].item() == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------
# Bad input.


def test_bad_inputs_raise_value_errors_naming_the_argument():
    d = _transitions(0, 4)
    with pytest.raises(ValueError, match="terminated"):
        C.bellman_target(d["reward"], d["terminated"].double(), d["reward"], 0.9)
    with pytest.raises(ValueError, match="next_value"):
        C.bellman_target(d["reward"], d["terminated"], d["reward"][:3], 0.9)
    with pytest.raises(ValueError, match="gamma"):
        C.bellman_target(d["reward"], d["terminated"], d["reward"], 1.5)
    with pytest.raises(ValueError, match="gamma"):
        C.bellman_target(d["reward"], d["terminated"], d["reward"], torch.ones(5))
    with pytest.raises(ValueError, match="q_values"):
        C.sac_critic_loss(d["q_values"][:, :3], d["reward"])
    with pytest.raises(ValueError, match="q_values"):
        C.sac_critic_loss(d["q_values"][0], d["reward"])
    with pytest.raises(ValueError, match="distance"):
        C.sac_critic_loss(d["q_values"], d["reward"], "mse")
    with pytest.raises(ValueError, match="alpha"):
        C.sac_actor_loss(d["q_values"], d["log_prob"], -0.1)
    with pytest.raises(ValueError, match="log_prob"):
        C.sac_actor_loss(d["q_values"], d["log_prob"].bool(), 0.1)
    with pytest.raises(ValueError, match="log_alpha"):
        C.sac_temperature_loss(torch.zeros(1), d["log_prob"], -1.0)
    with pytest.raises(ValueError, match="noise_clip"):
        C.td3_smoothing_noise(random.key(0), (3,), 0.2, -0.5)
    with pytest.raises(ValueError, match="noise"):
        C.smoothed_target_action(torch.zeros(4, 2), torch.zeros(4, 3), -1.0, 1.0)
    with pytest.raises(ValueError, match="action_low"):
        C.smoothed_target_action(torch.zeros(4, 2), torch.zeros(4, 2), 1.0, -1.0)


# ----------------------------------------------------------------------------------------------
# Discrete SAC.


def _discrete(seed: int, batch: int, ensemble: int, actions: int) -> dict:
    g = _gen(seed)
    return {
        "q_values": torch.randn(ensemble, batch, actions, generator=g, dtype=torch.float64),
        "logits": 3.0 * torch.randn(batch, actions, generator=g, dtype=torch.float64),
        "action": torch.randint(0, actions, (batch,), generator=g),
        "target": torch.randn(batch, generator=g, dtype=torch.float64),
    }


@given(
    seed=seeds, batch=batch_sizes, ensemble=ensemble_sizes, actions=st.integers(2, 6), alpha=st.floats(0, 2)
)
def test_discrete_sac_losses_match_reference(seed, batch, ensemble, actions, alpha):
    d = _discrete(seed, batch, ensemble, actions)
    value = C.discrete_soft_state_value(d["q_values"], d["logits"], alpha)
    actor, metrics = C.discrete_sac_actor_loss(d["q_values"], d["logits"], alpha)
    critic, _ = C.discrete_sac_critic_loss(d["q_values"], d["action"], d["target"])
    actor_ref = critic_ref = 0.0
    for b in range(batch):
        probs = torch.softmax(d["logits"][b], -1).tolist()
        min_q = [min(d["q_values"][e, b, a].item() for e in range(ensemble)) for a in range(actions)]
        v = sum(p * (q - alpha * math.log(p)) for p, q in zip(probs, min_q, strict=True))
        assert value[b].item() == pytest.approx(v, rel=1e-9, abs=1e-9)
        actor_ref += sum(p * (alpha * math.log(p) - q) for p, q in zip(probs, min_q, strict=True))
        assert metrics["log_prob"][b].item() == pytest.approx(sum(p * math.log(p) for p in probs), abs=1e-9)
        for e in range(ensemble):
            critic_ref += (d["q_values"][e, b, d["action"][b]].item() - d["target"][b].item()) ** 2
    assert actor.item() == pytest.approx(actor_ref / batch, rel=1e-9, abs=1e-9)
    assert critic.item() == pytest.approx(critic_ref / batch, rel=1e-9, abs=1e-9)


def test_discrete_sac_target_entropy():
    assert C.discrete_sac_target_entropy(4) == pytest.approx(0.98 * math.log(4))
    with pytest.raises(ValueError, match="num_actions"):
        C.discrete_sac_target_entropy(1)
    with pytest.raises(ValueError, match="action"):
        C.discrete_sac_critic_loss(torch.zeros(2, 3, 4), torch.zeros(3), torch.zeros(3))


# ----------------------------------------------------------------------------------------------
# REDQ and CrossQ.


@given(seed=seeds, num_critics=st.integers(1, 12), data=st.data())
def test_redq_subset_size_respected_and_distinct(seed, num_critics, data):
    subset_size = data.draw(st.integers(1, num_critics))
    subset = C.redq_subset(random.key(seed), num_critics, subset_size)
    assert subset.shape == (subset_size,) and subset.dtype == torch.int64
    assert len(set(subset.tolist())) == subset_size
    assert 0 <= subset.min().item() and subset.max().item() < num_critics


def test_redq_subset_is_uniform_over_critics():
    counts = torch.zeros(10)
    for i in range(400):
        counts[C.redq_subset(random.fold_in(random.key(0), i), 10, 2)] += 1
    # Each critic is picked with probability 2/10: 80 expected out of 400 draws (sd ~8).
    assert counts.sum().item() == 800 and counts.min().item() > 50 and counts.max().item() < 110


@given(seed=seeds, batch=batch_sizes, alpha=st.floats(0.0, 1.0))
def test_redq_target_is_min_over_the_subset_only(seed, batch, alpha):
    d = _transitions(seed, batch, ensemble=10)
    subset = C.redq_subset(random.key(seed), 10, 2)
    out = C.redq_target_value(d["next_q_values"], subset, d["next_log_prob"], alpha)
    for b in range(batch):
        min_q = min(d["next_q_values"][i, b].item() for i in subset.tolist())
        assert out[b].item() == pytest.approx(
            min_q - alpha * d["next_log_prob"][b].item(), rel=1e-12, abs=1e-12
        )
    with pytest.raises(ValueError, match="subset_size"):
        C.redq_subset(random.key(0), 10, 11)


def test_crossq_target_is_detached_soft_bellman_target():
    d = _transitions(4, 7)
    next_q = d["next_q_values"].clone().requires_grad_(True)
    target = C.crossq_target(d["reward"], d["terminated"], next_q, d["next_log_prob"], 0.99, 0.1)
    assert not target.requires_grad
    expected = C.bellman_target(
        d["reward"], d["terminated"], C.soft_state_value(d["next_q_values"], d["next_log_prob"], 0.1), 0.99
    )
    torch.testing.assert_close(target, expected, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# Parameter-level objectives on funrl.nets networks.

OBS_DIM, ACT_DIM, BATCH = 3, 2, 8


def _networks(seed: int = 0, num_critics: int = 2) -> dict:
    keys = random.split(random.key(seed), 4)
    actor = nets.GaussianActor(OBS_DIM, ACT_DIM, (16,), "relu", state_dependent_std=True)
    det_actor = nn.Sequential(nets.MLP(OBS_DIM, (16,), ACT_DIM, "relu", device="meta"), nn.Tanh())
    critic = nets.ContinuousQ(OBS_DIM, ACT_DIM, (16,))
    critic_params = nets.init_ensemble(critic, keys[1], num_critics)
    return {
        "actor": actor,
        "det_actor": det_actor,
        "critic": critic,
        "actor_params": nets.init(actor, keys[0]),
        "det_actor_params": nets.init(det_actor, keys[3]),
        "critic_params": critic_params,
        "target_critic_params": tree.map(lambda p: p + 0.01, critic_params),
    }


def _batch(seed: int, batch: int = BATCH) -> dict:
    g = _gen(seed)
    return {
        "obs": torch.randn(batch, OBS_DIM, generator=g),
        "action": torch.rand(batch, ACT_DIM, generator=g) * 2 - 1,
        "reward": torch.randn(batch, generator=g),
        "next_obs": torch.randn(batch, OBS_DIM, generator=g),
        "terminated": torch.rand(batch, generator=g) < 0.25,
    }


def _loop_q(critic, stacked, *inputs):
    return torch.stack([nets.apply(critic, p, *inputs) for p in tree.unstack(stacked)])


def test_ensemble_q_vmap_equals_loop_over_members():
    n = _networks(num_critics=5)
    b = _batch(0)
    torch.testing.assert_close(
        C.ensemble_q(n["critic"], n["critic_params"], b["obs"], b["action"]),
        _loop_q(n["critic"], n["critic_params"], b["obs"], b["action"]),
        rtol=1e-6,
        atol=1e-6,
    )


def test_sac_objectives_equal_their_tensor_level_composition():
    n, b, key = _networks(), _batch(1), random.key(7)
    dist = nets.distributions.tanh_normal
    loss, _ = C.sac_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key,
        actor=n["actor"], critic=n["critic"], gamma=0.99,
    )  # fmt: skip
    next_action, next_log_prob = dist.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    next_q = _loop_q(n["critic"], n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * (next_q.min(0).values - 0.2 * next_log_prob)
    q = _loop_q(n["critic"], n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)

    actor_loss, metrics = C.sac_actor_objective(
        n["actor_params"], n["critic_params"], 0.2, b, key, actor=n["actor"], critic=n["critic"]
    )
    action, log_prob = dist.sample_and_log_prob(key, *nets.apply(n["actor"], n["actor_params"], b["obs"]))
    q_pi = _loop_q(n["critic"], n["critic_params"], b["obs"], action)
    torch.testing.assert_close(actor_loss, (0.2 * log_prob - q_pi.min(0).values).mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["log_prob"], log_prob, rtol=1e-6, atol=1e-6)


def test_sac_objective_gradients_reach_only_the_trained_params():
    n, b, key = _networks(), _batch(2), random.key(3)
    kwargs = {"actor": n["actor"], "critic": n["critic"]}
    grads, (loss, _) = torch.func.grad_and_value(C.sac_critic_objective, has_aux=True)(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key, gamma=0.99, **kwargs
    )
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in tree.leaves(grads))
    assert tree.structure(grads) == tree.structure(n["critic_params"])
    # Actor loss through autograd: the critic params must not receive gradients.
    critic_params = tree.map(lambda p: p.clone().requires_grad_(True), n["critic_params"])
    actor_params = tree.map(lambda p: p.clone().requires_grad_(True), n["actor_params"])
    loss, _ = C.sac_actor_objective(actor_params, critic_params, 0.2, b, key, **kwargs)
    loss.backward()
    assert all(p.grad is None for p in tree.leaves(critic_params))
    assert all(torch.isfinite(p.grad).all() for p in tree.leaves(actor_params))


def test_td3_objectives_equal_their_tensor_level_composition():
    n, b, key = _networks(), _batch(3), random.key(11)
    actor, critic = n["det_actor"], n["critic"]
    loss, _ = C.td3_critic_objective(
        n["critic_params"], n["det_actor_params"], n["target_critic_params"], b, key,
        actor=actor, critic=critic, gamma=0.9, policy_noise=0.3, noise_clip=0.4,
        action_low=-0.8, action_high=0.8,
    )  # fmt: skip
    noise = (random.normal(key, (BATCH, ACT_DIM)) * 0.3).clamp(-0.4, 0.4)
    next_action = (nets.apply(actor, n["det_actor_params"], b["next_obs"]) + noise).clamp(-0.8, 0.8)
    next_q = _loop_q(critic, n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.9 * (~b["terminated"]).float() * next_q.min(0).values
    q = _loop_q(critic, n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)

    actor_loss, _ = C.td3_actor_objective(
        n["det_actor_params"], n["critic_params"], b, actor=actor, critic=critic
    )
    q1 = nets.apply(
        critic,
        tree.index(n["critic_params"], 0),
        b["obs"],
        nets.apply(actor, n["det_actor_params"], b["obs"]),
    )
    torch.testing.assert_close(actor_loss, -q1.mean(), rtol=1e-6, atol=1e-6)


def test_td3_delayed_actor_update_with_periodic_update():
    old, new = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    policy_delay = 2
    applied = [
        tree.tree_equal(periodic_update(old, new, torch.tensor(step), policy_delay), new) for step in range(6)
    ]
    assert applied == [True, False, True, False, True, False]


def test_ddpg_objectives_with_a_single_critic():
    n, b = _networks(), _batch(4)
    actor, critic = n["det_actor"], n["critic"]
    critic_params = tree.index(n["critic_params"], 0)
    target_params = tree.index(n["target_critic_params"], 1)
    loss, _ = C.ddpg_critic_objective(
        critic_params, n["det_actor_params"], target_params, b, actor=actor, critic=critic, gamma=0.95
    )
    next_q = nets.apply(
        critic, target_params, b["next_obs"], nets.apply(actor, n["det_actor_params"], b["next_obs"])
    )
    target = b["reward"] + 0.95 * (~b["terminated"]).float() * next_q
    q = nets.apply(critic, critic_params, b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).mean(), rtol=1e-5, atol=1e-6)
    actor_loss, _ = C.ddpg_actor_objective(
        n["det_actor_params"], critic_params, b, actor=actor, critic=critic
    )
    q_mu = nets.apply(critic, critic_params, b["obs"], nets.apply(actor, n["det_actor_params"], b["obs"]))
    torch.testing.assert_close(actor_loss, -q_mu.mean())


def test_redq_objective_uses_the_drawn_subset_of_target_critics():
    n, b, key = _networks(num_critics=6), _batch(5), random.key(2)
    loss, metrics = C.redq_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], 0.1, b, key,
        actor=n["actor"], critic=n["critic"], gamma=0.99, subset_size=3,
    )  # fmt: skip
    subset_key, action_key = random.split(key)
    subset = C.redq_subset(subset_key, 6, 3)
    torch.testing.assert_close(metrics["subset"], subset)
    next_action, next_log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        action_key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    all_next_q = _loop_q(n["critic"], n["target_critic_params"], b["next_obs"], next_action)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * C.redq_target_value(
        all_next_q, subset, next_log_prob, 0.1
    )
    q = _loop_q(n["critic"], n["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-5)
    actor_loss, _ = C.redq_actor_objective(
        n["actor_params"], n["critic_params"], 0.1, b, key, actor=n["actor"], critic=n["critic"]
    )
    action, log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["obs"])
    )
    q_pi = _loop_q(n["critic"], n["critic_params"], b["obs"], action)
    torch.testing.assert_close(actor_loss, (0.1 * log_prob - q_pi.mean(0)).mean(), rtol=1e-5, atol=1e-6)


def test_discrete_sac_objectives_on_networks():
    keys = random.split(random.key(0), 2)
    actor = nets.MLP(OBS_DIM, (16,), 4, "relu")
    critic = nets.MLP(OBS_DIM, (16,), 4, "relu")
    actor_params, critic_params = nets.init(actor, keys[0]), nets.init_ensemble(critic, keys[1], 2)
    b = _batch(6)
    b["action"] = torch.randint(0, 4, (BATCH,), generator=_gen(0))
    loss, _ = C.discrete_sac_critic_objective(
        critic_params, actor_params, critic_params, 0.3, b, actor=actor, critic=critic, gamma=0.9
    )
    next_v = C.discrete_soft_state_value(
        _loop_q(critic, critic_params, b["next_obs"]), nets.apply(actor, actor_params, b["next_obs"]), 0.3
    )
    target = b["reward"] + 0.9 * (~b["terminated"]).float() * next_v
    q = (
        _loop_q(critic, critic_params, b["obs"])
        .gather(-1, b["action"].expand(2, BATCH).unsqueeze(-1))
        .squeeze(-1)
    )
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)
    actor_loss, metrics = C.discrete_sac_actor_objective(
        actor_params, critic_params, 0.3, b, actor=actor, critic=critic
    )
    assert torch.isfinite(actor_loss) and metrics["log_prob"].shape == (BATCH,)


def test_objectives_reject_incomplete_batches():
    n, b = _networks(), _batch(0)
    del b["terminated"]
    with pytest.raises(ValueError, match="batch"):
        C.sac_critic_objective(
            n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, random.key(0),
            actor=n["actor"], critic=n["critic"], gamma=0.99,
        )  # fmt: skip


class _BatchNormQ(nn.Module):
    """A small CrossQ-style critic: batch norm on the input and the hidden layer."""

    def __init__(self):
        super().__init__()
        with torch.device("meta"):
            self.net = nn.Sequential(
                nn.BatchNorm1d(OBS_DIM + ACT_DIM, momentum=0.01),
                nn.Linear(OBS_DIM + ACT_DIM, 16),
                nn.BatchNorm1d(16, momentum=0.01),
                nn.ReLU(),
                nn.Linear(16, 1),
            )

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1)).squeeze(-1)


def test_crossq_objectives_joint_batch_norm_forward_and_pure_buffers():
    n, b, key = _networks(), _batch(7), random.key(5)
    critic, critic_eval = _BatchNormQ(), _BatchNormQ().eval()
    params = nets.init_ensemble(critic, random.key(1), 2)
    buffers = tree.stack([nets.init_buffers(critic)] * 2)
    buffers_before = tree.map(torch.clone, buffers)
    loss, metrics = C.crossq_critic_objective(
        params, buffers, n["actor_params"], 0.2, b, key, actor=n["actor"], critic=critic, gamma=0.99
    )
    assert tree.tree_equal(buffers, buffers_before)  # inputs untouched
    # Reference: per-member functional_call on the joint batch, buffers updated on copies.
    next_action, next_log_prob = nets.distributions.tanh_normal.sample_and_log_prob(
        key, *nets.apply(n["actor"], n["actor_params"], b["next_obs"])
    )
    joint_obs, joint_action = torch.cat([b["obs"], b["next_obs"]]), torch.cat([b["action"], next_action])
    q_members, new_buffers = [], []
    for p, buf in zip(tree.unstack(params), tree.unstack(buffers), strict=True):
        buf = tree.map(torch.clone, buf)
        q_members.append(nets.apply(critic, {**p, **buf}, joint_obs, joint_action))
        new_buffers.append(buf)
    q, next_q = torch.stack(q_members).split(BATCH, dim=1)
    target = b["reward"] + 0.99 * (~b["terminated"]).float() * (next_q.min(0).values - 0.2 * next_log_prob)
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-5)
    assert tree.tree_allclose(metrics["critic_buffers"], tree.stack(new_buffers), rtol=1e-6, atol=1e-7)
    assert not tree.tree_allclose(metrics["critic_buffers"], buffers)  # statistics moved
    actor_loss, _ = C.crossq_actor_objective(
        n["actor_params"],
        params,
        metrics["critic_buffers"],
        0.2,
        b,
        key,
        actor=n["actor"],
        critic=critic_eval,
    )
    assert torch.isfinite(actor_loss)
    with pytest.raises(ValueError, match="critic.*training mode"):
        C.crossq_critic_objective(
            params, buffers, n["actor_params"], 0.2, b, key, actor=n["actor"], critic=critic_eval, gamma=0.99
        )
    with pytest.raises(ValueError, match="critic.*eval mode"):
        C.crossq_actor_objective(
            n["actor_params"], params, buffers, 0.2, b, key, actor=n["actor"], critic=critic
        )


def _sac_sgd_step(actor_params, critic_params, target_critic_params, log_alpha, batch, key, actor, critic):
    """One full SAC update with plain SGD (critic, actor, temperature, polyak): a pure function."""
    critic_key, actor_key = random.split(key)
    alpha = log_alpha.exp()
    critic_grads, (critic_loss, _) = torch.func.grad_and_value(C.sac_critic_objective, has_aux=True)(
        critic_params, actor_params, target_critic_params, alpha, batch, critic_key,
        actor=actor, critic=critic, gamma=0.99,
    )  # fmt: skip
    critic_params = tree.map(lambda p, g: p - 1e-2 * g, critic_params, critic_grads)
    actor_grads, (actor_loss, metrics) = torch.func.grad_and_value(C.sac_actor_objective, has_aux=True)(
        actor_params, critic_params, alpha, batch, actor_key, actor=actor, critic=critic
    )
    actor_params = tree.map(lambda p, g: p - 1e-2 * g, actor_params, actor_grads)
    alpha_grad, (alpha_loss, _) = torch.func.grad_and_value(C.sac_temperature_loss, has_aux=True)(
        log_alpha, metrics["log_prob"], -float(ACT_DIM)
    )
    log_alpha = log_alpha - 1e-2 * alpha_grad
    target_critic_params = polyak(target_critic_params, critic_params, 0.005)
    losses = torch.stack([critic_loss, actor_loss, alpha_loss])
    return actor_params, critic_params, target_critic_params, log_alpha, losses


@pytest.mark.slow
def test_sac_update_compiled_equals_eager():
    n, b = _networks(), _batch(8)
    args = (
        n["actor_params"],
        n["critic_params"],
        n["target_critic_params"],
        torch.tensor(0.0),
        b,
        random.key(9),
    )
    eager = _sac_sgd_step(*args, n["actor"], n["critic"])
    compiled = torch.compile(_sac_sgd_step, fullgraph=True)(*args, n["actor"], n["critic"])
    assert tree.tree_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    # Purity: the same inputs give the same outputs, and the step did change the params.
    assert tree.tree_allclose(_sac_sgd_step(*args, n["actor"], n["critic"]), eager, rtol=0, atol=0)
    assert not tree.tree_allclose(eager[1], n["critic_params"])


def test_sac_objective_is_pure_and_vmap_over_keys_equals_loop():
    n, b = _networks(), _batch(9)
    keys = random.split(random.key(12), 3)

    def critic_loss(key):
        return C.sac_critic_objective(
            n["critic_params"], n["actor_params"], n["target_critic_params"], 0.2, b, key,
            actor=n["actor"], critic=n["critic"], gamma=0.99,
        )[0]  # fmt: skip

    batched = torch.func.vmap(critic_loss)(keys)
    looped = torch.stack([critic_loss(k) for k in keys])
    torch.testing.assert_close(batched, looped, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(critic_loss(keys[0]), looped[0], rtol=0, atol=0)  # same key, same loss
    assert len(set(looped.tolist())) == 3  # the key drives the next-action sample
