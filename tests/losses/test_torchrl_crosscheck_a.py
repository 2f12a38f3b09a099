"""Cross-checks of funrl's value estimators, PPO and DQN losses against TorchRL 0.14.

TorchRL is the peer: same inputs, same parameters, loss values within 1e-5 relative. Where
TorchRL's definition differs on purpose, the difference itself is tested:

* value loss: TorchRL's ``loss_critic_type="l2"`` is ``(V - G)^2``; funrl's is ``0.5 (V - G)^2``
  (CleanRL/rlax), so TorchRL's ``critic_coeff=c`` equals funrl's ``vf_coef=2c``;
* approx-KL metric: TorchRL logs ``mean(log π_old - log π)`` ("k1"); funrl logs
  ``mean((r - 1) - log r)`` ("k3", never negative);
* V-trace: TorchRL has no λ and clips the policy-gradient ratio with ρ̄, i.e. funrl's
  ``lmbda=1, clip_pg_rho_threshold=clip_rho_threshold``;
* DQN priorities: TorchRL writes ``(y - Q)^2`` per sample; funrl's metric is ``mean |y - Q|``;
* TorchRL's functionals are batch-major with time at ``dim=-2``; funrl is time-major.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor, QValueActor, ValueOperator
from torchrl.objectives import ClipPPOLoss, DQNLoss
from torchrl.objectives.value import functional as trl

from funrl.losses import (
    double_q_learning_target,
    dqn_loss,
    gae,
    lambda_returns,
    ppo_clip_loss,
    ppo_loss,
    ppo_value_loss,
    q_learning_target,
    vtrace,
)

# TorchRL reminds that target networks need an updater; these tests set target weights by hand.
pytestmark = pytest.mark.filterwarnings("ignore:No target network updater:UserWarning")

RTOL = 1e-5
DTYPE = torch.float64


def close(actual, expected):
    """Within 1e-5 relative, elementwise, or relative to the tensor's scale for near-zero entries.

    (TorchRL's vectorised estimators compute their discount filters in float32, so entries that
    nearly cancel carry ~1e-7 absolute error even for float64 inputs.)
    """
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=RTOL * max(scale, 1e-3))


def to_torchrl(x: torch.Tensor) -> torch.Tensor:
    """funrl ``[T, N]`` -> TorchRL ``[N, T, 1]`` (time at dim -2)."""
    return x.transpose(0, 1).unsqueeze(-1)


def from_torchrl(x: torch.Tensor) -> torch.Tensor:
    return x.squeeze(-1).transpose(0, 1)


def rollout(seed: int, length: int, envs: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    shape = (length, envs)
    terminated = torch.rand(shape, generator=g) < 0.08
    truncated = (torch.rand(shape, generator=g) < 0.08) & ~terminated
    return {
        "rewards": torch.randn(shape, generator=g, dtype=DTYPE),
        "values": torch.randn(shape, generator=g, dtype=DTYPE),
        "next_values": torch.randn(shape, generator=g, dtype=DTYPE),
        "terminated": terminated,
        "truncated": truncated,
        "log_rhos": 0.7 * torch.randn(shape, generator=g, dtype=DTYPE),
    }


def _variants(loop, vectorised, gamma, lmbda):
    """TorchRL's loop and vectorised estimators; the vectorised ones raise IndexError at γλ = 0."""
    return (loop, vectorised) if gamma * lmbda > 0 else (loop,)


rollouts = st.tuples(st.integers(0, 2**16), st.integers(1, 40), st.integers(1, 5))
rates = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])


# ------------------------------------------------------------------------------------------
# Value estimators vs torchrl.objectives.value.functional
# ------------------------------------------------------------------------------------------


@settings(max_examples=20)
@given(rollouts, rates, rates)
def test_gae_matches_torchrl_generalized_advantage_estimate(batch, gamma, lmbda):
    d = rollout(*batch)
    adv, ret = gae(d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda)
    done = d["terminated"] | d["truncated"]
    args = [to_torchrl(d[k]) for k in ("values", "next_values", "rewards")]
    flags = {"done": to_torchrl(done), "terminated": to_torchrl(d["terminated"])}
    for estimator in _variants(
        trl.generalized_advantage_estimate, trl.vec_generalized_advantage_estimate, gamma, lmbda
    ):
        ref_adv, ref_ret = estimator(gamma, lmbda, *args, **flags)
        close(adv, from_torchrl(ref_adv))
        close(ret, from_torchrl(ref_ret))


@settings(max_examples=20)
@given(rollouts, rates, rates)
def test_lambda_returns_match_torchrl_td_lambda_return_estimate(batch, gamma, lmbda):
    d = rollout(*batch)
    ret = lambda_returns(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda)
    done = d["terminated"] | d["truncated"]
    args = [to_torchrl(d["next_values"]), to_torchrl(d["rewards"])]
    flags = {"done": to_torchrl(done), "terminated": to_torchrl(d["terminated"])}
    for estimator in _variants(
        trl.td_lambda_return_estimate, trl.vec_td_lambda_return_estimate, gamma, lmbda
    ):
        close(ret, from_torchrl(estimator(gamma, lmbda, *args, **flags)))


