"""Wrappers: statistics against gymnasium on the same stream, purity, vmap = loop, compile = eager."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from funrl import control, random
from funrl import tree as ftree
from funrl.envs import wrappers as W
from funrl.envs.core import Box, Environment, EnvParams, time_limit_reached

# ------------------------------------------------------------------------------------------------
# A small stochastic env with a continuous action, termination and truncation: enough to drive
# every wrapper path (auto-reset on both kinds of episode end) without depending on other envs.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WalkParams(EnvParams):
    max_steps_in_episode: int = 7
    noise: float = 0.5
    bound: float = 2.0


class WalkState(NamedTuple):
    pos: torch.Tensor
    time: torch.Tensor


class RandomWalk(Environment):
    """pos += clip(action) + noise; reward = -sum|pos|; terminated when |pos| leaves the bound."""

    @property
    def default_params(self) -> WalkParams:
        return WalkParams()

    def reset_env(self, key, params):
        pos = random.uniform(key, (2,), minval=-1.0, maxval=1.0)
        return pos.clone(), WalkState(pos, torch.zeros((), dtype=torch.int64))

    def step_env(self, key, state, action, params):
        pos = state.pos + action + params.noise * random.normal(key, (2,))
        time = state.time + 1
        terminated = pos.abs().max() > params.bound
        truncated = time_limit_reached(time, params) & ~terminated
        reward = -pos.abs().sum()
        return pos.clone(), WalkState(pos, time), reward, terminated, truncated, {}

    def observation_space(self, params=None):
        return Box(low=-10.0, high=10.0, shape=(2,))

    def action_space(self, params=None):
        return Box(low=-1.0, high=1.0, shape=(2,))


class Batched(Environment):
    """N copies under vmap behind one reset/step (leading batch dim), as a batched env view."""

    def __init__(self, env: Environment, n: int) -> None:
        self.env, self.n = env, n

    @property
    def default_params(self):
        return self.env.default_params

    def observation_space(self, params=None):
        return self.env.observation_space(params)

    def action_space(self, params=None):
        return self.env.action_space(params)

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        return torch.func.vmap(self.env.reset, in_dims=(0, None))(random.split(key, self.n), params)

    reset_env = reset

    def draw_step(self, key, params=None):
        params = self.default_params if params is None else params
        return torch.func.vmap(self.env.draw_step, in_dims=(0, None))(random.split(key, self.n), params)

    def step_with(self, draw, state, action, params=None):
        params = self.default_params if params is None else params
        return torch.func.vmap(self.env.step_with, in_dims=(0, 0, 0, None))(draw, state, action, params)


def actions(key: torch.Tensor, n: int, batch: tuple[int, ...] = ()) -> torch.Tensor:
    return random.uniform(key, (n,) + batch + (2,), minval=-1.5, maxval=1.5)


def run(env: Environment, key: torch.Tensor, acts: torch.Tensor, step_name: str = "step"):
    """Reset then step through ``acts``; returns the reset obs and the list of step outputs."""
    k_reset, k_steps = random.split(key)
    obs, state = env.reset(k_reset)
    outs = []
    keys = random.split(k_steps, acts.shape[0])
    for t in range(acts.shape[0]):
        out = getattr(env, step_name)(keys[t], state, acts[t], env.default_params)
        state = out[1]
        outs.append(out)
    return obs, outs


# ------------------------------------------------------------------------------------------------
# A gymnasium VectorEnv that replays a recorded funrl stream (SAME_STEP auto-reset), so gymnasium's
# own wrappers see exactly the observations and rewards funrl's wrappers see.
# ------------------------------------------------------------------------------------------------


class ReplayVectorEnv(gym.vector.VectorEnv):
    def __init__(
        self, reset_obs: np.ndarray, steps: list[tuple], mode: AutoresetMode = AutoresetMode.SAME_STEP
    ):
        # gymnasium's observation wrappers refuse SAME_STEP (they would miss info's final obs);
        # their statistics do not depend on the mode, so the replay may declare NEXT_STEP there.
        self.metadata = {"autoreset_mode": mode}
        self.num_envs = reset_obs.shape[0]
        self.single_observation_space = gym.spaces.Box(-10, 10, reset_obs.shape[1:], np.float32)
        self.single_action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._reset_obs, self._steps, self._t = reset_obs, steps, 0

    def reset(self, *, seed=None, options=None):
        self._t = 0
        return self._reset_obs.copy(), {}

    def step(self, actions):
        obs, reward, terminated, truncated = self._steps[self._t]
        self._t += 1
        return obs.copy(), reward.copy(), terminated.copy(), truncated.copy(), {}


def record(n_envs: int, n_steps: int, seed: int):
    env = Batched(RandomWalk(), n_envs)
    acts = actions(random.key(seed + 1), n_steps, (n_envs,))
    obs0, outs = run(env, random.key(seed), acts)
    steps = [(o.numpy(), r.numpy(), te.numpy(), tr.numpy()) for o, _, r, te, tr, _ in outs]
    return env, acts, obs0, outs, steps


@pytest.mark.parametrize("n_envs", [1, 4])
def test_normalize_observation_matches_gymnasium_vector_wrapper(n_envs: int) -> None:
    base, acts, obs0, outs, steps = record(n_envs, 40, seed=3)
    assert any(bool((te | tr).any()) for _, _, te, tr in steps), "stream must contain episode ends"
    gym_env = gym.wrappers.vector.NormalizeObservation(
        ReplayVectorEnv(obs0.numpy(), steps, AutoresetMode.NEXT_STEP)
    )
    wrapped = W.NormalizeObservation(base)
    f_obs, f_outs = run(wrapped, random.key(3), acts)
    g_obs, _ = gym_env.reset()
    np.testing.assert_allclose(f_obs.numpy(), g_obs, rtol=1e-5, atol=1e-5)
    for t, out in enumerate(f_outs):
        g_obs, *_ = gym_env.step(acts[t].numpy())
        np.testing.assert_allclose(out[0].numpy(), g_obs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out[1].obs_rms.mean.numpy(), gym_env.obs_rms.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[1].obs_rms.var.numpy(), gym_env.obs_rms.var, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(float(out[1].obs_rms.count), gym_env.obs_rms.count, rtol=1e-6)


def test_normalize_observation_single_env_matches_gymnasium_single_wrapper_within_episode() -> None:
    """Within one episode (no resets) the single-env gymnasium wrapper sees the same stream."""

    class Replay(gym.Env):
        observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

        def __init__(self, obs0, obs):
            self.obs0, self.obs, self.t = obs0, obs, 0

        def reset(self, *, seed=None, options=None):
            return self.obs0, {}

        def step(self, action):
            self.t += 1
            return self.obs[self.t - 1], 0.0, False, False, {}

    env = W.NormalizeObservation(RandomWalk(), stats_dtype=torch.float64)
    params = dataclasses.replace(env.default_params, max_steps_in_episode=100, bound=1e9)
    acts = actions(random.key(5), 30)
    obs, state = env.reset(random.key(4), params)
    raw_obs0 = env.unwrapped.reset(random.key(4), params)[0]
    raws, normed = [], []
    for t in range(30):
        obs, state, *_ = env.step_env(random.key(100 + t), state, acts[t], params)
        raws.append(state.env_state.pos.numpy())
        normed.append(obs)
    g = gym.wrappers.NormalizeObservation(Replay(raw_obs0.numpy(), raws))
    g.reset()
    for t in range(30):
        np.testing.assert_allclose(normed[t].numpy(), g.step(None)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_envs", [1, 4])
def test_normalize_reward_matches_gymnasium_vector_wrapper(n_envs: int) -> None:
    base, acts, obs0, outs, steps = record(n_envs, 40, seed=7)
    assert any(bool(te.any()) for _, _, te, _ in steps) and any(bool(tr.any()) for *_, tr in steps)
    gym_env = gym.wrappers.vector.NormalizeReward(ReplayVectorEnv(obs0.numpy(), steps), gamma=0.9)
    wrapped = W.NormalizeReward(base, gamma=0.9)
    _, f_outs = run(wrapped, random.key(7), acts)
    gym_env.reset()
    for t, out in enumerate(f_outs):
        _, g_reward, *_ = gym_env.step(acts[t].numpy())
        np.testing.assert_allclose(out[2].numpy(), g_reward, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(float(out[1].return_rms.var), gym_env.return_rms.var, rtol=1e-4)
        np.testing.assert_allclose(out[1].discounted_return.numpy(), gym_env.accumulated_reward, rtol=1e-5)


def test_frozen_statistics_do_not_move_and_keep_layout() -> None:
    env = W.NormalizeReward(W.NormalizeObservation(RandomWalk()))
    frozen = W.NormalizeReward(W.NormalizeObservation(RandomWalk()).frozen(), update_stats=False)
    acts = actions(random.key(1), 10)
    _, outs = run(env, random.key(0), acts)
    state = outs[-1][1]
    out = frozen.step(random.key(9), state, acts[0])
    assert ftree.structure(out[1]) == ftree.structure(state)
    assert ftree.tree_equal(out[1].env_state.obs_rms, state.env_state.obs_rms)
    assert ftree.tree_equal(out[1].return_rms, state.return_rms)
    # The live wrapper moves them from the same state (so the check above can fail).
    live = env.step(random.key(9), state, acts[0])
    assert not ftree.tree_equal(live[1].env_state.obs_rms, state.env_state.obs_rms)


def test_running_mean_std_merges_like_one_big_batch() -> None:
    x = random.normal(random.key(2), (50, 3), dtype=torch.float64) * 3 + 1
    rms = W.RunningMeanStd.init((3,), torch.float64, epsilon=1e-12)
    for chunk in x.split(7):
        rms = W.update_running_mean_std(rms, chunk)
    torch.testing.assert_close(rms.mean, x.mean(0))
    torch.testing.assert_close(rms.var, x.var(0, correction=0))


# ------------------------------------------------------------------------------------------------
# EpisodeStatistics
# ------------------------------------------------------------------------------------------------


def test_episode_statistics_match_a_manual_count_and_gymnasium_record() -> None:
    base, acts, obs0, outs, steps = record(3, 60, seed=11)
    wrapped = W.EpisodeStatistics(base)
    _, f_outs = run(wrapped, random.key(11), acts)
    gym_env = gym.wrappers.vector.RecordEpisodeStatistics(ReplayVectorEnv(obs0.numpy(), steps))
    gym_env.reset()
    ret = np.zeros(3)
    length = np.zeros(3, dtype=np.int64)
    finished = 0
    for t, (_obs, state, reward, te, tr, info) in enumerate(f_outs):
        _, _, _, _, g_info = gym_env.step(acts[t].numpy())
        ret += reward.numpy()
        length += 1
        done = (te | tr).numpy()
        np.testing.assert_array_equal(info["returned_episode"].numpy(), done)
        if done.any():
            finished += int(done.sum())
            np.testing.assert_allclose(info["returned_episode_return"].numpy()[done], ret[done], rtol=1e-5)
            np.testing.assert_array_equal(info["returned_episode_length"].numpy()[done], length[done])
            np.testing.assert_array_equal(g_info["_episode"], done)
            np.testing.assert_allclose(g_info["episode"]["r"][done], ret[done], rtol=1e-5)
            np.testing.assert_array_equal(g_info["episode"]["l"][done], length[done])
        ret[done] = 0
        length[done] = 0
        np.testing.assert_allclose(state.episode_return.numpy(), ret, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(state.episode_length.numpy(), length)
    assert finished >= 5


def test_episode_statistics_returned_values_persist_until_next_end() -> None:
    env = W.EpisodeStatistics(RandomWalk())
    _, outs = run(env, random.key(21), actions(random.key(22), 40))
    last = None
    for *_, info in outs:
        if bool(info["returned_episode"]):
            last = (float(info["returned_episode_return"]), int(info["returned_episode_length"]))
        elif last is not None:
            assert (float(info["returned_episode_return"]), int(info["returned_episode_length"])) == last
    assert last is not None


# ------------------------------------------------------------------------------------------------
# FrameStack, FlattenObservation, ClipAction, ScaleReward
# ------------------------------------------------------------------------------------------------


def test_frame_stack_matches_gymnasium_and_final_obs_is_the_old_stack() -> None:
    env = W.FrameStack(RandomWalk(), 3)
    acts = actions(random.key(31), 25)
    obs, outs = run(env, random.key(30), acts)
    base_obs, base_outs = run(RandomWalk(), random.key(30), acts)
    expected = [base_obs] * 3
    assert torch.equal(obs, torch.stack(expected))
    saw_end = False
    for (o, _, _, te, tr, info), (bo, _, _, _, _, binfo) in zip(outs, base_outs, strict=True):
        pushed = expected[1:] + [binfo["final_obs"]]
        assert torch.equal(info["final_obs"], torch.stack(pushed))
        if bool(te | tr):
            saw_end = True
            expected = [bo] * 3  # gymnasium's padding_type="reset"
        else:
            expected = pushed
        assert torch.equal(o, torch.stack(expected))
    assert saw_end
    assert env.observation_space().shape == (3, 2)


def test_frame_stack_single_episode_equals_gymnasium_frame_stack_observation() -> None:
    class Replay(gym.Env):
        observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

        def __init__(self, obs0, obs):
            self.obs0, self.obs, self.t = obs0, obs, 0

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return self.obs0, {}

        def step(self, action):
            self.t += 1
            return self.obs[self.t - 1], 0.0, False, False, {}

    env = W.FrameStack(RandomWalk(), 4)
    params = dataclasses.replace(env.default_params, max_steps_in_episode=100, bound=1e9)
    acts = actions(random.key(8), 10)
    obs, state = env.reset(random.key(4), params)
    raws, stacks = [], []
    for t in range(10):
        obs, state, *_ = env.step(random.key(50 + t), state, acts[t], params)
        raws.append(state.env_state.pos.numpy())
        stacks.append(obs)
    obs0 = env.unwrapped.reset(random.key(4), params)[0].numpy()
    g = gym.wrappers.FrameStackObservation(Replay(obs0, raws), 4)
    g.reset()
    for t in range(10):
        np.testing.assert_array_equal(stacks[t].numpy(), g.step(None)[0])


def test_flatten_and_scale_and_clip() -> None:
    env = W.ScaleReward(W.FlattenObservation(W.FrameStack(W.ClipAction(RandomWalk()), 2)), 0.5)
    assert env.observation_space().shape == (4,)
    assert env.action_space().high == math.inf and env.action_space().shape == (2,)
    acts = actions(random.key(41), 12) * 3
    _, outs = run(env, random.key(40), acts)
    _, ref = run(W.FrameStack(RandomWalk(), 2), random.key(40), acts.clamp(-1, 1))
    for (o, _, r, te, tr, info), (ro, _, rr, rte, rtr, rinfo) in zip(outs, ref, strict=True):
        assert torch.equal(o, ro.reshape(4))
        assert torch.equal(info["final_obs"], rinfo["final_obs"].reshape(4))
        assert torch.equal(r, rr * 0.5)
        assert bool(te == rte) and bool(tr == rtr)


# ------------------------------------------------------------------------------------------------
# Purity, vmap = loop, step_env path, compile = eager
# ------------------------------------------------------------------------------------------------


def all_wrapped() -> dict[str, Environment]:
    return {
        "EpisodeStatistics": W.EpisodeStatistics(RandomWalk()),
        "NormalizeObservation": W.NormalizeObservation(RandomWalk()),
        "NormalizeReward": W.NormalizeReward(RandomWalk()),
        "ScaleReward": W.ScaleReward(RandomWalk(), 2.0),
        "ClipAction": W.ClipAction(RandomWalk()),
        "FlattenObservation": W.FlattenObservation(RandomWalk()),
        "FrameStack": W.FrameStack(RandomWalk(), 3),
        "stack": W.EpisodeStatistics(
            W.NormalizeReward(W.NormalizeObservation(W.FrameStack(RandomWalk(), 2)))
        ),
    }


@pytest.mark.parametrize("name", list(all_wrapped()))
@settings(max_examples=5)
@given(seed=st.integers(0, 2**31 - 1))
def test_purity_same_inputs_same_outputs(name: str, seed: int) -> None:
    env = all_wrapped()[name]
    acts = actions(random.key(seed ^ 1), 9)
    a = run(env, random.key(seed), acts)
    b = run(env, random.key(seed), acts)
    assert ftree.tree_equal(a, b)


@pytest.mark.parametrize("name", list(all_wrapped()))
def test_vmap_equals_loop(name: str) -> None:
    env = all_wrapped()[name]
    n = 5
    keys = random.split(random.key(123), n)
    obs, state = torch.func.vmap(env.reset)(keys)
    acts = actions(random.key(7), 12, (n,))
    step = torch.func.vmap(env.step, in_dims=(0, 0, 0))
    loop_states = [env.reset(keys[i])[1] for i in range(n)]
    for i in range(n):
        assert ftree.tree_equal(ftree.index(obs, i), env.reset(keys[i])[0])
    for t in range(12):
        step_keys = random.split(random.fold_in(random.key(5), t), n)
        out = step(step_keys, state, acts[t])
        for i in range(n):
            ref = env.step(step_keys[i], loop_states[i], acts[t, i])
            assert ftree.tree_allclose(ftree.index(out, i), ref, rtol=1e-6, atol=1e-6), (name, t, i)
            loop_states[i] = ref[1]
        state = out[1]


def walk_state(state: Any) -> WalkState:
    while not isinstance(state, WalkState):
        state = state.env_state
    return state


@pytest.mark.parametrize("name", ["EpisodeStatistics", "NormalizeObservation", "FrameStack"])
def test_step_env_is_the_raw_transition(name: str) -> None:
    """``step_env`` never resets: the inner state keeps evolving past an episode end."""
    env = all_wrapped()[name]
    _, outs = run(env, random.key(3), actions(random.key(4), 20), step_name="step_env")
    times = [int(walk_state(out[1]).time) for out in outs]
    assert times == list(range(1, 21))
    assert all("final_obs" not in out[5] for out in outs)


def test_wrappers_compose_with_the_batched_view() -> None:
    """Over ``funrl.envs.vmap(env, n)`` the statistics are shared by the batch (gymnasium's vector
    wrappers); the episode counters stay per env."""
    from funrl.envs import make
    from funrl.envs import vmap as batched_view

    env = W.EpisodeStatistics(W.NormalizeObservation(batched_view(make("Catch-bsuite")[0], 4)))
    obs, state = env.reset(random.key(0))
    assert obs.shape == (4, 10, 5) and state.env_state.obs_rms.mean.shape == (10, 5)
    assert float(state.env_state.obs_rms.count) == pytest.approx(4 + 1e-4)
    ends = 0
    for t in range(12):
        obs, state, _, terminated, _, info = env.step(random.key(t + 1), state, torch.full((4,), t % 3))
        ends += int(info["returned_episode"].sum())
        assert info["returned_episode_length"].shape == (4,)
    assert ends == 4 and bool((info["returned_episode_length"] == 9).all())
    assert float(state.env_state.obs_rms.count) == pytest.approx(4 * 13 + 1e-4)


@pytest.mark.slow
def test_compiled_stack_equals_eager() -> None:
    """One graph for four wrappers over a cheap env (Catch), vmapped, compiled = eager."""
    from funrl.envs import make

    catch = make("Catch-bsuite")[0]
    env = W.EpisodeStatistics(W.NormalizeReward(W.NormalizeObservation(W.FrameStack(catch, 2))))
    n = 4
    keys = random.split(random.key(0), n)
    obs, state = torch.func.vmap(env.reset)(keys)
    # vmap returns unbatched constants as stride-0 expansions; make them dense so that the
    # compiled graph is not specialised on strides the later states do not have (a recompile).
    state = ftree.map(torch.Tensor.contiguous, state)
    step = torch.func.vmap(env.step)
    compiled = control.compile(step)
    eager_state = compiled_state = state
    for t in range(12):
        k = random.split(random.fold_in(random.key(2), t), n)
        act = random.randint(random.fold_in(random.key(1), t), (n,), 0, 3)
        e = step(k, eager_state, act)
        c = compiled(k, compiled_state, act)
        assert ftree.tree_allclose(e, c, rtol=1e-5, atol=1e-6)
        eager_state, compiled_state = e[1], c[1]


# ------------------------------------------------------------------------------------------------
# Validate and bad input
# ------------------------------------------------------------------------------------------------


def test_validate_passes_good_steps_and_names_bad_action() -> None:
    env = W.Validate(RandomWalk())
    obs, state = env.reset(random.key(0))
    out = env.step(random.key(1), state, torch.zeros(2))
    assert ftree.tree_equal(out, RandomWalk().step(random.key(1), state, torch.zeros(2)))
    with pytest.raises(ValueError, match="action: values outside"):
        env.step(random.key(1), state, torch.full((2,), 1.5))
    with pytest.raises(ValueError, match=r"action: expected shape \[\.\.\., 2\]"):
        env.step(random.key(1), state, torch.zeros(3))
    with pytest.raises(TypeError, match="action: expected dtype torch.float32"):
        env.step(random.key(1), state, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="action: expected a torch.Tensor"):
        env.step(random.key(1), state, [0.0, 0.0])
    with pytest.raises(ValueError, match="action: expected finite"):
        env.step(random.key(1), state, torch.tensor([math.nan, 0.0]))


def test_validate_catches_a_planted_env_bug() -> None:
    class LeaksOutOfBounds(RandomWalk):
        def step_env(self, key, state, action, params):
            obs, *rest = super().step_env(key, state, action, params)
            return obs + 100.0, *rest

    class WrongFlagDtype(RandomWalk):
        def step_env(self, key, state, action, params):
            obs, s, r, te, tr, info = super().step_env(key, state, action, params)
            return obs, s, r, te.float(), tr, info

    _, state = RandomWalk().reset(random.key(0))
    with pytest.raises(ValueError, match="obs: values outside"):
        W.Validate(LeaksOutOfBounds()).step(random.key(1), state, torch.zeros(2))
    with pytest.raises(TypeError, match="terminated: expected a bool tensor"):
        # step_env: the raw path, where a float flag reaches the check (auto-reset would fail first)
        W.Validate(WrongFlagDtype()).step_env(random.key(1), state, torch.zeros(2), WalkParams())


def test_validate_accepts_a_batched_view_and_refuses_vmap() -> None:
    env = W.Validate(Batched(RandomWalk(), 3))
    obs, state = env.reset(random.key(0))
    env.step(random.key(1), state, torch.zeros(3, 2))
    single = W.Validate(RandomWalk())
    keys = random.split(random.key(0), 3)
    with pytest.raises(RuntimeError, match="cannot run under torch.compile or a torch.func transform"):
        states = torch.func.vmap(RandomWalk().reset)(keys)[1]
        torch.func.vmap(single.step)(keys, states, torch.zeros(3, 2))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: W.NormalizeReward(RandomWalk(), gamma=1.5), "gamma: expected a float in"),
        (lambda: W.NormalizeObservation(RandomWalk(), epsilon=0.0), "epsilon: expected a positive"),
        (lambda: W.NormalizeObservation(RandomWalk(), stats_dtype=torch.int64), "stats_dtype"),
        (lambda: W.FrameStack(RandomWalk(), 0), "num_frames: expected a positive int"),
        (lambda: W.ScaleReward(RandomWalk(), math.inf), "scale: expected a finite float"),
        (lambda: W.EpisodeStatistics("CartPole-v1"), "env: expected a funrl Environment, got str"),
    ],
)
def test_bad_configuration_is_named(make: Any, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_wrong_obs_shape_is_named() -> None:
    env = W.EpisodeStatistics(RandomWalk())
    with pytest.raises(ValueError, match=r"obs: expected shape \[\.\.\., 2\]"):
        env._on_reset(torch.zeros(3), None, env.default_params)


def test_wrappers_on_image_observations() -> None:
    """MinAtar's bool images: FrameStack keeps bool, Flatten flattens, normalisation casts to float."""
    from funrl.envs import make

    breakout, params = make("Breakout-MinAtar")
    stacked = W.FrameStack(breakout, 3)
    obs, state = stacked.reset(random.key(0), params)
    assert obs.dtype == torch.bool and obs.shape == (3, 10, 10, 4)
    assert bool(stacked.observation_space(params).contains(obs))
    flat = W.FlattenObservation(breakout)
    assert flat.observation_space(params).shape == (400,) and flat.reset(random.key(0), params)[0].shape == (
        400,
    )
    normed = W.NormalizeObservation(breakout)
    obs, state = normed.reset(random.key(0), params)
    assert obs.dtype == torch.float32 and obs.shape == (10, 10, 4)
    obs, state, *_ = normed.step(random.key(1), state, torch.tensor(0), params)
    assert bool(torch.isfinite(obs).all()) and float(state.obs_rms.count) == pytest.approx(2 + 1e-4)
