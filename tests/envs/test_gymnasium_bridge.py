"""to_gymnasium (the VectorEnv contract of gymnasium 1.x) and from_gymnasium (host envs behind
funrl's signature, refusing compile and vmap)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv
from gymnasium.vector import AutoresetMode

import funrl.envs as E
from funrl import random
from funrl.envs import wrappers as W
from funrl.envs.gymnasium_bridge import FunrlVectorEnv, host_env_of, space_from_gymnasium, space_to_gymnasium

CATCH_EPISODE = 9  # Catch-bsuite (10 rows): every episode lasts exactly 9 steps


def catch_actions(vec: gym.vector.VectorEnv, t: int) -> np.ndarray:
    return np.array([(t + i) % 3 for i in range(vec.num_envs)], dtype=np.int64)


# ------------------------------------------------------------------------------------------------
# to_gymnasium
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["Catch-bsuite", "Breakout-MinAtar", "CartPole-v1"])
def test_vector_env_spaces_shapes_and_dtypes(env_id: str) -> None:
    vec = E.to_gymnasium(env_id, 3, seed=0)
    assert isinstance(vec, gym.vector.VectorEnv) and vec.num_envs == 3
    assert vec.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert vec.observation_space.shape == (3, *vec.single_observation_space.shape)
    assert vec.action_space.shape == (3, *vec.single_action_space.shape)
    obs, info = vec.reset(seed=5)
    assert isinstance(info, dict)
    assert obs.dtype == vec.single_observation_space.dtype and obs in vec.observation_space
    vec.action_space.seed(0)
    for _ in range(20):
        obs, reward, terminated, truncated, info = vec.step(vec.action_space.sample())
        assert obs in vec.observation_space
        assert reward.shape == (3,) and reward.dtype == np.float64
        assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and terminated.shape == (3,)


def test_reset_seed_determinism() -> None:
    def trajectory(seed: int) -> list:
        vec = E.to_gymnasium("Catch-bsuite", 4, seed=123)
        out = [vec.reset(seed=seed)[0]]
        for t in range(25):
            out.append(vec.step(catch_actions(vec, t))[0])
        return out

    a, b, c = trajectory(1), trajectory(1), trajectory(2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    # A reset without a seed continues the stream (a new draw), as gymnasium's envs do.
    vec = E.to_gymnasium("Catch-bsuite", 64, seed=7)
    first, _ = vec.reset()
    again, _ = vec.reset()
    assert not np.array_equal(first, again)


def test_next_step_autoreset_semantics() -> None:
    vec = E.to_gymnasium("Catch-bsuite", 3, seed=0)
    vec.reset(seed=0)
    for t in range(CATCH_EPISODE):
        obs, reward, terminated, truncated, _ = vec.step(catch_actions(vec, t))
    # The ending step returns the terminal observation: ball in the paddle row.
    assert terminated.all() and not truncated.any()
    assert (obs[:, 9].sum(-1) >= 1).all() and (obs[:, :9].sum((-1, -2)) == 0).all()
    assert set(reward.tolist()) <= {-1.0, 1.0}
    # The next call resets: first observation of a new episode, reward 0, flags False.
    obs, reward, terminated, truncated, _ = vec.step(catch_actions(vec, 99))
    assert (reward == 0).all() and not terminated.any() and not truncated.any()
    assert (obs[:, 0].sum(-1) == 1).all() and (obs[:, 9, 2] == 1).all()  # ball on top, paddle centred


def test_same_step_autoreset_equals_funrl_batched_step() -> None:
    env, params = E.make("Catch-bsuite")
    vec = E.to_gymnasium("Catch-bsuite", 3, seed=0, autoreset_mode=AutoresetMode.SAME_STEP)
    obs, _ = vec.reset(seed=11)
    # The bridge's documented key schedule: key(seed), split once per call, then per env.
    key = random.key(11)
    key, sub = random.split(key)
    ref_obs, state = torch.func.vmap(env.reset, in_dims=(0, None))(random.split(sub, 3), params)
    assert np.array_equal(obs, ref_obs.numpy())
    ends = 0
    for t in range(20):
        actions = catch_actions(vec, t)
        obs, reward, terminated, truncated, info = vec.step(actions)
        key, sub = random.split(key)
        ref = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))(
            random.split(sub, 3), state, torch.tensor(actions), params
        )
        state = ref[1]
        assert np.array_equal(obs, ref[0].numpy()) and np.array_equal(reward, ref[2].numpy())
        assert np.array_equal(terminated, ref[3].numpy()) and np.array_equal(truncated, ref[4].numpy())
        if terminated.any():
            ends += 1
            assert np.array_equal(info["_final_obs"], terminated | truncated)
            for i in np.flatnonzero(info["_final_obs"]):
                assert np.array_equal(info["final_obs"][i], ref[5]["final_obs"][i].numpy())
        else:
            assert "final_obs" not in info
    assert ends == 2


def test_gymnasium_vector_wrappers_run_on_it_and_agree_with_funrl_statistics() -> None:
    base = W.EpisodeStatistics(E.make("Catch-bsuite")[0])
    vec = FunrlVectorEnv(base, base.default_params, 4, seed=0)
    vec = gym.wrappers.vector.RecordEpisodeStatistics(vec)
    vec = gym.wrappers.vector.NormalizeReward(vec, gamma=0.9)
    vec = gym.wrappers.vector.NormalizeObservation(vec)
    vec = gym.wrappers.vector.DtypeObservation(vec, np.float64)
    obs, _ = vec.reset(seed=3)
    assert obs.dtype == np.float64
    finished = 0
    for t in range(30):
        obs, reward, terminated, truncated, info = vec.step(catch_actions(vec, t))
        assert np.isfinite(obs).all() and np.isfinite(reward).all()
        if "episode" in info:
            done = info["_episode"]
            finished += int(done.sum())
            # gymnasium's record of each finished episode equals funrl's EpisodeStatistics info.
            np.testing.assert_array_equal(info["episode"]["l"][done], info["returned_episode_length"][done])
            np.testing.assert_allclose(info["episode"]["r"][done], info["returned_episode_return"][done])
            np.testing.assert_array_equal(info["returned_episode"], done)
    assert finished == 12


def test_flatten_and_clip_vector_wrappers() -> None:
    vec = gym.wrappers.vector.FlattenObservation(E.to_gymnasium("Breakout-MinAtar", 2, seed=0))
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (2, 400)
    obs, *_ = vec.step(np.array([0, 5]))
    assert obs.shape == (2, 400)


class Drift(E.Environment):
    """A continuous-action toy: the observation is the last action (so clipping is visible)."""

    @property
    def default_params(self):
        return E.EnvParams(max_steps_in_episode=5)

    def reset_env(self, key, params):
        return torch.zeros(2), torch.zeros((), dtype=torch.int64)

    def step_env(self, key, state, action, params):
        time = state + 1
        return action.clone(), time, -action.square().sum(), torch.tensor(False), time >= 5, {}

    def observation_space(self, params=None):
        return E.Box(low=-1.0, high=1.0, shape=(2,))

    def action_space(self, params=None):
        return E.Box(low=-1.0, high=1.0, shape=(2,))


def test_continuous_actions_and_gymnasium_action_wrappers() -> None:
    vec = gym.wrappers.vector.ClipAction(E.to_gymnasium(Drift(), 3, seed=0))
    vec.reset(seed=0)
    obs, reward, terminated, truncated, _ = vec.step(np.array([[3.0, -0.5], [-7.0, 0.25], [0.0, 9.0]]))
    np.testing.assert_array_equal(obs, np.array([[1.0, -0.5], [-1.0, 0.25], [0.0, 1.0]], dtype=np.float32))
    rescaled = gym.wrappers.vector.RescaleAction(
        E.to_gymnasium(Drift(), 2, seed=0), min_action=np.float32(0.0), max_action=np.float32(4.0)
    )
    rescaled.reset(seed=0)
    obs, *_ = rescaled.step(np.array([[0.0, 4.0], [2.0, 3.0]]))
    np.testing.assert_allclose(obs, np.array([[-1.0, 1.0], [0.0, 0.5]]))
    for _ in range(4):
        obs, reward, terminated, truncated, _ = rescaled.step(np.full((2, 2), 2.0))
    assert truncated.all() and not terminated.any()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda v: v.step(np.zeros(3, dtype=np.int64)), ValueError, r"actions: expected shape \(2,\)"),
        (lambda v: v.step(np.zeros(2, dtype=np.float32)), TypeError, "actions: expected integers"),
        (lambda v: v.reset(seed=1.5), TypeError, "seed: expected an int or None"),
    ],
)
def test_vector_env_bad_input(call, error, match) -> None:
    vec = E.to_gymnasium("Catch-bsuite", 2)
    vec.reset(seed=0)
    with pytest.raises(error, match=match):
        call(vec)


def test_to_gymnasium_bad_arguments() -> None:
    with pytest.raises(RuntimeError, match="call reset"):
        E.to_gymnasium("Catch-bsuite", 2).step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="num_envs: expected a positive int"):
        E.to_gymnasium("Catch-bsuite", 0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        E.to_gymnasium("Catch-bsuite", 2, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(TypeError, match="env_id_or_env"):
        E.to_gymnasium(42, 2)
    with pytest.raises(ValueError, match="unknown id"):
        E.to_gymnasium("NoSuchEnv-v0", 2)


def test_space_round_trip() -> None:
    for space in [
        E.Discrete(4),
        E.Box(low=-1.0, high=2.0, shape=(3,)),
        E.Box(low=(-1.0, 0.0), high=(1.0, 5.0), shape=(2,)),
        E.Box(low=False, high=True, shape=(10, 10, 4), dtype=torch.bool),
    ]:
        g = space_to_gymnasium(space)
        back = space_from_gymnasium(g)
        assert back.shape == space.shape and back.dtype == space.dtype
        if isinstance(space, E.Box):
            assert torch.equal(back.low_tensor(), space.low_tensor()) and torch.equal(
                back.high_tensor(), space.high_tensor()
            )
    with pytest.raises(ValueError, match="start=1"):
        space_from_gymnasium(gym.spaces.Discrete(3, start=1))
    with pytest.raises(TypeError, match="expected a gymnasium Box or Discrete"):
        space_from_gymnasium(gym.spaces.MultiBinary(3))


# ------------------------------------------------------------------------------------------------
# to_gymnasium_env (one gymnasium.Env) and to_sb3_vec_env (gymnasium's and SB3's check_env and the
# equality with DummyVecEnv, for every registered id, are in test_gymnasium_check_env.py)
# ------------------------------------------------------------------------------------------------


def test_single_env_follows_the_documented_key_stream() -> None:
    env, params = E.make("CartPole-v1")
    single = E.to_gymnasium_env("CartPole-v1")
    obs, info = single.reset(seed=4)
    # Call n since reset(seed=4) draws from fold_in(key(4), n): the reset is call 0.
    expected_obs, state = env.reset(random.fold_in(random.key(4), 0), params)
    np.testing.assert_array_equal(obs, expected_obs.numpy())
    for t in range(12):
        obs, reward, terminated, truncated, info = single.step(t % 2)
        expected_obs, state, expected_reward, expected_terminated, expected_truncated, _ = env.step_env(
            random.fold_in(random.key(4), t + 1), state, torch.tensor(t % 2), params
        )
        np.testing.assert_array_equal(obs, expected_obs.numpy())
        assert (reward, terminated, truncated) == (
            float(expected_reward),
            bool(expected_terminated),
            bool(expected_truncated),
        )
    # A reset without a seed continues the count; the constructor's seed starts it.
    np.testing.assert_array_equal(
        single.reset()[0], env.reset(random.fold_in(random.key(4), 13), params)[0].numpy()
    )
    np.testing.assert_array_equal(
        E.to_gymnasium_env("CartPole-v1", seed=4).reset()[0], single.reset(seed=4)[0]
    )
    assert not np.array_equal(single.reset(seed=5)[0], single.reset(seed=4)[0])


def test_single_env_returns_numpy_and_ends_episodes_like_gymnasium_envs() -> None:
    catch = E.to_gymnasium_env("Catch-bsuite")
    obs, info = catch.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and info == {}
    for t in range(CATCH_EPISODE):
        obs, reward, terminated, truncated, info = catch.step(np.int64(1))
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        assert isinstance(info, dict) and terminated == (t == CATCH_EPISODE - 1)
    # No auto-reset: the ending step returns the last observation (the ball on the bottom row).
    assert obs[-1].sum() >= 1 and obs in catch.observation_space
    truncating = E.to_gymnasium_env("Catch-bsuite", max_episode_steps=3)
    truncating.reset(seed=0)
    assert [truncating.step(1)[2:4] for _ in range(3)] == [(False, False), (False, False), (False, True)]
    minatar = E.to_gymnasium_env("Breakout-MinAtar")
    assert minatar.reset(seed=0)[0].dtype == np.bool_
    pendulum = E.to_gymnasium_env("Pendulum-v1")
    pendulum.reset(seed=0)
    assert pendulum.step(np.array([1.5], dtype=np.float32))[0].dtype == np.float32
    assert pendulum.render_mode is None
    pendulum.close()
    with pytest.raises(RuntimeError, match="call reset"):
        pendulum.step(np.array([0.0], dtype=np.float32))


@pytest.mark.parametrize(
    "env_id, call, error, match",
    [
        ("Catch-bsuite", lambda e: e.step(1.0), TypeError, "action: expected integers"),
        ("Catch-bsuite", lambda e: e.step(3), ValueError, r"action: expected values in \[0, 3\)"),
        ("Catch-bsuite", lambda e: e.step(np.array([1, 1])), ValueError, r"action: expected shape \[\]"),
        ("Pendulum-v1", lambda e: e.step(np.array([2.5])), ValueError, "action: expected values in"),
        ("Pendulum-v1", lambda e: e.step(np.array([np.nan])), ValueError, "action: expected finite values"),
        ("Catch-bsuite", lambda e: e.reset(seed="1"), TypeError, "seed: expected an int, got str"),
        ("Catch-bsuite", lambda e: e.reset(options={"x": 1}), ValueError, r"options: .* got \['x'\]"),
    ],
)
def test_single_env_bad_input(env_id, call, error, match) -> None:
    env = E.to_gymnasium_env(env_id)
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        call(env)


def test_to_gymnasium_env_bad_arguments() -> None:
    with pytest.raises(RuntimeError, match="call reset"):
        E.to_gymnasium_env("Catch-bsuite").step(0)
    with pytest.raises(TypeError, match="env_id_or_env"):
        E.to_gymnasium_env(42)
    with pytest.raises(TypeError, match="seed: expected an int"):
        E.to_gymnasium_env("Catch-bsuite", seed=True)
    with pytest.raises(TypeError, match="make_kwargs: only for an env id"):
        E.to_gymnasium_env(E.make("Catch-bsuite")[0], max_episode_steps=3)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda v: v.step(np.zeros(3, dtype=np.int64)), ValueError, r"actions: expected shape \(2,\)"),
        (lambda v: v.step(np.zeros(2, dtype=np.float32)), TypeError, "action: expected integers"),
        (lambda v: v.step(np.array([0, 5])), ValueError, r"actions\[1\]: expected values in \[0, 3\)"),
        (
            lambda v: v.set_attr("params", None, indices=[0]),
            ValueError,
            "indices: the copies share one funrl env",
        ),
        (
            lambda v: (v.set_options({"x": 1}), v.reset()),
            ValueError,
            "options: funrl envs take no reset options",
        ),
    ],
)
def test_sb3_vec_env_bad_input(call, error, match) -> None:
    vec = E.to_sb3_vec_env("Catch-bsuite", 2)
    vec.reset()
    with pytest.raises(error, match=match):
        call(vec)


def test_sb3_vec_env_names_the_first_copy_with_an_out_of_range_continuous_action() -> None:
    vec = E.to_sb3_vec_env("Pendulum-v1", 3)
    vec.reset()
    with pytest.raises(ValueError, match=r"actions\[1\]: expected values in \[-2.0, 2.0\], got \[2.5\]"):
        vec.step(np.array([[0.0], [2.5], [0.0]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"actions\[2\]: expected finite values"):
        vec.step(np.array([[0.0], [0.0], [np.nan]], dtype=np.float32))


def test_sb3_vec_env_attributes_and_arguments() -> None:
    vec = E.to_sb3_vec_env("Catch-bsuite", 3)
    assert vec.get_attr("render_mode") == [None] * 3 and vec.render_mode is None
    assert vec.get_attr("params", indices=[1]) == [vec.params]
    assert vec.env_is_wrapped(gym.Wrapper) == [False] * 3
    assert [obs.shape for obs in vec.env_method("reset", indices=[0, 2])] == [(3, 10, 5)] * 2
    vec.set_attr("params", vec.params)
    with pytest.raises(RuntimeError, match="call reset"):
        E.to_sb3_vec_env("Catch-bsuite", 2).step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="num_envs: expected a positive int"):
        E.to_sb3_vec_env("Catch-bsuite", 0)
    with pytest.raises(TypeError, match="seed: expected an int"):
        E.to_sb3_vec_env("Catch-bsuite", 2, seed=1.0)


def test_funrl_imports_without_sb3_and_to_sb3_vec_env_says_what_is_missing() -> None:
    script = (
        "import sys; sys.modules['stable_baselines3'] = None\n"
        "import funrl, funrl.envs\n"
        "try:\n"
        "    funrl.envs.to_sb3_vec_env\n"
        "except ImportError as err:\n"
        "    print('ImportError:', err)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ImportError: funrl.envs.to_sb3_vec_env needs stable-baselines3" in out.stdout
    assert "pip install stable-baselines3" in out.stdout


# ------------------------------------------------------------------------------------------------
# from_gymnasium
# ------------------------------------------------------------------------------------------------


def test_from_gymnasium_matches_gymnasium_same_step_vector_env() -> None:
    env, params = E.from_gymnasium("CartPole-v1", 3)
    key = random.key(4)
    obs, state = env.reset(key, params)
    seed = int(random.bits(key, ()))
    ref = gym.make_vec(
        "CartPole-v1", 3, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
    )
    ref_obs, _ = ref.reset(seed=seed)
    np.testing.assert_array_equal(obs.numpy(), ref_obs)
    assert obs.dtype == torch.float32 and obs.shape == (3, 4)
    ends = 0
    for t in range(60):
        actions = np.array([(t // 3 + i) % 2 for i in range(3)])
        obs, state, reward, terminated, truncated, info = env.step(
            random.key(t), state, torch.tensor(actions), params
        )
        r_obs, r_reward, r_term, r_trunc, r_info = ref.step(actions)
        np.testing.assert_array_equal(obs.numpy(), r_obs)
        np.testing.assert_array_equal(reward.numpy(), r_reward.astype(np.float32))
        np.testing.assert_array_equal(terminated.numpy(), r_term)
        np.testing.assert_array_equal(truncated.numpy(), r_trunc)
        done = r_term | r_trunc
        for i in range(3):
            expected = r_info["final_obs"][i] if done[i] else r_obs[i]
            np.testing.assert_array_equal(info["final_obs"][i].numpy(), expected)
        ends += int(done.sum())
    assert ends >= 3


def test_from_gymnasium_round_trip_equals_funrl() -> None:
    """funrl -> gymnasium (SAME_STEP) -> funrl gives funrl's own batched results back."""
    vec = E.to_gymnasium("Catch-bsuite", 2, seed=0, autoreset_mode=AutoresetMode.SAME_STEP)
    host, params = E.from_gymnasium(vec, 2)
    obs, state = host.reset(random.key(0), params)
    direct = E.to_gymnasium("Catch-bsuite", 2, seed=0, autoreset_mode=AutoresetMode.SAME_STEP)
    d_obs, _ = direct.reset(seed=int(random.bits(random.key(0), ())))
    np.testing.assert_array_equal(obs.numpy(), d_obs)
    for t in range(12):
        a = torch.tensor([t % 3, (t + 1) % 3])
        obs, state, reward, terminated, *_ = host.step(random.key(t), state, a, params)
        d_obs, d_reward, d_term, *_ = direct.step(a.numpy())
        np.testing.assert_array_equal(obs.numpy(), d_obs)
        np.testing.assert_array_equal(terminated.numpy(), d_term)


