"""A new float hyper-parameter never recompiles: it rides in the train state (issue 23, warm path).

Each agent's ``SWEEPABLE`` fields are float32 tensors of its train state, read by ``update`` from
there only, so agents whose configs differ only in them have one ``static_key`` and share one
compiled step (``funrl.agents.common.make_step``). The eager tests check the property that makes
sharing correct, for every agent and field: one agent's ``update`` on another's state equals the
other's own update, and the field changes the result. The compiled tests count dynamo's graphs
across two configs and check the shared step computes the second config's numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import point_env
import pytest
import torch

from funrl import random, tree
from funrl.agents import common, dqn, ppo, sac, td3

PPO = ppo.PPOConfig(
    total_steps=2 * 8 * 4, num_envs=2, num_steps=8, update_epochs=2, num_minibatches=2, hidden_sizes=(8,)
)
# learning_starts=0 and a target refresh every gradient step: every hyper-parameter acts in the
# first two updates.
DQN = dqn.DQNConfig(
    total_steps=4 * 2 * 10,
    num_envs=4,
    num_steps=2,
    train_frequency=2,
    buffer_size=32,
    batch_size=8,
    learning_starts=0,
    target_network_frequency=2,
    hidden_sizes=(8,),
)
CONTINUOUS = dict(
    env_id=point_env.ENV_ID,
    total_steps=2 * 2 * 8,
    num_envs=2,
    num_steps=2,
    train_frequency=2,
    buffer_size=32,
    batch_size=8,
    learning_starts=0,
    hidden_sizes=(8,),
)
SAC = sac.SACConfig(**CONTINUOUS)
TD3 = td3.TD3Config(**CONTINUOUS)

NEW_VALUES = {
    "learning_rate": 1e-2,
    "max_grad_norm": 1e-3,  # small enough to clip every gradient step
    "ent_coef": 0.1,
    "clip_eps": 1e-5,  # small enough to clip the ratios of the first updates
    "vf_coef": 1.0,
    "gamma": 0.9,
    "gae_lambda": 0.5,
    "tau": 0.5,
    "start_e": 0.5,
    "end_e": 1.0,
    "exploration_fraction": 0.9,
    "policy_lr": 1e-2,
    "q_lr": 1e-2,
    "alpha": 0.5,
    "policy_noise": 0.5,
    "noise_clip": 0.1,
    "exploration_noise": 0.5,
}
"""A value for each sweepable field, far enough from the defaults to change two updates."""

AGENTS = [(ppo, PPO), (dqn, DQN), (sac, SAC), (td3, TD3)]


def two_updates(agent: common.Agent, state: Any) -> Any:
    """The state after two updates of a fresh copy of ``state`` (the replay add donates its input)."""
    state = tree.map(torch.clone, state)
    for i in range(2):
        state, _ = agent.update(state, random.fold_in(random.key(5), i))
    return state


@pytest.mark.parametrize(("module", "config"), AGENTS, ids=[m.NAME for m, _ in AGENTS])
def test_update_reads_every_float_hyper_parameter_from_the_state(module: Any, config: Any) -> None:
    base = module.make_train(config)
    base_state = base.init(random.key(0))
    base_out = two_updates(base, base_state)
    for name in module.SWEEPABLE:
        other = module.make_train(dataclasses.replace(config, **{name: NEW_VALUES[name]}))
        assert other.static_key == base.static_key, name
        other_state = other.init(random.key(0))
        other_out = two_updates(other, other_state)
        # base's update computes other's numbers from other's state: what sharing a compiled step needs
        assert tree.tree_equal(two_updates(base, other_state), other_out), name
        assert not tree.tree_equal(other_out.params, base_out.params), f"{name} changed nothing"


def test_static_key_blanks_only_the_float_hyper_parameters() -> None:
    key = ppo.make_train(PPO).static_key
    assert ppo.make_train(dataclasses.replace(PPO, gamma=0.9, ent_coef=0.0, max_grad_norm=1.0)).static_key == key
    assert ppo.make_train(dataclasses.replace(PPO, num_steps=4)).static_key != key
    assert ppo.make_train(dataclasses.replace(PPO, anneal_lr=False)).static_key != key  # a bool shapes the graph
    assert ppo.make_train(PPO, device="meta").static_key != key
    assert dqn.make_train(DQN).static_key != key
    # a given env is part of the key by identity
    env = ppo.make_train(PPO).env
    assert ppo.make_train(PPO, env=env).static_key == ppo.make_train(PPO, env=env).static_key
    other_env = ppo.make_train(PPO).env
    assert ppo.make_train(PPO, env=env).static_key != ppo.make_train(PPO, env=other_env).static_key


def test_make_step_compiles_once_per_static_key(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []

    def fake_compile(fn: Any, **kwargs: Any) -> Any:
        compiled.append(fn)
        return fn

    monkeypatch.setattr(common, "_COMPILED_STEPS", {})
    monkeypatch.setattr(common.control, "compile", fake_compile)
    first = common.make_step(ppo.make_train(PPO), batched=False, compile=True)
    again = common.make_step(ppo.make_train(dataclasses.replace(PPO, learning_rate=1e-3)), False, True)
    assert again is first and len(compiled) == 1
    common.make_step(ppo.make_train(dataclasses.replace(PPO, num_steps=4)), batched=False, compile=True)
    common.make_step(ppo.make_train(PPO), batched=True, compile=True)
    assert len(compiled) == 3
    agent = ppo.make_train(PPO)

    def logged_update(state: Any, key: torch.Tensor) -> Any:
        return agent.update(state, key)

    common.make_step(dataclasses.replace(agent, update=logged_update), batched=False, compile=True)
    assert len(compiled) == 4  # same static key, another update: not the first agent's step
    assert common.make_step(ppo.make_train(PPO), batched=False, compile=False) not in compiled


def test_make_step_saves_a_step_under_its_static_key_and_never_one_with_an_env_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name a compiled step is saved under for later processes (``saved_as``): the same for
    configs that differ only in float hyper-parameters, another for any other field (a relu
    network has the tanh one's shapes: only the name tells them apart on disk) or for batching,
    and none for an agent whose env was given as an object (its key holds the env's identity)."""

    def saved_as(agent: common.Agent, batched: bool = False) -> str | None:
        monkeypatch.setattr(common, "_COMPILED_STEPS", {})
        return common.make_step(agent, batched=batched, compile=True)

    monkeypatch.setattr(common.control, "compile", lambda fn, **kwargs: kwargs["saved_as"])
    name = saved_as(ppo.make_train(PPO))
    assert name is not None
    assert saved_as(ppo.make_train(dataclasses.replace(PPO, learning_rate=1e-3, gamma=0.9))) == name
    assert saved_as(ppo.make_train(dataclasses.replace(PPO, activation="relu"))) not in (None, name)
    assert saved_as(ppo.make_train(PPO), batched=True) not in (None, name)
    assert saved_as(ppo.make_train(PPO, env=ppo.make_train(PPO).env)) is None


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> list[torch.fx.GraphModule]:
    """The graphs dynamo captures for ``make_step`` from now on (no compiled step, no dynamo cache
    entry left from other tests). Dynamo's guards decide what recompiles, whatever the backend, so
    the graphs run as they were captured, without inductor's code generation."""
    captured: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        captured.append(gm)
        return gm.forward

    def counting_compile(
        fn: Any, *, fullgraph: bool, dynamic: bool | None, mode: str | None, device: Any, **saved: Any
    ) -> Any:
        return torch.compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=capture)

    monkeypatch.setattr(common, "_COMPILED_STEPS", {})
    monkeypatch.setattr(common.control, "compile", counting_compile)
    torch._dynamo.reset()
    return captured


