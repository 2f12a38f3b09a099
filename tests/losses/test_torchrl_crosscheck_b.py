"""Cross-checks of funrl's SAC, TD3, CQL, IQL (and DDPG, TD3+BC, discrete SAC) losses against TorchRL 0.14.

Same networks (TorchRL's modules are built on real copies of the funrl skeletons and loaded with
the funrl params; the twin-critic ensembles are written into TorchRL's expanded params), same
batch, float64, loss values within 1e-5 relative.

How the sampling noise is matched:

* SAC / CQL actions from the policy: a recording wrapper around the TorchRL critic stores every
  action TorchRL evaluates (the calls with unbatched inputs: next actions, dataset actions,
  policy actions). funrl's tensor-level losses are then fed exactly those actions, with
  log-probabilities from ``funrl.nets.distributions.tanh_normal`` (and Q-values from
  ``ensemble_q``), so the comparison covers log-probs, critics, targets and the losses.
* TD3 smoothing noise and CQL's proposal actions come from torch's global generator inside
  TorchRL; the tests reseed it and redraw the same normals/uniforms in the same order.
* IQL, DDPG, the TD3+BC actor and discrete SAC need no sampling: the param-level objectives
  are compared directly.

Documented differences (tested below):

* TorchRL's losses default to ``loss_function="smooth_l1"``; funrl defaults to ``"l2"`` (CleanRL,
  the papers). With ``distance="smooth_l1"`` funrl matches TorchRL's default.
* CQL's penalty, two differences in TorchRL 0.14: it concatenates its ``[B*N, 1]`` proposal
  q-values on the last dim without reshaping to ``[B, N]``, so its log-sum-exp runs over the 3
  proposal kinds of one sample instead of over all ``3N`` proposals of a state; and it evaluates
  the proposals drawn from ``pi(.|s')`` at ``s'`` instead of ``s``. funrl follows the CQL authors'
  code (all ``3N`` proposals, all at ``s``). The test rebuilds TorchRL's value from the same
  proposals to pin both differences down.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import Bounded
from torchrl.modules import Actor, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import CQLLoss, DDPGLoss, DiscreteSACLoss, IQLLoss, SACLoss, TD3BCLoss, TD3Loss
from torchrl.objectives.utils import ValueEstimators

from funrl import losses as C
from funrl import nets, random, tree
from funrl.losses import offline as O

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

OBS, ACT, B, GAMMA = 3, 2, 16, 0.9
DTYPE = torch.float64
tanh_normal = nets.distributions.tanh_normal


def close(actual, expected):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=DTYPE), torch.as_tensor(expected, dtype=DTYPE), rtol=1e-5, atol=1e-8
    )


class RecordingQ(nn.Module):
    """TorchRL-side critic: funrl's ContinuousQ with a ``[B, 1]`` output, recording unbatched actions."""

    def __init__(self, critic: nn.Module):
        super().__init__()
        self.critic = critic
        self.actions: list[torch.Tensor] = []

    def forward(self, obs, action):
        if not torch._C._functorch.is_batchedtensor(action):
            self.actions.append(action.detach().clone())
        return self.critic(obs, action).unsqueeze(-1)


def load(td_params, params: dict) -> None:
    """Write funrl params (stacked or not) into TorchRL's (expanded) params, matched by name suffix."""
    for name, value in td_params.flatten_keys(".").items():
        matches = [n for n in params if name.endswith(n)]
        assert len(matches) == 1, (name, matches)
        value.data.copy_(params[matches[0]])