def test_from_gymnasium_reset_key_determinism_and_funrl_wrappers() -> None:
    env, params = E.from_gymnasium("CartPole-v1", 2)
    a, _ = env.reset(random.key(1), params)
    b, _ = env.reset(random.key(2), params)
    c, _ = env.reset(random.key(1), params)
    assert torch.equal(a, c) and not torch.equal(a, b)
    wrapped = W.EpisodeStatistics(W.NormalizeObservation(env))
    obs, state = wrapped.reset(random.key(0))
    lengths = []
    for t in range(80):
        obs, state, _, _, _, info = wrapped.step(random.key(t), state, torch.tensor([t % 2, 1 - t % 2]))
        lengths += info["returned_episode_length"][info["returned_episode"]].tolist()
    assert obs.shape == (2, 4) and len(lengths) >= 2 and all(8 <= n <= 80 for n in lengths)


def test_from_gymnasium_factory_and_stale_state() -> None:
    env, params = E.from_gymnasium(lambda: gym.make("CartPole-v1"), 2)
    _, state0 = env.reset(random.key(0), params)
    _, state1, *_ = env.step(random.key(1), state0, torch.tensor([0, 1]), params)
    with pytest.raises(ValueError, match="state: stale handle"):
        env.step(random.key(2), state0, torch.tensor([0, 1]), params)
    env.step(random.key(2), state1, torch.tensor([0, 1]), params)
    with pytest.raises(NotImplementedError, match="no raw step_env"):
        env.step_env(random.key(2), state1, torch.tensor([0, 1]), params)


