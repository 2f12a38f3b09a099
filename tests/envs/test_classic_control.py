"""Classic control: conformance with gymnasium's definitions, purity, vmap, domain randomisation.

Conformance sets gymnasium's state to funrl's (float32 values, read as float64 by gymnasium) and
compares one transition at a time, so each comparison measures one step's float32-vs-float64
difference; a termination flag may differ only where gymnasium's next state lies within float32
rounding of the threshold (the helper says how close, and the tests bound how often).
"""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import funrl.envs as E
from funrl import random
from funrl import tree as ftree
from funrl.testing import assert_pure, assert_vmap_equals_loop


def f32(low: float, high: float) -> st.SearchStrategy[float]:
    """Floats in ``[low, high]`` that float32 represents exactly (funrl's state dtype)."""
    return st.floats(low, high, allow_nan=False).map(lambda v: float(np.float32(v)))


def gym_env(env_id: str, **kwargs):
    env = gymnasium.make(env_id, disable_env_checker=True, **kwargs)
    env.reset(seed=0)
    return env


def set_gym_time(env, elapsed: int) -> None:
    """Put gymnasium's TimeLimit wrapper at ``elapsed`` steps (the funrl state's ``time``)."""
    wrapper = env
    while not isinstance(wrapper, gymnasium.wrappers.TimeLimit):
        wrapper = wrapper.env
    wrapper._elapsed_steps = elapsed


def as_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# ----------------------------------------------------------------------------------- CartPole


def cartpole_state(x, x_dot, theta, theta_dot, time=0):
    f = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    return E.cartpole.CartPoleState(
        f(x), f(x_dot), f(theta), f(theta_dot), torch.tensor(time, dtype=torch.int32)
    )


def cartpole_to_gym(env, state) -> None:
    env.unwrapped.state = np.array([float(v) for v in state[:4]], dtype=np.float64)
    env.unwrapped.steps_beyond_terminated = None
    set_gym_time(env, int(state.time))


def compare_cartpole_step(genv, env, params, state, action: int) -> tuple[bool, E.cartpole.CartPoleState]:
    """One step from ``state`` in both; returns (gymnasium's terminated, funrl's next state)."""
    cartpole_to_gym(genv, state)
    g_obs, g_rew, g_term, g_trunc, _ = genv.step(action)
    obs, nstate, rew, term, trunc, _ = env.step_env(random.key(0), state, torch.tensor(action), params)
    np.testing.assert_allclose(as_np(obs), g_obs, rtol=1e-5, atol=1e-5)
    assert float(rew) == g_rew
    assert bool(trunc) == g_trunc
    if bool(term) != g_term:
        # Only a float32 rounding at the threshold may flip the flag.
        x, theta = genv.unwrapped.state[0], genv.unwrapped.state[2]
        margin = min(abs(abs(x) - 2.4), abs(abs(theta) - 12 * 2 * math.pi / 360))
        assert margin < 1e-5, f"terminated differs away from the threshold (margin {margin})"
    return g_term, nstate


@given(
    x=f32(-2.4, 2.4),
    x_dot=f32(-3.0, 3.0),
    theta=f32(-0.2094, 0.2094),
    theta_dot=f32(-3.5, 3.5),
    action=st.integers(0, 1),
    time=st.integers(0, 499),
    sutton_barto=st.booleans(),
)
def test_cartpole_step_matches_gymnasium(x, x_dot, theta, theta_dot, action, time, sutton_barto):
    genv = gym_env("CartPole-v1", sutton_barto_reward=sutton_barto)
    env, params = E.make("CartPole-v1", sutton_barto_reward=sutton_barto)
    compare_cartpole_step(genv, env, params, cartpole_state(x, x_dot, theta, theta_dot, time), action)


@pytest.mark.parametrize(
    "state, action, terminated",
    [
        # float32(2.4) lies above 2.4: terminated (a float32 comparison would say no).
        ((2.4, 0.0, 0.0, 0.0), 1, True),
        ((np.nextafter(np.float32(2.4), np.float32(0)), 0.0, 0.0, 0.0), 1, False),
        ((-2.4, 0.0, 0.0, 0.0), 0, True),
        ((-2.3, -5.0, 0.0, 0.0), 0, False),  # x + tau * x_dot = -2.4 in float64: not beyond
        ((0.0, 0.0, 0.2094395, 0.0), 1, False),  # float32 just below 12 degrees
        ((0.0, 0.0, 0.20943952, 0.0), 1, True),  # float32 just above 12 degrees
        ((0.0, 0.0, -0.2094395, -0.001), 0, True),
    ],
)
def test_cartpole_termination_edges(state, action, terminated):
    genv = gym_env("CartPole-v1")
    env, params = E.make("CartPole-v1")
    g_term, _ = compare_cartpole_step(genv, env, params, cartpole_state(*state), action)
    assert g_term == terminated
    term = env.step_env(random.key(0), cartpole_state(*state), torch.tensor(action), params)[3]
    assert bool(term) == terminated