@settings(max_examples=20)
@given(rollouts, rates, st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.5, 1.0, 3.0]))
def test_vtrace_matches_torchrl_vtrace_advantage_estimate(batch, gamma, rho_bar, c_bar):
    d = rollout(*batch)
    vs, pg = vtrace(
        d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], d["log_rhos"], gamma,
        lmbda=1.0, clip_rho_threshold=rho_bar, clip_c_threshold=c_bar, clip_pg_rho_threshold=rho_bar,
    )  # fmt: skip
    log_mu = torch.zeros_like(d["log_rhos"])
    ref_adv, ref_vs = trl.vtrace_advantage_estimate(
        gamma,
        to_torchrl(d["log_rhos"]),
        to_torchrl(log_mu),
        to_torchrl(d["values"]),
        to_torchrl(d["next_values"]),
        to_torchrl(d["rewards"]),
        done=to_torchrl(d["terminated"] | d["truncated"]),
        terminated=to_torchrl(d["terminated"]),
        rho_thresh=rho_bar,
        c_thresh=c_bar,
    )
    close(vs, from_torchrl(ref_vs))
    close(pg, from_torchrl(ref_adv))


def test_vtrace_lambda_is_funrl_only_and_reduces_to_torchrl_at_one():
    # Documented difference: TorchRL's V-trace has no λ; at λ < 1 funrl's targets differ.
    d = rollout(1, 30, 3)
    args = (d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], d["log_rhos"], 0.99)
    ref_adv, ref_vs = trl.vtrace_advantage_estimate(
        0.99, to_torchrl(d["log_rhos"]), to_torchrl(torch.zeros_like(d["log_rhos"])),
        to_torchrl(d["values"]), to_torchrl(d["next_values"]), to_torchrl(d["rewards"]),
        done=to_torchrl(d["terminated"] | d["truncated"]), terminated=to_torchrl(d["terminated"]),
    )  # fmt: skip
    close(vtrace(*args, lmbda=1.0)[0], from_torchrl(ref_vs))
    assert not torch.allclose(vtrace(*args, lmbda=0.5)[0], from_torchrl(ref_vs))


# ------------------------------------------------------------------------------------------
# PPO vs ClipPPOLoss
# ------------------------------------------------------------------------------------------


def ppo_setup(seed: int, batch: int, obs_dim: int = 4, actions: int = 3):
    torch.manual_seed(seed)  # TorchRL modules initialise from the global generator
    actor_net = nn.Linear(obs_dim, actions)
    critic_net = nn.Linear(obs_dim, 1)
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(critic_net, in_keys=["observation"])
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(batch, obs_dim, generator=g)
    action = torch.randint(0, actions, (batch,), generator=g)
    with torch.no_grad():
        dist = torch.distributions.Categorical(logits=actor_net(obs))
        # A behaviour policy a little away from the current one, so that some ratios clip.
        old_log_prob = dist.log_prob(action) + 0.3 * torch.randn(batch, generator=g)
    data = {
        "obs": obs,
        "action": action,
        "old_log_prob": old_log_prob,
        "advantages": torch.randn(batch, generator=g),
        "returns": torch.randn(batch, generator=g),
        "old_values": critic_net(obs).squeeze(-1).detach() + 0.3 * torch.randn(batch, generator=g),
    }
    return actor, critic, actor_net, critic_net, data


def torchrl_batch(loss_module: ClipPPOLoss, data: dict) -> TensorDict:
    keys = loss_module.tensor_keys
    return TensorDict(
        {
            "observation": data["obs"],
            "action": data["action"],
            keys.sample_log_prob: data["old_log_prob"],
            keys.advantage: data["advantages"].unsqueeze(-1),
            keys.value_target: data["returns"].unsqueeze(-1),
            keys.value: data["old_values"].unsqueeze(-1),
        },
        batch_size=[len(data["obs"])],
    )


def funrl_inputs(actor_net, critic_net, data):
    dist = torch.distributions.Categorical(logits=actor_net(data["obs"]))
    return dist.log_prob(data["action"]), dist.entropy(), critic_net(data["obs"]).squeeze(-1)