def test_from_gymnasium_refuses_vmap_and_compile() -> None:
    env, params = E.from_gymnasium("CartPole-v1", 2)
    _, state = env.reset(random.key(0), params)
    with pytest.raises(RuntimeError, match="cannot run under torch.compile or a torch.func transform"):
        torch.func.vmap(lambda k: env.reset(k, params))(random.split(random.key(0), 2))

    def step(key, state, action):
        return env.step(key, state, action, params)

    with pytest.raises(RuntimeError, match="cannot run under torch.compile or a torch.func transform"):
        torch.compile(step, backend="eager")(random.key(1), state, torch.tensor([0, 1]))
    # The refusal happened before touching the host env: the handle is still current.
    env.step(random.key(1), state, torch.tensor([0, 1]), params)


def test_validate_refuses_compile_too() -> None:
    env = W.Validate(E.make("Catch-bsuite")[0])
    _, state = env.reset(random.key(0))
    with pytest.raises(RuntimeError, match="cannot run under torch.compile or a torch.func transform"):
        torch.compile(lambda s: env.step(random.key(1), s, torch.tensor(1)), backend="eager")(state)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda e, s: e.step(random.key(0), s, torch.tensor([0, 1, 0]), None),
            ValueError,
            r"action: expected shape \[2\]",
        ),
        (
            lambda e, s: e.step(random.key(0), s, torch.tensor([0.0, 1.0]), None),
            TypeError,
            "action: expected an integer",
        ),
        (lambda e, s: e.step(random.key(0), s, [0, 1], None), TypeError, "action: expected a torch.Tensor"),
        (
            lambda e, s: e.step(random.key(0), "state", torch.tensor([0, 1]), None),
            TypeError,
            "state: expected the HostState",
        ),
    ],
)
def test_from_gymnasium_bad_input(call, error, match) -> None:
    env, _ = E.from_gymnasium("CartPole-v1", 2)
    _, state = env.reset(random.key(0))
    with pytest.raises(error, match=match):
        call(env, state)