def check_one_compile_serves_both(
    first: common.Agent, second: common.Agent, graphs: list[torch.fx.GraphModule]
) -> None:
    """``first`` and ``second`` trained compiled (then ``first`` again from a new key) make one
    graph; ``second``'s result is its own (as eager), not ``first``'s."""
    first_state, _ = common.train(first, random.key(0))
    second_state, _ = common.train(second, random.key(0))
    common.train(first, random.key(1))
    assert len(graphs) == 1
    eager_state, _ = common.train(second, random.key(0), compile=False)
    assert tree.tree_allclose(second_state.params, eager_state.params, rtol=1e-4, atol=1e-5)
    assert not tree.tree_allclose(second_state.params, first_state.params, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_ppo_configs_differing_in_floats_share_one_compile(graphs: list[torch.fx.GraphModule]) -> None:
    new = {
        name: NEW_VALUES[name] for name in ("learning_rate", "ent_coef", "clip_eps", "gamma", "gae_lambda")
    }
    check_one_compile_serves_both(
        ppo.make_train(PPO), ppo.make_train(dataclasses.replace(PPO, **new)), graphs
    )


@pytest.mark.slow
def test_dqn_configs_differing_in_floats_share_one_compile(graphs: list[torch.fx.GraphModule]) -> None:
    new = {name: NEW_VALUES[name] for name in dqn.SWEEPABLE}
    check_one_compile_serves_both(
        dqn.make_train(DQN), dqn.make_train(dataclasses.replace(DQN, **new)), graphs
    )
