"""The agents' observation/reward normalisation is shared by the env batch, as gymnasium's vector
wrappers (``gymnasium.wrappers.vector.NormalizeObservation`` / ``NormalizeReward``) and thus
CleanRL's and SB3's continuous PPO: one running mean/var updated from all N envs each step.

The agent's own batched env (``make_batched_env``) is stepped with random actions; the same keys
and actions through the same env without normalisation give the raw stream, which a gymnasium
VectorEnv replays under gymnasium's vector wrappers. Statistics and outputs must agree each step.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from funrl import control, envs, random
from funrl import tree as ftree
from funrl.agents import common, ppo
from funrl.envs import wrappers as W


class ReplayVectorEnv(gym.vector.VectorEnv):
    """Replays a recorded ``(obs, reward, terminated, truncated)`` stream to gymnasium's wrappers."""

    def __init__(
        self, reset_obs: np.ndarray, steps: list[tuple[np.ndarray, ...]], mode: AutoresetMode
    ) -> None:
        self.metadata = {"autoreset_mode": mode}
        self.num_envs = reset_obs.shape[0]
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, reset_obs.shape[1:], np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._reset_obs, self._steps, self._t = reset_obs, steps, 0

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self._t = 0
        return self._reset_obs.copy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        obs, reward, terminated, truncated = self._steps[self._t]
        self._t += 1
        return obs.copy(), reward.copy(), terminated.copy(), truncated.copy(), {}


def find_state(state: Any, state_type: type) -> Any:
    """The wrapper state of ``state_type`` in a chain of ``env_state`` links."""
    while not isinstance(state, state_type):
        state = state.env_state
    return state


def random_actions(key: torch.Tensor, benv: Any, params: Any, num_envs: int, steps: int) -> torch.Tensor:
    space = benv.action_space(params)
    if isinstance(space, envs.Box):
        return random.uniform(key, (steps, num_envs, *space.shape), minval=-2.5, maxval=2.5)
    return random.randint(key, (steps, num_envs), 0, space.n)


