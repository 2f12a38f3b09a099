"""Every registered env through the single-env and SB3 adapters: gymnasium's and SB3's own
``check_env`` pass, the SB3 ``VecEnv`` steps and auto-resets like ``DummyVecEnv`` over the single
adapter, and SB3's PPO trains on it.

The ids are read from ``funrl.envs.registry()`` at collection, so every env registered later is
checked too. The checkers' warnings are findings (gymnasium's passive checker only *warns* about an
observation outside its space, a wrong dtype or a non-deterministic reset), so each test fails
on any warning but the advisory ones below, which judge an env's design, not its conformance.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

import funrl.envs as E
from funrl.testing import assert_trees_close

ENV_IDS = E.registry()

ADVISORY = re.compile(
    "|".join(
        [
            r"Box observation space (minimum|maximum) value is -?infinity",  # CartPole's unbounded velocities
            r"not having a spec",  # no gymnasium.make id, so no alternative render modes to try
            r"symmetric and normalized",  # Pendulum's [-2, 2] torque, as gymnasium's own
            r"is an image but",  # MinAtar's bool grids read as images by SB3
            r"minimal resolution for an image",
            r"unconventional shape",  # bsuite's 2-D grids
        ]
    )
)


def findings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if not ADVISORY.search(str(w.message))]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env_passes(env_id: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(E.to_gymnasium_env(env_id))
    assert findings(caught) == []


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env_passes(env_id: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(E.to_gymnasium_env(env_id), warn=True)
    assert findings(caught) == []


def assert_same_step(ours: tuple, reference: tuple, where: str) -> None:
    for name, a, b in zip(["obs", "rewards", "dones"], ours[:3], reference[:3], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (
            f"{where}: {name} {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        )
        np.testing.assert_array_equal(a, b, err_msg=f"{where}: {name}")
    for i, (a, b) in enumerate(zip(ours[3], reference[3], strict=True)):
        assert a.keys() == b.keys(), f"{where}: infos[{i}] keys {sorted(a)} != {sorted(b)}"
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{where}: infos[{i}][{key!r}]")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_vec_env_steps_and_auto_resets_like_dummy_vec_env(env_id: str) -> None:
    # A short time limit ends (and auto-resets) episodes of every env within the test.
    env, params = E.make(env_id)
    params = dataclasses.replace(params, max_steps_in_episode=5)
    num_envs, seed = 3, 11
    ours = E.to_sb3_vec_env(env, num_envs, params=params, seed=seed)
    reference = DummyVecEnv([lambda: E.to_gymnasium_env(env, params=params) for _ in range(num_envs)])
    reference.seed(seed)
    obs, reference_obs = ours.reset(), reference.reset()
    assert obs.dtype == reference_obs.dtype
    np.testing.assert_array_equal(obs, reference_obs)
    ours.action_space.seed(0)
    episode_ends = 0
    for t in range(10):
        actions = np.stack([ours.action_space.sample() for _ in range(num_envs)])
        out = ours.step(actions)
        assert_same_step(out, reference.step(actions), f"{env_id} step {t}")
        episode_ends += int(out[2].sum())
        assert all(
            ("terminal_observation" in info) == done for info, done in zip(out[3], out[2], strict=True)
        )
    assert episode_ends > 0
    # seed() applies at the next reset, as SB3's VecEnvs do.
    ours.seed(3)
    reference.seed(3)
    np.testing.assert_array_equal(ours.reset(), reference.reset())


@pytest.mark.parametrize("time_limit, truncated", [(5, True), (20, False)])
def test_sb3_time_limit_truncated_only_when_the_limit_ends_the_episode(
    time_limit: int, truncated: bool
) -> None:
    # Catch-bsuite's episodes last exactly 9 steps and end terminated.
    vec_env = E.to_sb3_vec_env("Catch-bsuite", 2, max_episode_steps=time_limit)
    first_obs = vec_env.reset()
    episode_length = min(time_limit, 9)
    for t in range(episode_length):
        obs, _, dones, infos = vec_env.step(np.array([0, 2]))
        assert dones.tolist() == [t == episode_length - 1] * 2
    assert [info["TimeLimit.truncated"] for info in infos] == [truncated] * 2
    for i in range(2):
        assert infos[i]["terminal_observation"].shape == first_obs.shape[1:]
        assert not np.array_equal(infos[i]["terminal_observation"], obs[i])  # obs is the new episode's


def test_make_vec_env_builds_from_the_single_adapter_and_seeds_it_like_ours() -> None:
    # make_vec_env wraps each copy in SB3's Monitor and seeds copy i with seed + i at the first
    # reset, as to_sb3_vec_env does.
    vec_env = make_vec_env(E.to_gymnasium_env, n_envs=2, seed=3, env_kwargs={"env_id_or_env": "CartPole-v1"})
    np.testing.assert_array_equal(vec_env.reset(), E.to_sb3_vec_env("CartPole-v1", 2, seed=3).reset())


@pytest.mark.slow
def test_compiled_sb3_vec_env_equals_eager() -> None:
    # The one compiled graph: CartPole's batched step, auto-reset and key derivation.
    eager = E.to_sb3_vec_env("CartPole-v1", 4, seed=2, max_episode_steps=6)
    compiled = E.to_sb3_vec_env("CartPole-v1", 4, seed=2, max_episode_steps=6, compile=True)
    np.testing.assert_array_equal(compiled.reset(), eager.reset())
    for t in range(8):  # episodes truncate at step 6 and auto-reset
        actions = np.array([(t + i) % 2 for i in range(4)])
        (obs, rewards, dones, infos), expected = compiled.step(actions), eager.step(actions)
        # Inductor may fuse float ops differently from eager: a few ulp apart, flags exactly equal.
        assert_trees_close((obs, rewards), expected[:2], rtol=1e-5, atol=1e-6, name=f"step {t}")
        np.testing.assert_array_equal(dones, expected[2])
        assert [sorted(info) for info in infos] == [sorted(info) for info in expected[3]]


@pytest.mark.slow
def test_sb3_ppo_trains_on_the_vec_env() -> None:
    vec_env = E.to_sb3_vec_env("CartPole-v1", 4)
    model = PPO("MlpPolicy", vec_env, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
    model.learn(128)
    assert model.num_timesteps == 128
    action, _ = model.predict(vec_env.reset(), deterministic=True)
    assert action.shape == (4,) and all(vec_env.action_space.contains(a) for a in action)
