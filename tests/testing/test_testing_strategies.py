"""funrl.testing.strategies draw what they promise; importing funrl.testing without hypothesis says
how to install it."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from torch import nn

import funrl.envs as E
from funrl import tree as ftree
from funrl.testing import strategies as S

FEW = settings(max_examples=20)


def episode_lengths(terminated: torch.Tensor, truncated: torch.Tensor) -> tuple[list[int], list[int]]:
    """One column's complete episodes (begun inside the window): lengths of the terminated ones and
    of the truncated ones."""
    ended_by_termination, ended_by_truncation = [], []
    start = None
    for t in range(terminated.shape[0]):
        if terminated[t] or truncated[t]:
            if start is not None:
                (ended_by_termination if terminated[t] else ended_by_truncation).append(t - start + 1)
            start = t + 1
    return ended_by_termination, ended_by_truncation


@FEW
@given(S.trajectories(max_steps=10, max_envs=3))
def test_trajectories_have_realistic_episode_flags(rollout):
    steps, num_envs = rollout.rewards.shape
    assert 1 <= steps <= 10 and 1 <= num_envs <= 3
    for field in rollout:
        assert field.shape == (steps, num_envs)
    assert rollout.rewards.dtype == torch.float64 and rollout.terminated.dtype == torch.bool
    assert not bool((rollout.terminated & rollout.truncated).any())
    for env in range(num_envs):
        terminated_lengths, truncated_lengths = episode_lengths(
            rollout.terminated[:, env], rollout.truncated[:, env]
        )
        # one time limit per environment: every whole truncated episode has its length, and no
        # whole episode runs longer
        assert len(set(truncated_lengths)) <= 1
        if truncated_lengths:
            assert all(length <= truncated_lengths[0] for length in terminated_lengths)


@FEW
@given(S.trajectories())
def test_trajectories_next_values_follow_the_rollout(rollout):
    done = rollout.terminated | rollout.truncated
    inside = ~done[:-1]
    assert torch.equal(rollout.next_values[:-1][inside], rollout.values[1:][inside])


def test_trajectories_reach_every_episode_pattern():
    def has(pattern):
        return find(S.trajectories(), pattern, settings=settings(database=None, max_examples=500))

    several_terminations = has(lambda r: bool((r.terminated.sum(0) >= 2).any()))
    assert int(several_terminations.terminated.sum(0).max()) >= 2
    assert bool(has(lambda r: bool(r.truncated[0].any())).truncated[0].any())  # at the first step
    assert bool(has(lambda r: bool((r.terminated[-1] & ~r.truncated[-1]).any())).terminated[-1].any())
    both_kinds = has(lambda r: bool(r.terminated[:, 0].any() and r.truncated[:, 0].any()))
    assert bool(both_kinds.truncated[:, 0].any())
    # where an episode ends, V(s') is the final observation's value, not the next episode's first
    has(lambda r: bool((r.truncated[:-1] & (r.next_values[:-1] != r.values[1:])).any()))


@FEW
@given(S.q_trajectories(max_steps=4, max_envs=2, max_actions=3))
def test_q_trajectories_shapes(window):
    steps, num_envs, num_actions = window.next_q_values.shape
    assert 1 <= steps <= 4 and 1 <= num_envs <= 2 and 1 <= num_actions <= 3
    assert window.rewards.shape == window.terminated.shape == window.truncated.shape == (steps, num_envs)
    assert not bool((window.terminated & window.truncated).any())


@FEW
@given(S.transition_batches(min_size=2, max_size=5, obs_shape=(2, 3), num_actions=3))
def test_transition_batches_are_buffer_items(batch):
    size = batch["obs"].shape[0]
    assert 2 <= size <= 5
    assert (
        batch["obs"].shape == batch["next_obs"].shape == (size, 2, 3) and batch["obs"].dtype == torch.float32
    )
    assert batch["action"].dtype == torch.int64 and bool(
        ((batch["action"] >= 0) & (batch["action"] < 3)).all()
    )
    assert batch["reward"].shape == (size,) and batch["reward"].dtype == torch.float32
    assert not bool((batch["terminated"] & batch["truncated"]).any())


@FEW
@given(S.keys())
def test_keys_are_funrl_keys(key):
    assert key.shape == (2,) and key.dtype == torch.int64


MODULE = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


@FEW
@given(S.params(MODULE))
def test_params_fit_the_module(params):
    assert {name: p.shape for name, p in params.items()} == {n: p.shape for n, p in MODULE.named_parameters()}
    assert all(p.dtype == torch.float32 and bool(torch.isfinite(p).all()) for p in params.values())


def test_params_depend_on_the_drawn_key():
    pairs = st.tuples(S.params(MODULE), S.params(MODULE))
    first, second = find(pairs, lambda ab: not ftree.tree_equal(*ab), settings=settings(database=None))
    assert not ftree.tree_equal(first, second)


@pytest.mark.parametrize("env_id", E.registry())
def test_env_states_for_every_registered_env(env_id):
    env, params = E.make(env_id)
    obs_space = env.observation_space(params)
    _, first_state = env.reset(torch.zeros(2, dtype=torch.int64), params)

    @settings(max_examples=3)
    @given(S.env_states(env_id, max_steps=6))
    def check(obs_and_state):
        obs, state = obs_and_state
        assert obs.shape == obs_space.shape and obs.dtype == obs_space.dtype and bool(obs_space.contains(obs))
        assert ftree.structure(state) == ftree.structure(first_state)

    check()


def test_env_states_take_steps():
    env, params = E.make("CartPole-v1")
    stepped = find(S.env_states(env, params), lambda s: int(s[1].time) > 0, settings=settings(database=None))
    assert int(stepped[1].time) > 0


@FEW
@given(S.gammas(), S.lambdas(), S.clip_epsilons(), S.learning_rates())
def test_hyper_parameter_ranges(gamma, lmbda, clip_eps, learning_rate):
    assert 0.0 <= gamma <= 1.0 and 0.0 <= lmbda <= 1.0
    assert 0.05 <= clip_eps <= 0.5
    assert 1e-5 * (1 - 1e-9) <= learning_rate <= 1e-1 * (1 + 1e-9)


@pytest.mark.parametrize("edge", [0.0, 1.0])
def test_gammas_and_lambdas_include_their_ends(edge):
    assert find(S.gammas(), lambda g: g == edge, settings=settings(database=None)) == edge
    assert find(S.lambdas(), lambda lm: lm == edge, settings=settings(database=None)) == edge


def test_importing_funrl_testing_without_hypothesis_says_how_to_install_it(monkeypatch):
    for name in [m for m in sys.modules if m == "funrl.testing" or m.startswith("funrl.testing.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # what a missing package looks like to import
    with pytest.raises(ImportError, match=r"funrl.testing needs hypothesis.*pip install hypothesis"):
        importlib.import_module("funrl.testing")
    monkeypatch.undo()
    assert importlib.import_module("funrl.testing").assert_pure  # restored for the other tests