CASES = {
    # Pendulum never terminates: a 7-step limit puts truncations (discounted-return resets) in the stream.
    "Pendulum-v1": ppo.PPOConfig(env_id="Pendulum-v1", num_envs=4, env_kwargs=(("max_steps_in_episode", 7),)),
    # CartPole terminates often; normalisation asked for explicitly on discrete actions.
    "CartPole-v1": ppo.PPOConfig(env_id="CartPole-v1", num_envs=3, normalize_obs=True, normalize_reward=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_agent_env_statistics_equal_gymnasium_vector_wrappers(case: str) -> None:
    config = CASES[case]
    agent = ppo.make_train(config)
    raw_env, params, _ = common.make_batched_env(
        config.env_id, config.num_envs, None, dict(config.env_kwargs), False, False, config.gamma
    )
    steps = 40
    acts = random_actions(random.key(1), agent.env, params, config.num_envs, steps)
    obs, state = agent.env.reset(random.key(0), params)
    raw_obs, raw_state = raw_env.reset(random.key(0), params)
    outs, raw = [], []
    for t in range(steps):
        out = agent.env.step(random.key(100 + t), state, acts[t], params)
        raw_out = raw_env.step(random.key(100 + t), raw_state, acts[t], params)
        state, raw_state = out[1], raw_out[1]
        outs.append(out)
        raw.append(tuple(x.numpy() for x in (raw_out[0], raw_out[2], raw_out[3], raw_out[4])))
        # Episode statistics stay raw (inside the reward normalisation) and per env.
        torch.testing.assert_close(out[5]["returned_episode_return"], raw_out[5]["returned_episode_return"])
    assert any(bool((te | tr).any()) for _, _, te, tr in raw), "the stream must contain episode ends"

    # funrl auto-resets in the same step (SAME_STEP): the reward wrapper's rule depends on it. The
    # observation wrapper refuses SAME_STEP; its statistics do not depend on the mode.
    gym_obs_env = gym.wrappers.vector.NormalizeObservation(
        ReplayVectorEnv(raw_obs.numpy(), raw, AutoresetMode.NEXT_STEP)
    )
    gym_reward_env = gym.wrappers.vector.NormalizeReward(
        ReplayVectorEnv(raw_obs.numpy(), raw, AutoresetMode.SAME_STEP), gamma=config.gamma
    )
    g_obs, _ = gym_obs_env.reset()
    gym_reward_env.reset()
    np.testing.assert_allclose(obs.numpy(), g_obs, rtol=1e-5, atol=1e-5)
    for t, (f_obs, f_state, f_reward, *_) in enumerate(outs):
        g_obs, *_ = gym_obs_env.step(acts[t].numpy())
        _, g_reward, *_ = gym_reward_env.step(acts[t].numpy())
        obs_rms = find_state(f_state, W.NormalizeObservationState).obs_rms
        return_rms = find_state(f_state, W.NormalizeRewardState).return_rms
        # One set of statistics for the whole batch, not one per env.
        assert obs_rms.mean.shape == raw_obs.shape[1:] and return_rms.var.shape == ()
        np.testing.assert_allclose(float(obs_rms.count), gym_obs_env.obs_rms.count, rtol=1e-6)
        np.testing.assert_allclose(obs_rms.mean.numpy(), gym_obs_env.obs_rms.mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(obs_rms.var.numpy(), gym_obs_env.obs_rms.var, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(float(return_rms.count), gym_reward_env.return_rms.count, rtol=1e-6)
        np.testing.assert_allclose(float(return_rms.var), gym_reward_env.return_rms.var, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(f_obs.numpy(), g_obs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(f_reward.numpy(), g_reward, rtol=1e-4, atol=1e-5)


TINY_CONTINUOUS = ppo.PPOConfig(
    env_id="Pendulum-v1",
    total_steps=3 * 8 * 6,
    num_envs=3,
    num_steps=8,
    update_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8, 8),
)


@pytest.fixture(scope="module")
def continuous_agent() -> common.Agent:
    return ppo.make_train(TINY_CONTINUOUS)


def test_continuous_ppo_statistics_see_every_env_and_persist(continuous_agent: common.Agent) -> None:
    """After ``U`` updates the shared count is ``num_envs * (1 + U * num_steps)`` (+1e-4): every env's
    every step is merged into the one set, and the statistics carry across updates."""
    state, _ = common.train(continuous_agent, random.key(0), compile=False, num_updates=3)
    c = TINY_CONTINUOUS
    obs_rms = find_state(state.env_state, W.NormalizeObservationState).obs_rms
    return_rms = find_state(state.env_state, W.NormalizeRewardState).return_rms
    assert obs_rms.mean.shape == (3,)
    assert float(obs_rms.count) == pytest.approx(c.num_envs * (1 + 3 * c.num_steps) + 1e-4, rel=1e-6)
    assert float(return_rms.count) == pytest.approx(c.num_envs * 3 * c.num_steps + 1e-4, rel=1e-6)


def test_continuous_ppo_vmapped_seeds_equal_single_runs(continuous_agent: common.Agent) -> None:
    """Shared statistics stay per seed under vmap over seeds: seed i of the batch equals its own run."""
    keys = common.seed_keys(5, 2)
    state_v, metrics_v = common.train(continuous_agent, keys, compile=False, num_updates=3)
    for i in range(2):
        state_i, metrics_i = common.train(continuous_agent, keys[i], compile=False, num_updates=3)
        assert ftree.tree_allclose(ftree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-6)
        assert ftree.tree_allclose(ftree.index(state_v.env_state, i), state_i.env_state, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(metrics_v["loss"][:, i], metrics_i["loss"], rtol=1e-4, atol=1e-5)


def test_continuous_ppo_update_is_pure(continuous_agent: common.Agent) -> None:
    state, run_key = common.init_state(continuous_agent, random.key(2))
    before = ftree.map(torch.clone, state)
    a, _ = continuous_agent.update(state, random.fold_in(run_key, 0))
    b, _ = continuous_agent.update(state, random.fold_in(run_key, 0))
    assert ftree.tree_equal(state, before), "update mutated its input state"
    assert ftree.tree_equal(a, b)


def test_evaluate_runs_a_fresh_batch_of_the_requested_size(continuous_agent: common.Agent) -> None:
    state, _ = common.init_state(continuous_agent, random.key(4))
    returns = common.evaluate(continuous_agent, state.params, random.key(9), episodes=5)
    assert returns.shape == (5,) and bool(torch.isfinite(returns).all())
    # Pendulum rewards lie in [-16.27, 0]: a 200-step return is in [-3254, 0].
    assert bool((returns <= 0).all() & (returns >= -16.28 * 200).all())


@pytest.mark.slow
def test_compiled_shared_normalisation_step_equals_eager() -> None:
    """One step of the agent's normalised batched env as one graph equals eager, across episode ends."""
    config = CASES["Pendulum-v1"]
    agent = ppo.make_train(config)
    step = functools.partial(agent.env.step, params=agent.env_params)
    compiled = control.compile(step)
    obs, state = agent.env.reset(random.key(0), agent.env_params)
    eager_state = compiled_state = state
    ends = 0
    for t in range(10):
        # Deterministic actions, beyond the bounds at times (ClipAction).
        action = 2.5 * torch.sin(3.0 * obs.sum(-1, keepdim=True))
        e = step(random.key(t + 1), eager_state, action)
        c = compiled(random.key(t + 1), compiled_state, action)
        assert ftree.tree_allclose(c, e, rtol=1e-5, atol=1e-5)
        obs, eager_state, compiled_state = e[0], e[1], c[1]
        ends += int(e[4].sum())
    assert ends > 0, "the steps must cross an episode end"
