"""Offline losses (BC, CQL, IQL, TD3+BC): references written from the papers, invariants, bad input."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl import nets, random, tree
from funrl.losses import offline as O
from funrl.testing import assert_vmap_equals_loop

seeds = st.integers(0, 2**16)
OBS_DIM, ACT_DIM, BATCH = 3, 2, 6


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _cql_inputs(seed: int, ensemble: int = 2, batch: int = 4, samples: int = 3) -> dict:
    g = _gen(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    return {
        "q_data": r(ensemble, batch),
        "q_random": r(ensemble, batch, samples),
        "q_policy": r(ensemble, batch, samples),
        "log_prob_policy": r(batch, samples),
        "q_next_policy": r(ensemble, batch, samples),
        "log_prob_next_policy": r(batch, samples),
    }


@given(seed=seeds, ensemble=st.integers(1, 3), samples=st.integers(1, 5), temperature=st.floats(0.1, 5.0))
def test_cql_regularizer_matches_per_state_logsumexp_reference(seed, ensemble, samples, temperature):
    d = _cql_inputs(seed, ensemble, 4, samples)
    loss, metrics = O.cql_regularizer(**d, action_dim=ACT_DIM, temperature=temperature)
    total = 0.0
    for e in range(ensemble):
        for b in range(4):
            terms = [d["q_random"][e, b, n].item() - ACT_DIM * math.log(0.5) for n in range(samples)]
            terms += [
                d["q_next_policy"][e, b, n].item() - d["log_prob_next_policy"][b, n].item()
                for n in range(samples)
            ]
            terms += [
                d["q_policy"][e, b, n].item() - d["log_prob_policy"][b, n].item() for n in range(samples)
            ]
            m = max(terms)
            lse = m / temperature + math.log(sum(math.exp((t - m) / temperature) for t in terms))
            total += temperature * lse - d["q_data"][e, b].item()
    assert loss.item() == pytest.approx(total / 4, rel=1e-9, abs=1e-9)
    assert metrics["cql_gap"].shape == (ensemble,)


def test_cql_regularizer_gradient_pushes_data_q_up_and_proposal_q_down():
    d = {k: v.clone().requires_grad_(k.startswith("q_")) for k, v in _cql_inputs(0).items()}
    loss, _ = O.cql_regularizer(**d, action_dim=ACT_DIM)
    grads = torch.autograd.grad(loss, (d["q_data"], d["q_random"], d["q_policy"]))
    assert (grads[0] < 0).all() and (grads[1] > 0).all() and (grads[2] > 0).all()
    # d loss / d q_data = -1 / B for every critic and state.
    torch.testing.assert_close(grads[0], torch.full_like(grads[0], -1.0 / 4))


@given(seed=seeds, gap=st.floats(-2.0, 2.0))
def test_cql_lagrange_loss_raises_alpha_prime_when_gap_exceeds_threshold(seed, gap):
    cql_gap = torch.randn(2, generator=_gen(seed), dtype=torch.float64)
    log_alpha_prime = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    loss, _ = O.cql_lagrange_loss(log_alpha_prime, cql_gap, gap)
    (grad,) = torch.autograd.grad(loss, (log_alpha_prime,))
    expected = -math.exp(0.3) * (cql_gap.mean().item() - gap)
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert grad.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)  # d/dlog of alpha*c is alpha*c


@given(seed=seeds, actions=st.integers(2, 6))
def test_discrete_cql_regularizer_reference_and_zero_floor(seed, actions):
    g = _gen(seed)
    q = torch.randn(5, actions, generator=g, dtype=torch.float64)
    a = torch.randint(0, actions, (5,), generator=g)
    loss, _ = O.discrete_cql_regularizer(q, a)
    expected = (
        sum(math.log(sum(math.exp(x) for x in q[b].tolist())) - q[b, a[b]].item() for b in range(5)) / 5
    )
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    # logsumexp >= max >= Q(s, a): the penalty is positive, and near zero when a dominates.
    dominant = torch.zeros(5, actions, dtype=torch.float64)
    dominant[torch.arange(5), a] = 50.0
    assert 0.0 <= O.discrete_cql_regularizer(dominant, a)[0].item() < 1e-20


@given(seed=seeds, expectile=st.floats(0.0, 0.99))
def test_expectile_loss_reference_and_symmetry_at_one_half(seed, expectile):
    diff = torch.randn(32, generator=_gen(seed), dtype=torch.float64)
    out = O.expectile_loss(diff, expectile)
    for u, v in zip(diff.tolist(), out.tolist(), strict=True):
        assert v == pytest.approx(abs(expectile - (1.0 if u < 0 else 0.0)) * u * u, rel=1e-12, abs=1e-15)
    torch.testing.assert_close(O.expectile_loss(diff, 0.5), 0.5 * diff.square())


@given(seed=seeds)
def test_iql_value_loss_is_minimised_at_the_expectile(seed):
    # For a constant V against samples of min Q, the minimiser of the expectile loss is the tau-expectile:
    # a larger tau gives a larger optimal V (Kostrikov et al. 2022, Lemma 1); tau = 0.5 gives the mean.
    q = torch.randn(2, 400, generator=_gen(seed), dtype=torch.float64)
    grid = torch.linspace(-2.0, 2.0, 801, dtype=torch.float64)
    optima = []
    for tau in (0.1, 0.5, 0.9):
        losses = torch.func.vmap(lambda v, tau=tau: O.iql_value_loss(q, v.expand(400), tau)[0])(grid)
        optima.append(grid[losses.argmin()].item())
    assert optima[0] < optima[1] < optima[2]
    assert optima[1] == pytest.approx(q.min(0).values.mean().item(), abs=5e-3)


@given(seed=seeds, temperature=st.floats(0.0, 10.0))
def test_iql_actor_loss_reference_with_clipped_weights(seed, temperature):
    g = _gen(seed)
    log_prob = torch.randn(8, generator=g, dtype=torch.float64)
    q = 3.0 * torch.randn(2, 8, generator=g, dtype=torch.float64)
    v = torch.randn(8, generator=g, dtype=torch.float64)
    loss, _ = O.iql_actor_loss(log_prob, q, v, temperature, max_weight=100.0)
    expected = -sum(
        min(math.exp(temperature * (min(q[0, b].item(), q[1, b].item()) - v[b].item())), 100.0)
        * log_prob[b].item()
        for b in range(8)
    )
    assert loss.item() == pytest.approx(expected / 8, rel=1e-9, abs=1e-12)


def test_iql_critic_loss_zero_when_q_equals_target():
    reward, next_v = torch.randn(5), torch.randn(5)
    terminated = torch.tensor([True, False, False, True, False])
    target = reward + 0.9 * (~terminated).float() * next_v
    loss, _ = O.iql_critic_loss(target.expand(2, 5), reward, terminated, next_v, 0.9)
    assert loss.item() == 0.0


@given(seed=seeds, alpha=st.floats(0.1, 5.0))
def test_td3_bc_actor_loss_reference(seed, alpha):
    g = _gen(seed)
    q = torch.randn(7, generator=g, dtype=torch.float64)
    pred, act = (
        torch.randn(7, ACT_DIM, generator=g, dtype=torch.float64),
        torch.randn(7, ACT_DIM, generator=g, dtype=torch.float64),
    )
    loss, metrics = O.td3_bc_actor_loss(q, pred, act, alpha)
    lmbda = alpha / (sum(abs(x) for x in q.tolist()) / 7)
    mse = sum((p - a) ** 2 for p, a in zip(pred.flatten().tolist(), act.flatten().tolist(), strict=True)) / (
        7 * ACT_DIM
    )
    assert loss.item() == pytest.approx(-lmbda * q.mean().item() + mse, rel=1e-9, abs=1e-12)
    assert metrics["lambda"].item() == pytest.approx(lmbda)


@given(seed=seeds, batch=st.integers(2, 12))
def test_offline_losses_batch_order_invariant_and_finite_gradients(seed, batch):
    g = _gen(seed)
    log_prob = torch.randn(batch, generator=g, dtype=torch.float64, requires_grad=True)
    q = torch.randn(2, batch, generator=g, dtype=torch.float64)
    v = torch.randn(batch, generator=g, dtype=torch.float64, requires_grad=True)
    perm = torch.randperm(batch, generator=g)
    for fn in (
        lambda lp, qq, vv: O.iql_actor_loss(lp, qq, vv, 3.0)[0],
        lambda lp, qq, vv: O.iql_value_loss(qq, vv, 0.7)[0],
        lambda lp, qq, vv: O.bc_log_likelihood_loss(lp)[0],
    ):
        full = fn(log_prob, q, v)
        torch.testing.assert_close(full, fn(log_prob[perm], q[:, perm], v[perm]), rtol=1e-12, atol=1e-12)
        grads = torch.autograd.grad(full, (log_prob, v), allow_unused=True)
        assert all(gr is None or torch.isfinite(gr).all() for gr in grads)


def test_vmap_over_seeds_equals_loop_for_cql_regularizer():
    inputs = [_cql_inputs(s) for s in range(3)]
    stacked = {k: torch.stack([d[k] for d in inputs]) for k in inputs[0]}
    assert_vmap_equals_loop(
        lambda d: O.cql_regularizer(**d, action_dim=ACT_DIM), 0, stacked, rtol=0, atol=1e-14
    )


# ----------------------------------------------------------------------------------------------
# Parameter-level objectives.


def _setup(seed: int = 0) -> dict:
    keys = random.split(random.key(seed), 5)
    actor = nets.GaussianActor(OBS_DIM, ACT_DIM, (16,), "relu", state_dependent_std=True)
    det_actor = torch.nn.Sequential(nets.MLP(OBS_DIM, (16,), ACT_DIM, "relu"), torch.nn.Tanh())
    critic = nets.ContinuousQ(OBS_DIM, ACT_DIM, (16,))
    value_net = nets.MLP(OBS_DIM, (16,), 1, "relu")
    g = _gen(seed)
    batch = {
        "obs": torch.randn(BATCH, OBS_DIM, generator=g),
        "action": torch.rand(BATCH, ACT_DIM, generator=g) * 1.8 - 0.9,
        "reward": torch.randn(BATCH, generator=g),
        "next_obs": torch.randn(BATCH, OBS_DIM, generator=g),
        "terminated": torch.rand(BATCH, generator=g) < 0.3,
    }
    critic_params = nets.init_ensemble(critic, keys[1], 2)
    return {
        "modules": {"actor": actor, "det_actor": det_actor, "critic": critic, "value_net": value_net},
        "actor_params": nets.init(actor, keys[0]),
        "det_actor_params": nets.init(det_actor, keys[2]),
        "critic_params": critic_params,
        "target_critic_params": tree.map(lambda p: p * 0.9, critic_params),
        "value_params": nets.init(value_net, keys[3]),
        "batch": batch,
    }


def _loop_q(critic, stacked, *inputs):
    return torch.stack([nets.apply(critic, p, *inputs) for p in tree.unstack(stacked)])


def test_cql_critic_objective_composes_regression_and_penalty():
    s = _setup()
    m, b, key = s["modules"], s["batch"], random.key(4)
    loss, metrics = O.cql_critic_objective(
        s["critic_params"], s["actor_params"], s["target_critic_params"], 0.2, b, key,
        actor=m["actor"], critic=m["critic"], gamma=0.99, cql_weight=5.0, num_samples=4,
    )  # fmt: skip
    backup_key, random_key, policy_key, next_policy_key = random.split(key, 4)
    dist = nets.distributions.tanh_normal
    next_a, _ = dist.sample_and_log_prob(
        backup_key, *nets.apply(m["actor"], s["actor_params"], b["next_obs"])
    )
    target = (
        b["reward"]
        + 0.99
        * (~b["terminated"]).float()
        * _loop_q(m["critic"], s["target_critic_params"], b["next_obs"], next_a).min(0).values
    )
    q_data = _loop_q(m["critic"], s["critic_params"], b["obs"], b["action"])
    regression = ((q_data - target) ** 2).sum(0).mean()
    obs_rep = b["obs"].repeat_interleave(4, 0)
    rand_a = random.uniform(random_key, (BATCH * 4, ACT_DIM), torch.float32, -1.0, 1.0)
    pol_a, pol_lp = dist.sample_and_log_prob(policy_key, *nets.apply(m["actor"], s["actor_params"], obs_rep))
    nxt_a, nxt_lp = dist.sample_and_log_prob(
        next_policy_key, *nets.apply(m["actor"], s["actor_params"], b["next_obs"].repeat_interleave(4, 0))
    )
    q_of = lambda a: _loop_q(m["critic"], s["critic_params"], obs_rep, a).reshape(2, BATCH, 4)  # noqa: E731
    penalty, _ = O.cql_regularizer(
        q_data,
        q_of(rand_a),
        q_of(pol_a),
        pol_lp.reshape(BATCH, 4),
        q_of(nxt_a),
        nxt_lp.reshape(BATCH, 4),
        ACT_DIM,
    )
    torch.testing.assert_close(metrics["critic_loss"], regression.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(metrics["cql_penalty"], penalty.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, regression + 5.0 * penalty, rtol=1e-5, atol=1e-5)
    grads, _ = torch.func.grad_and_value(O.cql_critic_objective, has_aux=True)(
        s["critic_params"], s["actor_params"], s["target_critic_params"], 0.2, b, key,
        actor=m["actor"], critic=m["critic"], gamma=0.99,
    )  # fmt: skip
    assert all(torch.isfinite(g_).all() for g_ in tree.leaves(grads))


def test_iql_objectives_on_networks():
    s = _setup(1)
    m, b = s["modules"], s["batch"]
    v = nets.apply(m["value_net"], s["value_params"], b["obs"]).squeeze(-1)
    q_target = _loop_q(m["critic"], s["target_critic_params"], b["obs"], b["action"])
    loss, _ = O.iql_value_objective(
        s["value_params"],
        s["target_critic_params"],
        b,
        value_net=m["value_net"],
        critic=m["critic"],
        expectile=0.8,
    )
    torch.testing.assert_close(loss, O.expectile_loss(q_target.min(0).values - v, 0.8).mean())
    loss, _ = O.iql_critic_objective(
        s["critic_params"], s["value_params"], b, value_net=m["value_net"], critic=m["critic"], gamma=0.9
    )
    next_v = nets.apply(m["value_net"], s["value_params"], b["next_obs"]).squeeze(-1)
    target = b["reward"] + 0.9 * (~b["terminated"]).float() * next_v
    q = _loop_q(m["critic"], s["critic_params"], b["obs"], b["action"])
    torch.testing.assert_close(loss, ((q - target) ** 2).sum(0).mean(), rtol=1e-5, atol=1e-6)
    loss, _ = O.iql_actor_objective(
        s["actor_params"], s["value_params"], s["target_critic_params"], b,
        actor=m["actor"], value_net=m["value_net"], critic=m["critic"], temperature=2.0,
    )  # fmt: skip
    log_prob = nets.distributions.tanh_normal.log_prob(
        *nets.apply(m["actor"], s["actor_params"], b["obs"]), b["action"]
    )
    weight = torch.exp(2.0 * (q_target.min(0).values - v)).clamp(max=100.0)
    torch.testing.assert_close(loss, -(weight * log_prob).mean(), rtol=1e-5, atol=1e-6)


def test_td3_bc_and_bc_objectives_on_networks():
    s = _setup(2)
    m, b = s["modules"], s["batch"]
    loss, _ = O.td3_bc_actor_objective(
        s["det_actor_params"], s["critic_params"], b, actor=m["det_actor"], critic=m["critic"]
    )
    pred = nets.apply(m["det_actor"], s["det_actor_params"], b["obs"])
    q1 = nets.apply(m["critic"], tree.index(s["critic_params"], 0), b["obs"], pred)
    torch.testing.assert_close(loss, -2.5 / q1.abs().mean() * q1.mean() + ((pred - b["action"]) ** 2).mean())
    loss, _ = O.bc_objective(s["det_actor_params"], b, actor=m["det_actor"], deterministic=True)
    torch.testing.assert_close(loss, ((pred - b["action"]) ** 2).mean())
    loss, _ = O.bc_objective(s["actor_params"], b, actor=m["actor"], deterministic=False)
    loc, scale = nets.apply(m["actor"], s["actor_params"], b["obs"])
    torch.testing.assert_close(loss, -nets.distributions.tanh_normal.log_prob(loc, scale, b["action"]).mean())


def test_offline_bad_inputs_raise_value_errors_naming_the_argument():
    d = _cql_inputs(0)
    with pytest.raises(ValueError, match="q_random"):
        O.cql_regularizer(**{**d, "q_random": d["q_random"][:, :2]}, action_dim=ACT_DIM)
    with pytest.raises(ValueError, match="log_prob_policy"):
        O.cql_regularizer(**{**d, "log_prob_policy": d["log_prob_policy"][:, :1]}, action_dim=ACT_DIM)
    with pytest.raises(ValueError, match="temperature"):
        O.cql_regularizer(**d, action_dim=ACT_DIM, temperature=0.0)
    with pytest.raises(ValueError, match="expectile"):
        O.expectile_loss(torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="value"):
        O.iql_actor_loss(torch.zeros(3), torch.zeros(2, 3), torch.zeros(4))
    with pytest.raises(ValueError, match="action"):
        O.discrete_cql_regularizer(torch.zeros(3, 4), torch.zeros(3))
    with pytest.raises(ValueError, match="predicted_action"):
        O.bc_mse_loss(torch.zeros(3, 1), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="alpha"):
        O.td3_bc_actor_loss(torch.zeros(3), torch.zeros(3, 2), torch.zeros(3, 2), alpha=-1.0)