def test_cartpole_whole_random_episodes_match_gymnasium():
    genv = gym_env("CartPole-v1")
    env, params = E.make("CartPole-v1")
    key = random.key(42)
    lengths = []
    for episode in range(20):
        _, state = env.reset(random.fold_in(key, episode), params)
        rng = np.random.default_rng(episode)
        for _ in range(500):
            action = int(rng.integers(2))
            g_term, state = compare_cartpole_step(genv, env, params, state, action)
            if g_term or int(state.time) >= 500:
                break
        lengths.append(int(state.time))
    # A random policy balances for a few dozen steps (gymnasium: about 22 on average).
    assert 10 < np.mean(lengths) < 50


def test_cartpole_truncates_at_max_steps():
    genv = gym_env("CartPole-v1")
    env, params = E.make("CartPole-v1")
    state = cartpole_state(0.0, 0.0, 0.0, 0.0, time=499)
    compare_cartpole_step(genv, env, params, state, 1)
    _, _, _, _, truncated, _ = env.step_env(random.key(0), state, torch.tensor(1), params)
    assert bool(truncated)
    env5, params5 = E.make("CartPole-v1", max_episode_steps=5)
    state = cartpole_state(0.0, 0.0, 0.0, 0.0, time=3)
    assert not bool(env5.step_env(random.key(0), state, torch.tensor(0), params5)[4])
    state = cartpole_state(0.0, 0.0, 0.0, 0.0, time=4)
    assert bool(env5.step_env(random.key(0), state, torch.tensor(0), params5)[4])


def test_cartpole_semi_implicit_matches_gymnasium():
    genv = gym_env("CartPole-v1")
    genv.unwrapped.kinematics_integrator = "semi-implicit euler"
    env, params = E.make("CartPole-v1", kinematics_integrator="semi-implicit euler")
    compare_cartpole_step(genv, env, params, cartpole_state(0.1, -0.5, 0.05, 1.0, 7), 0)


def test_cartpole_spaces_match_gymnasium():
    genv = gym_env("CartPole-v1")
    env, params = E.make("CartPole-v1")
    space = env.observation_space(params)
    np.testing.assert_array_equal(as_np(space.high_tensor()), genv.observation_space.high)
    np.testing.assert_array_equal(as_np(space.low_tensor()), genv.observation_space.low)
    assert env.action_space(params).n == genv.action_space.n


# ------------------------------------------------------ Acrobot, MountainCar(Continuous), Pendulum


def tensor_state(cls, values, time):
    fields = [torch.tensor(v, dtype=torch.float32) for v in values]
    return cls(*fields, torch.tensor(time, dtype=torch.int32))


STATE_CLASSES = {
    "Acrobot-v1": E.acrobot.AcrobotState,
    "MountainCar-v0": E.mountain_car.MountainCarState,
    "MountainCarContinuous-v0": E.mountain_car.MountainCarState,
    "Pendulum-v1": E.pendulum.PendulumState,
}
OBS_ATOL = {"Acrobot-v1": 1e-4, "MountainCar-v0": 1e-6, "MountainCarContinuous-v0": 1e-6, "Pendulum-v1": 1e-5}


def flag_margin(env_id: str, genv) -> float:
    """How close gymnasium's next state is to the termination boundary."""
    s = genv.unwrapped.state
    if env_id == "Acrobot-v1":
        return abs(-math.cos(s[0]) - math.cos(s[1] + s[0]) - 1.0)
    goal = genv.unwrapped.goal_position
    return min(abs(s[0] - goal), abs(s[1] - genv.unwrapped.goal_velocity))


