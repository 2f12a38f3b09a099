"""PPO, DQN, SAC and TD3 on gymnasium envs through ``from_gymnasium``: the same agent code, eagerly.

A host env is one set of ``num_envs`` stateful gymnasium envs: it trains one seed, without
``torch.compile`` or ``vmap``, and the agents say so with a ValueError naming the argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from funrl import envs, random, tree
from funrl.agents import common, dqn, ppo, sac, td3
from funrl.envs.gymnasium_bridge import HostEnvironment, host_env_of

NUM_ENVS, NUM_STEPS, UPDATES = 2, 8, 3
SIZES = {"num_envs": NUM_ENVS, "num_steps": NUM_STEPS, "total_steps": NUM_ENVS * NUM_STEPS * UPDATES}
OFF_POLICY = {"learning_starts": 16, "batch_size": 8, "buffer_size": 64, "train_frequency": 4}

PPO_TINY = ppo.PPOConfig(**SIZES, update_epochs=1, num_minibatches=2, hidden_sizes=(16, 16))
DQN_TINY = dqn.DQNConfig(**SIZES, **OFF_POLICY, target_network_frequency=8, hidden_sizes=(16, 16))
SAC_TINY = sac.SACConfig(**SIZES, **OFF_POLICY, hidden_sizes=(16, 16))
TD3_TINY = td3.TD3Config(**SIZES, **OFF_POLICY, hidden_sizes=(16, 16))

CASES: dict[str, tuple[Callable[..., common.Agent], Any, str]] = {
    "ppo-CartPole": (ppo.make_train, PPO_TINY, "CartPole-v1"),
    "ppo-Pendulum": (ppo.make_train, PPO_TINY, "Pendulum-v1"),  # normalisation + ClipAction on a host env
    "dqn-CartPole": (dqn.make_train, DQN_TINY, "CartPole-v1"),
    "sac-Pendulum": (sac.make_train, SAC_TINY, "Pendulum-v1"),
    "td3-Pendulum": (td3.make_train, TD3_TINY, "Pendulum-v1"),
}


def host_agent(case: str) -> tuple[common.Agent, HostEnvironment]:
    make_train, config, env_id = CASES[case]
    env, _ = envs.from_gymnasium(env_id, NUM_ENVS)
    return make_train(config, env=env), env


def loss_terms(metrics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in metrics.items() if "loss" in k or k == "grad_norm"}


@pytest.mark.parametrize("case", list(CASES))
def test_agent_trains_eagerly_on_a_gymnasium_env(case: str) -> None:
    agent, host = host_agent(case)
    assert host_env_of(agent.env) is host
    initial, _ = common.init_state(agent, random.key(0))
    calls_before = host._version
    state, metrics = common.train(agent, random.key(0), compile=False)
    assert int(state.update_count) == UPDATES
    # Every transition went through the gymnasium envs: one reset, then one host step per env step.
    assert host._version - calls_before == 1 + UPDATES * NUM_STEPS
    terms = loss_terms(metrics)
    assert terms, sorted(metrics)
    # The off-policy agents train from the update past learning_starts on; before, nothing is trained.
    waiting = agent.warmup_updates
    assert waiting < UPDATES
    for name, values in terms.items():
        assert values.shape == (UPDATES,), name
        assert bool(torch.isnan(values[:waiting]).all()), (name, values)
        assert bool(torch.isfinite(values[waiting:]).all()), (name, values)
    # SAC and TD3 hold {"actor": ..., "critic": ...}: each network must have moved.
    groups = state.params if isinstance(next(iter(state.params.values())), dict) else {"net": state.params}
    initial_groups = initial.params if groups is state.params else {"net": initial.params}
    for name, params in groups.items():
        moved = [
            not torch.equal(a, b)
            for a, b in zip(tree.leaves(params), tree.leaves(initial_groups[name]), strict=True)
        ]
        assert any(moved), f"{name}: no parameter moved"
    # The host envs are reseeded from the key at reset, so the same key trains the same agent again.
    again, metrics_again = common.train(agent, random.key(0), compile=False)
    assert tree.tree_equal(again.params, state.params)
    assert tree.tree_equal(metrics_again, metrics)


def test_ppo_on_gymnasium_cartpole_has_funrl_cartpoles_shapes_and_metrics() -> None:
    """The bridge is a drop-in: the same train-state layout (env state aside) and metric keys."""
    agent, _ = host_agent("ppo-CartPole")
    pure = ppo.make_train(PPO_TINY)
    state_h, metrics_h = common.train(agent, random.key(1), compile=False, num_updates=2)
    state_p, metrics_p = common.train(pure, random.key(1), compile=False, num_updates=2)
    assert sorted(metrics_h) == sorted(metrics_p)
    for name in metrics_p:
        assert metrics_h[name].shape == metrics_p[name].shape == (2,), name
        assert metrics_h[name].dtype == metrics_p[name].dtype, name

    def layout(state: Any) -> Any:
        return tree.map(lambda x: (tuple(x.shape), x.dtype), state._replace(env_state=None))

    assert layout(state_h) == layout(state_p)
    assert state_h.obs.shape == (NUM_ENVS, 4) and state_h.obs.dtype == torch.float32


def wrapper_chain(env: Any) -> list[str]:
    """The wrapper types from the outside in, down to the base env (the vmap view not counted)."""
    chain = []
    while hasattr(env, "env") and not isinstance(env, HostEnvironment):
        if not isinstance(env, envs.BatchedEnv):
            chain.append(type(env).__name__)
        env = env.env
    return chain


@pytest.mark.parametrize("case", ["ppo-CartPole", "ppo-Pendulum", "dqn-CartPole", "sac-Pendulum"])
def test_host_env_gets_the_wrappers_a_funrl_id_gets(case: str) -> None:
    make_train, config, env_id = CASES[case]
    agent, _ = host_agent(case)
    pure = make_train(dataclasses.replace(config, env_id=env_id))
    assert wrapper_chain(agent.env) == wrapper_chain(pure.env)
    assert "EpisodeStatistics" in wrapper_chain(agent.env)


def test_first_observation_is_gymnasiums_reset_of_the_keys_seed() -> None:
    agent, _ = host_agent("ppo-CartPole")
    state, _ = common.init_state(agent, random.key(5))
    key_init, _ = random.split(random.key(5))
    _, key_env = random.split(key_init)
    reference = gym.make_vec(
        "CartPole-v1",
        NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    obs, _ = reference.reset(seed=int(random.bits(key_env, ())))
    np.testing.assert_array_equal(state.obs.numpy(), obs)


@pytest.mark.parametrize("case", ["ppo-CartPole", "dqn-CartPole", "sac-Pendulum", "td3-Pendulum"])
def test_compile_and_several_seeds_are_clear_errors(case: str) -> None:
    agent, host = host_agent(case)
    with pytest.raises(
        ValueError, match=r"compile: the agent's env is a host gymnasium env .* compile=False"
    ):
        common.train(agent, random.key(0))  # compile defaults to True
    with pytest.raises(ValueError, match=r"key: expected one key of shape \[2\].* own agent"):
        common.train(agent, common.seed_keys(0, 2), compile=False)
    with pytest.raises(ValueError, match=r"key: expected one key of shape \[2\]"):
        common.init_state(agent, common.seed_keys(0, 2))
    assert host._version == 0, "an error was raised after touching the host envs"


def test_compiling_or_vmapping_the_update_itself_is_refused_by_the_bridge() -> None:
    agent, _ = host_agent("ppo-CartPole")
    state, run_key = common.init_state(agent, random.key(0))
    key = random.fold_in(run_key, 0)
    # Under fullgraph (how funrl compiles) dynamo reports the bridge's refusal in its own error.
    refusal = "a host gymnasium env cannot run under torch.compile or a torch.func transform"
    with pytest.raises(RuntimeError, match=refusal):
        torch.compile(agent.update, backend="eager", fullgraph=True)(state, key)
    with pytest.raises(RuntimeError, match=refusal):
        torch.func.vmap(agent.update, in_dims=(None, 0))(state, torch.stack([key, key]))
    # Both refusals came before the host envs moved: the state is still current.
    state, _ = agent.update(state, key)
    assert int(state.update_count) == 1


def test_wrong_env_arguments_are_clear_errors() -> None:
    cartpole, _ = envs.from_gymnasium("CartPole-v1", NUM_ENVS)
    pendulum, _ = envs.from_gymnasium("Pendulum-v1", NUM_ENVS)
    with pytest.raises(TypeError, match=r"env: expected the env itself, got a tuple"):
        ppo.make_train(PPO_TINY, env=envs.from_gymnasium("CartPole-v1", NUM_ENVS))
    with pytest.raises(ValueError, match="num_envs: the config says 2, the given env holds 3"):
        ppo.make_train(PPO_TINY, env=envs.from_gymnasium("CartPole-v1", 3)[0])
    with pytest.raises(ValueError, match=r"env: DQN needs discrete actions, HostEnvironment\(Pendulum-v1\)"):
        dqn.make_train(DQN_TINY, env=pendulum)
    for make_train, config in ((sac.make_train, SAC_TINY), (td3.make_train, TD3_TINY)):
        with pytest.raises(ValueError, match=r"env: expected continuous .* HostEnvironment\(CartPole-v1\)"):
            make_train(config, env=cartpole)


def test_evaluate_on_a_host_env_runs_its_envs_to_the_end_of_an_episode() -> None:
    agent, host = host_agent("ppo-CartPole")
    assert agent.env_params.max_steps_in_episode == 500  # gymnasium's CartPole-v1 time limit
    state, _ = common.train(agent, random.key(0), compile=False, num_updates=1)
    returns = common.evaluate(agent, state.params, random.key(9), episodes=NUM_ENVS)
    assert returns.shape == (NUM_ENVS,)
    assert bool(((returns >= 1) & (returns <= 500)).all()), returns
    with pytest.raises(ValueError, match="episodes: the agent's host gymnasium env runs its 2 envs"):
        common.evaluate(agent, state.params, random.key(9), episodes=5)
