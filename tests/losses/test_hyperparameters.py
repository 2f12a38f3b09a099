"""Float hyper-parameters of every estimator and loss: a Python float or a 0-d tensor, never a branch.

Agents carry γ, λ, clip ε, coefficients, τ, α, ... as tensors in their train state so that a new
value never recompiles and a sweep is a ``vmap``. So for every function below: a 0-d tensor gives
what the float gives, ``vmap`` over a batch of values equals a loop over them, and a compiled
GAE + PPO loss compiles once for any tensor values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from actor_critic_data import networks, replay_batch
from torch._dynamo.testing import CompileCounter

from funrl import losses as L
from funrl import random, tree

T, N, B, A, K = 6, 3, 5, 4, 7


def _data(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return {
        "time": normal(T, N),
        "time2": normal(T, N),
        "time3": normal(T, N),
        "terminated": torch.rand(T, N, generator=g) < 0.2,
        "truncated": torch.rand(T, N, generator=g) < 0.2,
        "flat": normal(B),
        "flat2": normal(B),
        "flat3": normal(B),
        "flags": torch.rand(B, generator=g) < 0.3,
        "per_action": normal(B, A),
        "per_action2": normal(B, A),
        "time_per_action": normal(T, N, A),
        "atoms": normal(B, A, K),
        "quantiles": normal(B, K),
        "actions": torch.randint(0, A, (B,), generator=g),
        "ensemble": normal(2, B),
        "ensemble_actions": normal(2, B, A),
        "proposals": normal(2, B, 3),
        "proposal_log_prob": normal(B, 3),
        "tokens": normal(B, T),
        "mask": (torch.rand(B, T, generator=g) < 0.8).float(),
        "groups": normal(2, 4),
        "params": {"w": normal(3, 2), "b": normal(2)},
        "params2": {"w": normal(3, 2), "b": normal(2)},
    }


@dataclass
class Case:
    name: str
    call: Callable[..., Any]  # call(data, **hyper_parameters)
    hyper_parameters: dict[str, float]


def _gae(d, **hp):
    return L.gae(d["time"], d["time2"], d["time3"], d["terminated"], d["truncated"], **hp)


def _vtrace(d, **hp):
    return L.vtrace(d["time"], d["time2"], d["time3"], d["terminated"], d["truncated"], 0.3 * d["time"], **hp)


NETWORKS, REPLAY = networks(), replay_batch(0)  # drawn once, outside any vmap


def _sac_critic_objective(d, gamma, alpha):
    n = NETWORKS
    return L.sac_critic_objective(
        n["critic_params"], n["actor_params"], n["target_critic_params"], alpha, REPLAY,
        random.key(0), actor=n["actor"], critic=n["critic"], gamma=gamma,
    )  # fmt: skip


def _td3_critic_objective(d, **hp):
    n = NETWORKS
    return L.td3_critic_objective(
        n["critic_params"], n["det_actor_params"], n["target_critic_params"], REPLAY,
        random.key(0), actor=n["det_actor"], critic=n["critic"], **hp,
    )  # fmt: skip


CASES = [
    # returns
    Case(
        "td_error",
        lambda d, **hp: L.td_error(d["time"], d["time2"], d["time3"], d["terminated"], **hp),
        {"gamma": 0.9},
    ),
    Case("gae", _gae, {"gamma": 0.99, "lmbda": 0.95}),
    Case(
        "lambda_returns",
        lambda d, **hp: L.lambda_returns(d["time"], d["time3"], d["terminated"], d["truncated"], **hp),
        {"gamma": 0.9, "lmbda": 0.8},
    ),
    Case(
        "discounted_returns",
        lambda d, **hp: L.discounted_returns(d["time"], d["time3"], d["terminated"], d["truncated"], **hp),
        {"gamma": 0.9},
    ),
    Case(
        "n_step_returns",
        lambda d, **hp: L.n_step_returns(d["time"], d["time3"], d["terminated"], d["truncated"], n=3, **hp),
        {"gamma": 0.9},
    ),
    Case(
        "vtrace",
        _vtrace,
        {
            "gamma": 0.9,
            "lmbda": 0.9,
            "clip_rho_threshold": 1.0,
            "clip_c_threshold": 0.9,
            "clip_pg_rho_threshold": 1.2,
        },
    ),
    Case(
        "retrace",
        lambda d, **hp: L.retrace(
            d["time"], d["time2"], d["time3"], d["terminated"], d["truncated"], 0.3 * d["time"], **hp
        ),
        {"gamma": 0.9, "lmbda": 0.9},
    ),
    # policy_gradient
    Case("normalize_advantages", lambda d, **hp: L.normalize_advantages(d["flat"], **hp), {"eps": 0.1}),
    Case(
        "ppo_clip_loss",
        lambda d, **hp: L.ppo_clip_loss(d["flat"], 0.5 * d["flat"], d["flat2"], **hp),
        {"clip_eps": 0.2},
    ),
    Case(
        "ppo_value_loss",
        lambda d, **hp: L.ppo_value_loss(d["flat"], d["flat2"], d["flat3"], **hp),
        {"clip_eps": 0.3},
    ),
    Case(
        "ppo_loss",
        lambda d, **hp: L.ppo_loss(
            d["flat"], 0.5 * d["flat"], d["flat2"], d["flat3"], d["flat2"], d["flat"], d["flat3"].abs(), **hp
        ),
        {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01, "value_clip_eps": 0.3},
    ),
    Case(
        "a2c_loss",
        lambda d, **hp: L.a2c_loss(d["flat"], d["flat2"], d["flat3"], d["flat"], d["flat2"].abs(), **hp),
        {"vf_coef": 0.5, "ent_coef": 0.01},
    ),
    # value_based
    Case(
        "q_learning_target",
        lambda d, **hp: L.q_learning_target(d["flat"], d["per_action"], d["flags"], **hp),
        {"gamma": 0.9},
    ),
    Case(
        "double_q_learning_target",
        lambda d, **hp: L.double_q_learning_target(
            d["flat"], d["per_action"], d["per_action2"], d["flags"], **hp
        ),
        {"gamma": 0.9},
    ),
    Case(
        "n_step_q_targets",
        lambda d, **hp: L.n_step_q_targets(
            d["time"], d["time_per_action"], d["terminated"], d["truncated"], n=2, **hp
        ),
        {"gamma": 0.9},
    ),
    Case(
        "dqn_loss",
        lambda d, **hp: L.dqn_loss(d["per_action"], d["actions"], d["flat"], **hp),
        {"huber_delta": 0.5},
    ),
    Case(
        "categorical_q_learning_target",
        lambda d, **hp: L.categorical_q_learning_target(
            d["flat"], d["atoms"], d["flags"], v_min=-2.0, v_max=2.0, **hp
        ),
        {"gamma": 0.9},
    ),
    Case(
        "quantile_q_learning_target",
        lambda d, **hp: L.quantile_q_learning_target(d["flat"], d["atoms"], d["flags"], **hp),
        {"gamma": 0.9},
    ),
    Case(
        "quantile_huber_loss",
        lambda d, **hp: L.quantile_huber_loss(d["quantiles"], 2.0 * d["quantiles"], **hp),
        {"huber_delta": 0.5},
    ),
    Case(
        "qr_dqn_loss",
        lambda d, **hp: L.qr_dqn_loss(d["atoms"], d["actions"], d["quantiles"], **hp),
        {"huber_delta": 0.5},
    ),
    # actor-critic
    Case(
        "bellman_target",
        lambda d, **hp: L.bellman_target(d["flat"], d["flags"], d["flat2"], **hp),
        {"gamma": 0.9},
    ),
    Case(
        "soft_state_value", lambda d, **hp: L.soft_state_value(d["ensemble"], d["flat"], **hp), {"alpha": 0.2}
    ),
    Case("sac_actor_loss", lambda d, **hp: L.sac_actor_loss(d["ensemble"], d["flat"], **hp), {"alpha": 0.2}),
    Case(
        "sac_temperature_loss",
        lambda d, **hp: L.sac_temperature_loss(torch.tensor(0.3), d["flat"], **hp),
        {"target_entropy": -2.0},
    ),
    Case("sac_critic_objective", _sac_critic_objective, {"gamma": 0.99, "alpha": 0.2}),
    Case(
        "td3_smoothing_noise",
        lambda d, **hp: L.td3_smoothing_noise(random.key(1), (B, A), **hp),
        {"policy_noise": 0.2, "noise_clip": 0.3},
    ),
    Case(
        "smoothed_target_action",
        lambda d, **hp: L.smoothed_target_action(d["per_action"], 0.1 * d["per_action2"], **hp),
        {"action_low": -1.0, "action_high": 1.0},
    ),
    Case(
        "td3_critic_objective",
        _td3_critic_objective,
        {"gamma": 0.99, "policy_noise": 0.2, "noise_clip": 0.5, "action_low": -1.0, "action_high": 1.0},
    ),
    Case(
        "discrete_soft_state_value",
        lambda d, **hp: L.discrete_soft_state_value(d["ensemble_actions"], d["per_action"], **hp),
        {"alpha": 0.2},
    ),
    Case(
        "discrete_sac_actor_loss",
        lambda d, **hp: L.discrete_sac_actor_loss(d["ensemble_actions"], d["per_action"], **hp),
        {"alpha": 0.2},
    ),
    Case(
        "redq_target_value",
        lambda d, **hp: L.redq_target_value(d["ensemble"], torch.tensor([1]), d["flat"], **hp),
        {"alpha": 0.2},
    ),
    Case(
        "redq_actor_loss", lambda d, **hp: L.redq_actor_loss(d["ensemble"], d["flat"], **hp), {"alpha": 0.2}
    ),
    Case(
        "crossq_target",
        lambda d, **hp: L.crossq_target(d["flat"], d["flags"], d["ensemble"], d["flat2"], **hp),
        {"gamma": 0.99, "alpha": 0.2},
    ),
    # offline
    Case(
        "cql_regularizer",
        lambda d, **hp: L.cql_regularizer(
            d["ensemble"],
            d["proposals"],
            d["proposals"] + 1,
            d["proposal_log_prob"],
            d["proposals"] - 1,
            d["proposal_log_prob"],
            action_dim=A,
            **hp,
        ),
        {"temperature": 0.5},
    ),  # fmt: skip
    Case(
        "cql_lagrange_loss",
        lambda d, **hp: L.cql_lagrange_loss(torch.tensor(0.1), d["flat"], **hp),
        {"target_action_gap": 5.0},
    ),
    Case("expectile_loss", lambda d, **hp: L.expectile_loss(d["flat"], **hp), {"expectile": 0.7}),
    Case(
        "iql_value_loss", lambda d, **hp: L.iql_value_loss(d["ensemble"], d["flat"], **hp), {"expectile": 0.7}
    ),
    Case(
        "iql_critic_loss",
        lambda d, **hp: L.iql_critic_loss(d["ensemble"], d["flat"], d["flags"], d["flat2"], **hp),
        {"gamma": 0.9},
    ),
    Case(
        "iql_actor_loss",
        lambda d, **hp: L.iql_actor_loss(d["flat"], d["ensemble"], d["flat2"], **hp),
        {"temperature": 3.0, "max_weight": 2.0},
    ),
    Case(
        "td3_bc_actor_loss",
        lambda d, **hp: L.td3_bc_actor_loss(d["flat"], d["per_action"], d["per_action2"], **hp),
        {"alpha": 2.5},
    ),
    # sequence
    Case(
        "dpo_loss",
        lambda d, **hp: L.dpo_loss(
            d["tokens"], d["tokens"] - 1, d["tokens"] + 0.5, d["tokens"] - 0.5, d["mask"], d["mask"], **hp
        ),
        {"beta": 0.1, "label_smoothing": 0.1},
    ),
    Case(
        "group_relative_advantages",
        lambda d, **hp: L.group_relative_advantages(d["groups"], **hp),
        {"eps": 0.1},
    ),
    Case(
        "grpo_loss",
        lambda d, **hp: L.grpo_loss(
            d["tokens"], d["tokens"] - 0.1, d["tokens"] + 0.1, d["flat"], d["mask"], **hp
        ),
        {"clip_eps": 0.2, "kl_coef": 0.04},
    ),
    # target
    Case("polyak", lambda d, **hp: L.polyak(d["params"], d["params2"], **hp), {"tau": 0.005}),
]


def _as_tensors(hyper_parameters: dict[str, float]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in hyper_parameters.items()}


def test_every_exported_function_with_a_float_hyper_parameter_has_a_case():
    # A new loss with a float hyper-parameter must join CASES (or be listed here with the reason).
    without = {
        "categorical_projection": "v_min / v_max fix the support's atoms (static, like num_atoms)",
        "discrete_sac_target_entropy": "a constructor: returns a Python float for a train state",
        "sac_target_entropy": "a constructor: takes an int",
    }
    import inspect

    covered = {case.name for case in CASES}
    for name in L.__all__:
        parameters = inspect.signature(getattr(L, name)).parameters.values()
        floats = [p.name for p in parameters if "float" in str(p.annotation) or "Scalar" in str(p.annotation)]
        objective = name.endswith("_objective")
        if floats and not objective and name not in covered and name not in without:
            aliases = {getattr(L, case.name) for case in CASES}
            assert getattr(L, name) in aliases, f"{name}: float hyper-parameters {floats} have no case"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_0d_tensor_hyper_parameter_gives_what_the_float_gives(case):
    d = _data()
    expected = case.call(d, **case.hyper_parameters)
    got = case.call(d, **_as_tensors(case.hyper_parameters))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_vmap_over_hyper_parameter_values_equals_a_loop(case):
    d = _data(1)
    values = [case.hyper_parameters, {k: 0.5 * v for k, v in case.hyper_parameters.items()}]
    stacked = {k: torch.tensor([v[k] for v in values]) for k in case.hyper_parameters}
    batched = torch.func.vmap(lambda hp: case.call(d, **hp), randomness="error")(stacked)
    for i, hp in enumerate(values):
        torch.testing.assert_close(
            tree.map(lambda x, i=i: x[i], batched), case.call(d, **hp), rtol=1e-5, atol=1e-6
        )


def _gae_and_ppo_loss(d: dict[str, torch.Tensor], gamma, lmbda, clip_eps, vf_coef, ent_coef):
    advantages, returns = _gae(d, gamma=gamma, lmbda=lmbda)
    loss, _ = L.ppo_loss(
        d["time"], 0.9 * d["time"], advantages, d["time2"], d["time3"], returns, d["time"].abs(),
        clip_eps=clip_eps, vf_coef=vf_coef, ent_coef=ent_coef, value_clip_eps=clip_eps,
    )  # fmt: skip
    return loss


def test_compiled_gae_and_ppo_loss_compile_once_for_any_tensor_hyper_parameters():
    d = _data(2)
    settings = [(0.99, 0.95, 0.2, 0.5, 0.01), (0.9, 0.5, 0.1, 1.0, 0.0)]
    counter = CompileCounter()
    compiled = torch.compile(_gae_and_ppo_loss, backend=counter, fullgraph=True, dynamic=False)
    for setting in settings:
        got = compiled(d, *map(torch.tensor, setting))
        torch.testing.assert_close(got, _gae_and_ppo_loss(d, *setting))
    assert counter.frame_count == 1
    # The counter does see recompiles: Python floats are constants of the graph.
    floats = CompileCounter()
    compiled = torch.compile(_gae_and_ppo_loss, backend=floats, fullgraph=True, dynamic=False)
    for setting in settings:
        compiled(d, *setting)
    assert floats.frame_count == 2