def compare_step(env_id, genv, env, params, state, action):
    """One step from ``state`` in funrl and gymnasium; returns (funrl's next state, gym's flag)."""
    genv.unwrapped.state = np.array([float(v) for v in state[:-1]], dtype=np.float64)
    set_gym_time(genv, int(state.time))
    if isinstance(env.action_space(params), E.Box):
        t_action = torch.tensor([action], dtype=torch.float32)
        g_action = np.array([np.float32(action)], dtype=np.float32)
    else:
        t_action, g_action = torch.tensor(action), int(action)
    g_obs, g_rew, g_term, g_trunc, _ = genv.step(g_action)
    obs, nstate, rew, term, trunc, _ = env.step_env(random.key(0), state, t_action, params)
    np.testing.assert_allclose(as_np(obs), g_obs, rtol=1e-5, atol=OBS_ATOL[env_id])
    np.testing.assert_allclose(float(rew), float(g_rew), rtol=1e-5, atol=1e-5)
    assert bool(trunc) == g_trunc
    if bool(term) != g_term:
        margin = flag_margin(env_id, genv)
        assert margin < 1e-5, f"terminated differs away from the boundary (margin {margin})"
    return nstate, g_term


@given(
    t1=f32(-math.pi, math.pi),
    t2=f32(-math.pi, math.pi),
    d1=f32(-4 * math.pi, 4 * math.pi),
    d2=f32(-9 * math.pi, 9 * math.pi),
    action=st.integers(0, 2),
    time=st.integers(0, 499),
    book=st.sampled_from(["book", "nips"]),
)
def test_acrobot_step_matches_gymnasium(t1, t2, d1, d2, action, time, book):
    genv = gym_env("Acrobot-v1")
    genv.unwrapped.book_or_nips = book
    env, params = E.make("Acrobot-v1", book_or_nips=book)
    compare_step(
        "Acrobot-v1", genv, env, params, tensor_state(E.acrobot.AcrobotState, (t1, t2, d1, d2), time), action
    )


@given(
    position=f32(-1.2, 0.6),
    velocity=f32(-0.07, 0.07),
    action=st.integers(0, 2),
    time=st.integers(0, 199),
    goal_velocity=st.sampled_from([0.0, 0.01]),
)
def test_mountain_car_step_matches_gymnasium(position, velocity, action, time, goal_velocity):
    genv = gym_env("MountainCar-v0", goal_velocity=goal_velocity)
    env, params = E.make("MountainCar-v0", goal_velocity=goal_velocity)
    state = tensor_state(E.mountain_car.MountainCarState, (position, velocity), time)
    compare_step("MountainCar-v0", genv, env, params, state, action)


@given(
    position=f32(-1.2, 0.6),
    velocity=f32(-0.07, 0.07),
    action=f32(-3.0, 3.0),  # beyond [-1, 1]: the force is clipped, the action cost is not
    time=st.integers(0, 998),
)
def test_continuous_mountain_car_step_matches_gymnasium(position, velocity, action, time):
    genv = gym_env("MountainCarContinuous-v0")
    env, params = E.make("MountainCarContinuous-v0")
    state = tensor_state(E.mountain_car.MountainCarState, (position, velocity), time)
    compare_step("MountainCarContinuous-v0", genv, env, params, state, action)


@given(
    theta=f32(-20.0, 20.0),  # unwrapped angles, as the state holds them
    theta_dot=f32(-8.0, 8.0),
    action=f32(-4.0, 4.0),  # beyond the torque limit: clipped
    time=st.integers(0, 199),
    g=st.sampled_from([10.0, 9.81, 3.7]),
)
def test_pendulum_step_matches_gymnasium(theta, theta_dot, action, time, g):
    genv = gym_env("Pendulum-v1", g=g)
    env, params = E.make("Pendulum-v1", g=g)
    state = tensor_state(E.pendulum.PendulumState, (theta, theta_dot), time)
    compare_step("Pendulum-v1", genv, env, params, state, action)