@pytest.mark.parametrize("clip_value", [None, 0.2])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_matches_torchrl_clip_ppo_loss(seed, normalize, clip_value):
    actor, critic, actor_net, critic_net, data = ppo_setup(seed, batch=64)
    module = ClipPPOLoss(
        actor, critic, clip_epsilon=0.2, entropy_coeff=0.01, critic_coeff=0.5, loss_critic_type="l2",
        normalize_advantage=normalize, clip_value=clip_value,
    )  # fmt: skip
    out = module(torchrl_batch(module, data))
    log_prob, entropy, values = funrl_inputs(actor_net, critic_net, data)
    policy, metrics = ppo_clip_loss(log_prob, data["old_log_prob"], data["advantages"], 0.2, normalize)
    value, value_metrics = ppo_value_loss(values, data["old_values"], data["returns"], clip_value)
    close(policy, out["loss_objective"])
    close(metrics["clip_fraction"], out["clip_fraction"])
    close(0.5 * 2 * value, out["loss_critic"])  # documented: critic_coeff=c  <->  vf_coef=2c
    close(-0.01 * entropy.mean(), out["loss_entropy"])
    if clip_value is not None:
        close(value_metrics["value_clip_fraction"], out["value_clip_fraction"])
    total, _ = ppo_loss(
        log_prob, data["old_log_prob"], data["advantages"], values, data["old_values"], data["returns"],
        entropy, clip_eps=0.2, vf_coef=2 * 0.5, ent_coef=0.01, value_clip_eps=clip_value, normalize=normalize,
    )  # fmt: skip
    close(total, out["loss_objective"] + out["loss_critic"] + out["loss_entropy"])
    # The gradients agree too (the whole point of a loss).
    torchrl_total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    ref_grads = torch.autograd.grad(torchrl_total, [*actor_net.parameters(), *critic_net.parameters()])
    grads = torch.autograd.grad(total, [*actor_net.parameters(), *critic_net.parameters()])
    for got, expected in zip(grads, ref_grads, strict=True):
        close(got, expected)


def test_ppo_approx_kl_is_k3_where_torchrl_logs_k1():
    actor, critic, actor_net, critic_net, data = ppo_setup(5, batch=64)
    module = ClipPPOLoss(actor, critic, clip_epsilon=0.2, loss_critic_type="l2")
    out = module(torchrl_batch(module, data))
    log_prob, _, _ = funrl_inputs(actor_net, critic_net, data)
    _, metrics = ppo_clip_loss(log_prob, data["old_log_prob"], data["advantages"], 0.2)
    log_ratio = (log_prob - data["old_log_prob"]).detach()
    close(out["kl_approx"], (-log_ratio).mean())
    close(metrics["approx_kl"], (log_ratio.exp() - 1 - log_ratio).mean())
    assert metrics["approx_kl"] >= 0 and not torch.allclose(metrics["approx_kl"], out["kl_approx"])


# ------------------------------------------------------------------------------------------
# DQN vs DQNLoss
# ------------------------------------------------------------------------------------------


def dqn_setup(seed: int, batch: int = 32, obs_dim: int = 4, actions: int = 3):
    torch.manual_seed(seed)
    net = nn.Linear(obs_dim, actions)
    g = torch.Generator().manual_seed(seed)
    data = TensorDict(
        {
            "observation": torch.randn(batch, obs_dim, generator=g),
            "action": torch.randint(0, actions, (batch,), generator=g),
            "next": {
                "observation": torch.randn(batch, obs_dim, generator=g),
                "reward": torch.randn(batch, 1, generator=g),
                "done": torch.rand(batch, 1, generator=g) < 0.3,
                "terminated": torch.rand(batch, 1, generator=g) < 0.2,
            },
        },
        batch_size=[batch],
    )
    data["next", "done"] = data["next", "done"] | data["next", "terminated"]
    return net, data


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("loss_function, loss_type", [("l2", "mse"), ("smooth_l1", "huber")])
@pytest.mark.parametrize("seed", [0, 1])
def test_dqn_matches_torchrl_dqn_loss(seed, loss_function, loss_type, double):
    net, data = dqn_setup(seed)
    actor = QValueActor(net, in_keys=["observation"], action_space="categorical")
    module = DQNLoss(
        actor, loss_function=loss_function, delay_value=True, double_dqn=double, action_space="categorical"
    )
    module.make_value_estimator(gamma=0.9)
    # Move the target network away from the online one so that Double DQN matters.
    with torch.no_grad():
        for p in module.target_value_network_params.values(True, True):
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 7)))
    batch = data.clone()
    out = module(batch)  # also writes a per-sample priority into batch["td_error"]

    reward = data["next", "reward"].squeeze(-1)
    terminated = data["next", "terminated"].squeeze(-1)
    next_obs = data["next", "observation"]
    with torch.no_grad():
        with module.target_value_network_params.to_module(actor):  # the target weights, temporarily
            next_q_target = net(next_obs)
        assert not torch.allclose(next_q_target, net(next_obs))
        if double:
            targets = double_q_learning_target(reward, net(next_obs), next_q_target, terminated, 0.9)
        else:
            targets = q_learning_target(reward, next_q_target, terminated, 0.9)
    loss, metrics = dqn_loss(net(data["observation"]), data["action"], targets, loss_type)
    close(loss, out["loss"])
    # Documented difference: TorchRL's priority key holds the squared TD error per sample; funrl
    # reports the mean absolute TD error as a metric.
    td = targets - net(data["observation"]).gather(1, data["action"][:, None]).squeeze(1)
    close(batch["td_error"].squeeze(-1), td.detach() ** 2)
    close(metrics["td_error_abs"], td.detach().abs().mean())