def setup(seed: int) -> dict:
    keys = random.split(random.key(seed), 6)
    actor = nets.GaussianActor(
        OBS, ACT, (32,), "relu", state_dependent_std=True, log_std_max=0.0, device="cpu"
    )
    det_actor = nn.Sequential(nets.MLP(OBS, (32,), ACT, "relu", device="cpu"), nn.Tanh())
    critic = nets.ContinuousQ(OBS, ACT, (32,), device="cpu")
    value_net = nets.MLP(OBS, (32,), 1, "relu", device="cpu")
    critic_params = nets.init_ensemble(critic, keys[1], 2, dtype=DTYPE)
    s = {
        "actor": actor.to(DTYPE),
        "det_actor": det_actor.to(DTYPE),
        "critic": critic.to(DTYPE),
        "value_net": value_net.to(DTYPE),
        "actor_params": nets.init(actor, keys[0], dtype=DTYPE),
        "det_actor_params": nets.init(det_actor, keys[2], dtype=DTYPE),
        "target_det_actor_params": nets.init(det_actor, keys[3], dtype=DTYPE),
        "critic_params": critic_params,
        "target_critic_params": tree.map(lambda p: p + 0.05 * torch.sin(7.0 * p), critic_params),
        "value_params": nets.init(value_net, keys[4], dtype=DTYPE),
    }
    s["actor"].load_state_dict(s["actor_params"])
    s["det_actor"].load_state_dict(s["det_actor_params"])
    s["value_net"].load_state_dict(s["value_params"])
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(B, generator=g) < 0.3
    truncated = (torch.rand(B, generator=g) < 0.2) & ~terminated
    s["batch"] = {
        "obs": torch.randn(B, OBS, generator=g, dtype=DTYPE),
        "action": torch.rand(B, ACT, generator=g, dtype=DTYPE) * 1.8 - 0.9,
        "reward": torch.randn(B, generator=g, dtype=DTYPE),
        "next_obs": torch.randn(B, OBS, generator=g, dtype=DTYPE),
        "terminated": terminated,
    }
    s["truncated"] = truncated
    return s


def tensordict(s: dict) -> TensorDict:
    b = s["batch"]
    return TensorDict(
        {
            "observation": b["obs"],
            "action": b["action"],
            ("next", "observation"): b["next_obs"],
            ("next", "reward"): b["reward"].unsqueeze(-1),
            ("next", "terminated"): b["terminated"].unsqueeze(-1),
            # A truncated transition is done but not terminated: it bootstraps (TorchRL and funrl agree).
            ("next", "done"): (b["terminated"] | s["truncated"]).unsqueeze(-1),
        },
        [B],
    )


def stochastic_actor(s: dict) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(s["actor"], in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )


def log_prob(s: dict, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    return tanh_normal.log_prob(*nets.apply(s["actor"], s["actor_params"], obs), action)


# ----------------------------------------------------------------------------------------------
# SAC.


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("distance", ["l2", "smooth_l1"])
def test_sac_losses_match_torchrl(seed, distance):
    s = setup(seed)
    b = s["batch"]
    q_module = RecordingQ(s["critic"])
    loss = SACLoss(
        stochastic_actor(s),
        ValueOperator(q_module, in_keys=["observation", "action"]),
        num_qvalue_nets=2,
        loss_function=distance,
        alpha_init=0.5,
        target_entropy=-float(ACT),
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, s["critic_params"])
    load(loss.target_qvalue_network_params, s["target_critic_params"])
    out = loss(tensordict(s))

    next_action, data_action, policy_action = q_module.actions  # target, prediction, actor: in this order
    torch.testing.assert_close(data_action, b["action"], rtol=0, atol=0)
    alpha = 0.5
    next_q = C.ensemble_q(s["critic"], s["target_critic_params"], b["next_obs"], next_action)
    next_value = C.soft_state_value(next_q, log_prob(s, b["next_obs"], next_action), alpha)
    target = C.bellman_target(b["reward"], b["terminated"], next_value, GAMMA)
    q = C.ensemble_q(s["critic"], s["critic_params"], b["obs"], b["action"])
    close(C.sac_critic_loss(q, target, distance)[0], out["loss_qvalue"])

    policy_log_prob = log_prob(s, b["obs"], policy_action)
    q_policy = C.ensemble_q(s["critic"], s["critic_params"], b["obs"], policy_action)
    close(C.sac_actor_loss(q_policy, policy_log_prob, alpha)[0], out["loss_actor"])
    log_alpha = torch.tensor(math.log(alpha), dtype=DTYPE)
    close(C.sac_temperature_loss(log_alpha, policy_log_prob, C.sac_target_entropy(ACT))[0], out["loss_alpha"])
    close(-policy_log_prob.mean(), out["entropy"])


def test_sac_default_distance_differs_from_torchrl_default():
    # Documented difference: TorchRL's default regression is smooth_l1, funrl's is l2 (x^2, no 1/2).
    q = torch.tensor([[0.0, 3.0]], dtype=DTYPE)
    target = torch.tensor([0.5, 0.0], dtype=DTYPE)
    funrl_default = C.sac_critic_loss(q, target)[0]
    torchrl_default = (
        torch.nn.functional.smooth_l1_loss(q, target.expand_as(q), reduction="none").sum(0).mean()
    )
    close(funrl_default, (0.25 + 9.0) / 2)
    close(C.sac_critic_loss(q, target, "smooth_l1")[0], torchrl_default)
    assert not torch.allclose(funrl_default, torchrl_default)


# ----------------------------------------------------------------------------------------------
# TD3.


@pytest.mark.parametrize("seed", [0, 1])
def test_td3_losses_match_torchrl(seed):
    s = setup(seed)
    b = s["batch"]
    loss = TD3Loss(
        Actor(s["det_actor"], in_keys=["observation"]),
        ValueOperator(RecordingQ(s["critic"]), in_keys=["observation", "action"]),
        action_spec=Bounded(-1.0, 1.0, (ACT,), dtype=DTYPE),
        num_qvalue_nets=2,
        policy_noise=0.2,
        noise_clip=0.5,
        loss_function="l2",
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, s["critic_params"])
    load(loss.target_qvalue_network_params, s["target_critic_params"])
    load(loss.target_actor_network_params, s["target_det_actor_params"])
    # TorchRL draws the smoothing noise with torch.randn_like(action) first thing in value_loss.
    torch.manual_seed(1234 + seed)
    standard_normal = torch.randn_like(b["action"])
    torch.manual_seed(1234 + seed)
    out = loss(tensordict(s))

    noise = (standard_normal * 0.2).clamp(-0.5, 0.5)
    next_action = nets.apply(s["det_actor"], s["target_det_actor_params"], b["next_obs"])
    next_action = C.smoothed_target_action(next_action, noise, -1.0, 1.0)
    next_q = C.ensemble_q(s["critic"], s["target_critic_params"], b["next_obs"], next_action)
    target = C.bellman_target(b["reward"], b["terminated"], next_q.min(0).values, GAMMA)
    q = C.ensemble_q(s["critic"], s["critic_params"], b["obs"], b["action"])
    close(C.td3_critic_loss(q, target)[0], out["loss_qvalue"])
    actor_loss, _ = C.td3_actor_objective(
        s["det_actor_params"], s["critic_params"], b, actor=s["det_actor"], critic=s["critic"]
    )
    close(actor_loss, out["loss_actor"])


# ----------------------------------------------------------------------------------------------
# CQL.


@pytest.mark.parametrize("seed", [0, 1])
def test_cql_losses_match_torchrl_and_its_penalty_difference_is_pinned(seed):
    s = setup(seed)
    b = s["batch"]
    num_random, temperature, weight, alpha = 4, 1.5, 2.0, 0.5
    q_module = RecordingQ(s["critic"])
    loss = CQLLoss(
        stochastic_actor(s),
        ValueOperator(q_module, in_keys=["observation", "action"]),
        loss_function="l2",
        alpha_init=alpha,
        target_entropy=-float(ACT),
        num_random=num_random,
        temperature=temperature,
        min_q_weight=weight,
        deterministic_backup=True,
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, s["critic_params"])
    load(loss.target_qvalue_network_params, s["target_critic_params"])
    td = tensordict(s)
    torch.manual_seed(99 + seed)
    # The draws of q_loss (next action) and cql_loss (uniform, policy at s, policy at s'), in order.
    eps_next = torch.empty(B, ACT, dtype=DTYPE).normal_()
    uniform = torch.empty(B * num_random, ACT, dtype=DTYPE).uniform_(-1, 1)
    eps_policy = torch.empty(B * num_random, ACT, dtype=DTYPE).normal_()
    eps_next_policy = torch.empty(B * num_random, ACT, dtype=DTYPE).normal_()
    torch.manual_seed(99 + seed)
    out = loss(td)

    # Bellman part (deterministic backup: no entropy term), with TorchRL's recorded next action.
    next_action, data_action, policy_action = q_module.actions
    loc, scale = nets.apply(s["actor"], s["actor_params"], b["next_obs"])
    torch.testing.assert_close(next_action, torch.tanh(loc + scale * eps_next))  # the redraw is right
    next_q = C.ensemble_q(s["critic"], s["target_critic_params"], b["next_obs"], next_action)
    next_value = C.soft_state_value(next_q, log_prob(s, b["next_obs"], next_action), 0.0)
    q_data = C.ensemble_q(s["critic"], s["critic_params"], b["obs"], b["action"])
    close(C.sac_critic_loss(q_data, C.bellman_target(b["reward"], b["terminated"], next_value, GAMMA))[0],
          out["loss_qvalue"])  # fmt: skip
    policy_log_prob = log_prob(s, b["obs"], policy_action)
    q_policy_action = C.ensemble_q(s["critic"], s["critic_params"], b["obs"], policy_action)
    close(C.sac_actor_loss(q_policy_action, policy_log_prob, alpha)[0], out["loss_actor"])

    # Penalty inputs from the redrawn proposals, all evaluated at s (repeat_interleave order).
    obs_rep = b["obs"].repeat_interleave(num_random, 0)

    def proposal(eps, obs):
        loc, scale = nets.apply(s["actor"], s["actor_params"], obs)
        u = loc + scale * eps
        return torch.tanh(u), tanh_normal.log_prob(loc, scale, torch.tanh(u))

    pol_a, pol_lp = proposal(eps_policy, obs_rep)
    nxt_a, nxt_lp = proposal(eps_next_policy, b["next_obs"].repeat_interleave(num_random, 0))
    q_at = lambda a: C.ensemble_q(s["critic"], s["critic_params"], obs_rep, a)  # noqa: E731
    q_random, q_pol, q_nxt = q_at(uniform), q_at(pol_a), q_at(nxt_a)  # [E, B * N]
    uniform_log_density = ACT * math.log(0.5)

    # TorchRL's definition: log-sum-exp over the 3 proposal kinds of each single sample, and the
    # s'-policy proposals evaluated at s' (not at s).
    next_obs_rep = b["next_obs"].repeat_interleave(num_random, 0)
    q_nxt_at_next_obs = C.ensemble_q(s["critic"], s["critic_params"], next_obs_rep, nxt_a)
    per_sample = torch.stack(
        [q_random - uniform_log_density, q_nxt_at_next_obs - nxt_lp, q_pol - pol_lp], dim=-1
    )  # [E, B * N, 3]
    torchrl_penalty = (
        weight * temperature * torch.logsumexp(per_sample / temperature, -1).mean(-1)
        - weight * q_data.mean(-1)
    ).sum()
    close(torchrl_penalty, out["loss_cql"])

    # funrl (the CQL authors' definition): log-sum-exp over all 3N proposals of a state.
    funrl_penalty, _ = O.cql_regularizer(
        q_data,
        q_random.reshape(2, B, num_random),
        q_pol.reshape(2, B, num_random),
        pol_lp.reshape(B, num_random),
        q_nxt.reshape(2, B, num_random),
        nxt_lp.reshape(B, num_random),
        ACT,
        temperature,
    )
    per_state = torch.cat(
        [
            q_random.reshape(2, B, num_random) - uniform_log_density,
            q_nxt.reshape(2, B, num_random) - nxt_lp.reshape(B, num_random),
            q_pol.reshape(2, B, num_random) - pol_lp.reshape(B, num_random),
        ],
        dim=-1,
    )  # [E, B, 3N]
    close(funrl_penalty, (temperature * torch.logsumexp(per_state / temperature, -1) - q_data).sum(0).mean())
    # On the same proposals the two definitions differ by far more than rounding.
    assert weight * funrl_penalty.item() > out["loss_cql"].item() + 1e-3


# ----------------------------------------------------------------------------------------------
# IQL.


@pytest.mark.parametrize("seed", [0, 1])
def test_iql_losses_match_torchrl(seed):
    s = setup(seed)
    b = s["batch"]
    temperature, expectile = 3.0, 0.7
    loss = IQLLoss(
        stochastic_actor(s),
        ValueOperator(RecordingQ(s["critic"]), in_keys=["observation", "action"]),
        ValueOperator(s["value_net"], in_keys=["observation"]),
        num_qvalue_nets=2,
        loss_function="l2",
        temperature=temperature,
        expectile=expectile,
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, s["critic_params"])
    load(loss.target_qvalue_network_params, s["target_critic_params"])
    out = loss(tensordict(s))

    modules = {"value_net": s["value_net"], "critic": s["critic"]}
    value_loss, _ = O.iql_value_objective(
        s["value_params"], s["target_critic_params"], b, expectile=expectile, **modules
    )
    close(value_loss, out["loss_value"])
    critic_loss, _ = O.iql_critic_objective(s["critic_params"], s["value_params"], b, gamma=GAMMA, **modules)
    close(critic_loss, out["loss_qvalue"])
    actor_loss, _ = O.iql_actor_objective(
        s["actor_params"], s["value_params"], s["target_critic_params"], b,
        actor=s["actor"], temperature=temperature, **modules,
    )  # fmt: skip
    close(actor_loss, out["loss_actor"])


# ----------------------------------------------------------------------------------------------
# DDPG and TD3+BC (beyond the four the issue asks for; both are deterministic given the batch).


@pytest.mark.parametrize("seed", [0, 1])
def test_ddpg_losses_match_torchrl(seed):
    s = setup(seed)
    b = s["batch"]
    loss = DDPGLoss(
        Actor(s["det_actor"], in_keys=["observation"]),
        ValueOperator(RecordingQ(s["critic"]), in_keys=["observation", "action"]),
        loss_function="l2",
        delay_actor=True,
        delay_value=True,
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    critic_params = tree.index(s["critic_params"], 0)
    target_critic_params = tree.index(s["target_critic_params"], 1)
    load(loss.value_network_params, critic_params)
    load(loss.target_value_network_params, target_critic_params)
    load(loss.target_actor_network_params, s["target_det_actor_params"])
    out = loss(tensordict(s))
    modules = {"actor": s["det_actor"], "critic": s["critic"]}
    critic_loss, _ = C.ddpg_critic_objective(
        critic_params, s["target_det_actor_params"], target_critic_params, b, gamma=GAMMA, **modules
    )
    close(critic_loss, out["loss_value"])
    close(C.ddpg_actor_objective(s["det_actor_params"], critic_params, b, **modules)[0], out["loss_actor"])


@pytest.mark.parametrize("seed", [0, 1])
def test_td3_bc_actor_loss_matches_torchrl(seed):
    s = setup(seed)
    loss = TD3BCLoss(
        Actor(s["det_actor"], in_keys=["observation"]),
        ValueOperator(RecordingQ(s["critic"]), in_keys=["observation", "action"]),
        action_spec=Bounded(-1.0, 1.0, (ACT,), dtype=DTYPE),
        num_qvalue_nets=2,
        alpha=2.5,
        loss_function="l2",
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, s["critic_params"])
    out = loss(tensordict(s))
    actor_loss, metrics = O.td3_bc_actor_objective(
        s["det_actor_params"],
        s["critic_params"],
        s["batch"],
        actor=s["det_actor"],
        critic=s["critic"],
        alpha=2.5,
    )
    close(actor_loss, out["loss_actor"])
    close(metrics["bc_mse"], out["bc_loss"])
    close(metrics["lambda"], out["lmbd"])


@pytest.mark.parametrize("seed", [0, 1])
def test_discrete_sac_losses_match_torchrl(seed):
    num_actions = 4
    keys = random.split(random.key(seed), 2)
    actor = nets.MLP(OBS, (32,), num_actions, "relu", device="cpu").to(DTYPE)
    critic = nets.MLP(OBS, (32,), num_actions, "relu", device="cpu").to(DTYPE)
    actor_params = nets.init(actor, keys[0], dtype=DTYPE)
    critic_params = nets.init_ensemble(critic, keys[1], 2, dtype=DTYPE)
    target_critic_params = tree.map(lambda p: p + 0.05 * torch.cos(5.0 * p), critic_params)
    actor.load_state_dict(actor_params)
    s = setup(seed)
    b = dict(s["batch"])
    b["action"] = torch.randint(0, num_actions, (B,), generator=torch.Generator().manual_seed(seed))
    td = tensordict({**s, "batch": b})
    loss = DiscreteSACLoss(
        ProbabilisticActor(
            TensorDictModule(actor, in_keys=["observation"], out_keys=["logits"]),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        ),
        ValueOperator(critic, in_keys=["observation"], out_keys=["action_value"]),
        action_space="categorical",
        num_actions=num_actions,
        loss_function="l2",
        alpha_init=0.5,
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
    load(loss.qvalue_network_params, critic_params)
    load(loss.target_qvalue_network_params, target_critic_params)
    out = loss(td)
    modules = {"actor": actor, "critic": critic}
    critic_loss, _ = C.discrete_sac_critic_objective(
        critic_params, actor_params, target_critic_params, 0.5, b, gamma=GAMMA, **modules
    )
    close(critic_loss, out["loss_qvalue"])
    actor_loss, metrics = C.discrete_sac_actor_objective(actor_params, critic_params, 0.5, b, **modules)
    close(actor_loss, out["loss_actor"])
    log_alpha = torch.tensor(math.log(0.5), dtype=DTYPE)
    target_entropy = C.discrete_sac_target_entropy(num_actions)
    close(C.sac_temperature_loss(log_alpha, metrics["log_prob"], target_entropy)[0], out["loss_alpha"])