@pytest.mark.parametrize(
    "env_id, values, action, terminated",
    [
        ("MountainCar-v0", (-1.2, -0.07, 0), 0, False),  # left wall: velocity reset to 0
        ("MountainCar-v0", (-0.5, 0.07, 0), 2, False),  # velocity clipped at +0.07
        ("MountainCar-v0", (0.45, 0.07, 0), 2, True),  # reaches the goal
        ("MountainCar-v0", (0.6, 0.07, 0), 2, True),  # right wall clips the position
        ("MountainCarContinuous-v0", (-1.2, -0.07, 0), -1.0, False),
        ("MountainCarContinuous-v0", (0.40, 0.07, 0), 5.0, True),  # goal 0.45; reward 100 - 2.5
        ("MountainCarContinuous-v0", (0.0, 0.07, 0), 1.0, False),
        ("Pendulum-v1", (3 * math.pi, 7.9, 0), 2.0, False),  # angle wrap in the cost, speed clip
        ("Pendulum-v1", (-math.pi, -8.0, 0), -2.0, False),
        ("Acrobot-v1", (math.pi - 0.01, 0.0, 4 * math.pi, 9 * math.pi), 2, False),  # wrap and clip
        ("Acrobot-v1", (math.pi, 0.0, 0.0, 0.0), 1, True),  # hanging straight up: terminal
        ("Acrobot-v1", (-math.pi, -0.5, -12.0, -28.0), 0, False),
    ],
)
def test_edges_match_gymnasium(env_id, values, action, terminated):
    genv = gym_env(env_id)
    env, params = E.make(env_id)
    cls = STATE_CLASSES[env_id]
    n = len(cls._fields) - 1
    state = tensor_state(cls, values[:n], 0)
    nstate, g_term = compare_step(env_id, genv, env, params, state, action)
    assert g_term == terminated
    t_action = (
        torch.tensor([action], dtype=torch.float32) if isinstance(action, float) else torch.tensor(action)
    )
    assert bool(env.step_env(random.key(0), state, t_action, params)[3]) == terminated


@pytest.mark.parametrize("env_id", list(STATE_CLASSES))
def test_whole_random_episodes_match_gymnasium(env_id):
    genv = gym_env(env_id)
    env, params = E.make(env_id)
    space = env.action_space(params)
    rng = np.random.default_rng(0)
    steps = 0
    for episode in range(2):
        _, state = env.reset(random.key(episode), params)
        for _ in range(250):
            if isinstance(space, E.Box):
                action = float(rng.uniform(space.low, space.high))
            else:
                action = int(rng.integers(space.n))
            state, g_term = compare_step(env_id, genv, env, params, state, action)
            steps += 1
            if g_term or int(state.time) >= params.max_steps_in_episode:
                break
    assert steps >= 2 * 150  # these envs rarely end early under a random policy


def test_time_limits_are_gymnasiums():
    for env_id in ["CartPole-v1", *STATE_CLASSES]:
        _, params = E.make(env_id)
        assert params.max_steps_in_episode == gymnasium.spec(env_id).max_episode_steps


# ------------------------------------------------------------------------- every environment

ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]


def random_actions(env, params, key, n):
    space = env.action_space(params)
    return torch.stack([space.sample(k) for k in random.split(key, n)])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_range_matches_gymnasium(env_id):
    """Many resets stay in gymnasium's reset box and fill it (extremes near both ends)."""
    env, params = E.make(env_id)
    obs, _ = torch.func.vmap(env.reset, in_dims=(0, None))(random.split(random.key(1), 4000), params)
    genv = gym_env(env_id)
    g_obs = np.stack([genv.reset(seed=s)[0] for s in range(4000)])
    lo, hi = g_obs.min(0), g_obs.max(0)
    span = np.maximum(hi - lo, 1e-6)
    np.testing.assert_allclose(as_np(obs.min(0).values), lo, atol=0.02 * span.max())
    np.testing.assert_allclose(as_np(obs.max(0).values), hi, atol=0.02 * span.max())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pure_same_inputs_same_outputs(env_id):
    env, params = E.make(env_id)
    assert_pure(env.reset, random.key(7), params)
    _, state = env.reset(random.key(7), params)
    action = env.action_space(params).sample(random.key(3))
    assert_pure(env.step, random.key(5), state, action, params)  # also: the input state is untouched


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_vmap_equals_loop(env_id):
    env, params = E.make(env_id)
    n = 6
    keys = random.split(random.key(11), n)
    obs, state = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    for _ in range(30):  # long enough for some episodes to end and auto-reset
        keys = random.split(keys[0], n)
        actions = random_actions(env, params, keys[-1], n)
        assert_vmap_equals_loop(env.step, (0, 0, 0, None), keys, state, actions, params, rtol=0, atol=0)
        state = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))(keys, state, actions, params)[1]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bad_actions_raise_clear_errors(env_id):
    env, params = E.make(env_id)
    _, state = env.reset(random.key(0), params)
    space = env.action_space(params)
    good = space.sample(random.key(1))
    with pytest.raises(ValueError, match="action: expected shape"):
        env.step(random.key(0), state, good.reshape(1, *good.shape), params)
    wrong_dtype = good.to(torch.float32) if good.dtype == torch.int64 else good.to(torch.int64)
    with pytest.raises(TypeError, match="action: expected"):
        env.step(random.key(0), state, wrong_dtype, params)
    with pytest.raises(TypeError, match="action: expected a torch.Tensor"):
        env.step(random.key(0), state, 1, params)