def test_from_gymnasium_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs: expected a positive int"):
        E.from_gymnasium("CartPole-v1", 0)
    with pytest.raises(TypeError, match="id_or_env"):
        E.from_gymnasium(gym.make("CartPole-v1"), 1)
    next_step = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="autoreset_mode SAME_STEP"):
        E.from_gymnasium(next_step, 2)
    with pytest.raises(ValueError, match="the vector env has 2 envs"):
        E.from_gymnasium(next_step, 3)


def test_from_gymnasium_params_report_the_specs_time_limit() -> None:
    by_id, params = E.from_gymnasium("CartPole-v1", 2)
    assert params.max_steps_in_episode == 500 == by_id.default_params.max_steps_in_episode
    by_factory, _ = E.from_gymnasium(lambda: gym.make("Pendulum-v1"), 2)
    assert by_factory.default_params.max_steps_in_episode == 200
    unlimited, _ = E.from_gymnasium(CartPoleEnv, 1)  # no registry spec, no time limit
    no_spec, _ = E.from_gymnasium(E.to_gymnasium("CartPole-v1", 1, autoreset_mode=AutoresetMode.SAME_STEP), 1)
    assert unlimited.default_params.max_steps_in_episode == 0 == no_spec.default_params.max_steps_in_episode


def test_host_env_of_finds_the_host_env_through_wrappers() -> None:
    host, _ = E.from_gymnasium("CartPole-v1", 2)
    assert host_env_of(host) is host
    assert host_env_of(W.EpisodeStatistics(W.NormalizeObservation(host))) is host
    pure, _ = E.make("CartPole-v1")
    assert host_env_of(pure) is None
    assert host_env_of(E.vmap(W.EpisodeStatistics(pure), 2)) is None
    assert host_env_of(None) is None