def test_unknown_option_lists_known_ones():
    with pytest.raises(TypeError, match="sutton_barto_reward"):
        E.make("CartPole-v1", sutton_barto=True)


@pytest.mark.parametrize("env_id", ["simple_spread", "mpe:simple_tag"])
def test_a_multi_agent_id_names_the_multi_agent_registry(env_id):
    with pytest.raises(ValueError, match=r"multi-agent environment: make it with funrl\.envs\.marl\.make"):
        E.make(env_id)


def test_cartpole_domain_randomisation_is_vmap_over_params():
    env, params = E.make("CartPole-v1")
    n = 5
    gravity = torch.linspace(5.0, 15.0, n)
    masspole = torch.linspace(0.05, 0.5, n)
    batched = E.vmap(env, n, batched_params=("gravity", "masspole"))
    rparams = E.cartpole.CartPoleParams(gravity=gravity, masspole=masspole)
    _, state = batched.reset(random.key(0), rparams)
    action = torch.ones(n, dtype=torch.int64)
    obs, *_ = batched.step_env(random.key(1), state, action, rparams)
    for i in range(n):
        p_i = E.cartpole.CartPoleParams(gravity=float(gravity[i]), masspole=float(masspole[i]))
        obs_i, *_ = env.step_env(random.key(1), ftree.index(state, i), action[i], p_i)
        torch.testing.assert_close(obs[i], obs_i)
        genv = gym_env("CartPole-v1")
        genv.unwrapped.gravity = float(gravity[i])
        genv.unwrapped.masspole = float(masspole[i])
        genv.unwrapped.total_mass = genv.unwrapped.masspole + genv.unwrapped.masscart
        genv.unwrapped.polemass_length = genv.unwrapped.masspole * genv.unwrapped.length
        cartpole_to_gym(genv, ftree.index(state, i))
        g_obs, *_ = genv.step(1)
        np.testing.assert_allclose(as_np(obs[i]), g_obs, rtol=1e-5, atol=1e-6)
    # Different physics give different next states.
    assert not torch.allclose(obs[0], obs[-1])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_env_draws_nothing_where_step_keys_skips_the_split(env_id):
    """These envs hand the whole key to reset_env; that is sound only if step_env ignores its key."""
    env, params = E.make(env_id)
    key = random.key(4)
    assert ftree.tree_equal(env.step_keys(key, params), (key, key))
    _, state = env.reset(random.key(0), params)
    action = env.action_space(params).sample(random.key(1))
    assert ftree.tree_equal(
        env.step_env(random.key(2), state, action, params), env.step_env(random.key(3), state, action, params)
    )


def test_acrobot_torque_noise_uses_a_split_step_key():
    env, params = E.make("Acrobot-v1", torque_noise_max=0.5)
    key = random.key(4)
    assert ftree.tree_equal(env.step_keys(key, params), tuple(random.split(key)))
    _, state = env.reset(random.key(0), params)
    out2 = env.step_env(random.key(2), state, torch.tensor(1), params)
    out3 = env.step_env(random.key(3), state, torch.tensor(1), params)
    assert not torch.equal(out2[0], out3[0])


def test_reset_uniform_uses_both_words_of_each_block():
    key = random.key(9)
    values = E.core.reset_uniform(key, 5, -1.0, 3.0)
    y0, y1 = random.threefry2x32((key[0], key[1]), (torch.zeros(3, dtype=torch.int64), torch.arange(3)))
    words = torch.stack([y0, y1], -1).reshape(-1)[:5]
    torch.testing.assert_close(values, -1.0 + (words >> 9).to(torch.float32) * 2.0**-23 * 4.0)
    many = E.core.reset_uniform(key, 100_000, -1.0, 3.0)
    assert float(many.min()) >= -1.0 and float(many.max()) < 3.0
    assert abs(float(many.mean()) - 1.0) < 0.02 and abs(float(many.var()) - 16 / 12) < 0.03
