"""The multi-agent contract on funrl's MPE scenarios: teams, spaces, auto-reset, purity, batching
over environments and agents, bad actions, the registry."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mpe_reference import make_reference, random_actions

import funrl.envs
from funrl import random
from funrl import tree as ftree
from funrl.envs import marl
from funrl.testing import assert_pure, assert_trees_close, assert_vmap_equals_loop

SCENARIOS = marl.SCENARIOS


@pytest.mark.parametrize("continuous_actions", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("env_id", SCENARIOS)
def test_agents_teams_and_spaces_are_mpe2s(env_id: str, continuous_actions: bool) -> None:
    env, params = marl.make(env_id, continuous_actions=continuous_actions)
    reference = make_reference(env_id, continuous_actions)
    assert env.agents == tuple(reference.possible_agents)
    assert sum(env.teams.values(), ()) == env.agents
    obs_spaces, act_spaces = env.observation_spaces(params), env.action_spaces(params)
    for team, ids in env.teams.items():
        assert all(marl.team_of(agent) == team for agent in ids)
        for agent in ids:
            ref_obs, ref_act = reference.observation_space(agent), reference.action_space(agent)
            assert obs_spaces[team].shape == ref_obs.shape
            if continuous_actions:
                assert act_spaces[team].shape == ref_act.shape
                assert (act_spaces[team].low, act_spaces[team].high) == (0.0, 1.0)
            else:
                assert act_spaces[team].n == ref_act.n
    assert env.global_state_space(params).shape == reference.state_space.shape
    obs, state = env.reset(random.key(0), params)
    for team, ids in env.teams.items():
        assert obs[team].shape == (len(ids), *obs_spaces[team].shape)
        assert obs[team].dtype == torch.float32
    assert env.global_state(state, params).shape == env.global_state_space(params).shape


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_step_shapes_dtypes_and_global_state(env_id: str) -> None:
    env, params = marl.make(env_id)
    _, state = env.reset(random.key(1), params)
    obs, state, rewards, terminated, truncated, info = env.step(
        random.key(2), state, random_actions(env, random.key(3)), params
    )
    for team, ids in env.teams.items():
        assert rewards[team].shape == (len(ids),) and rewards[team].dtype == torch.float32
        assert terminated[team].shape == (len(ids),) and terminated[team].dtype == torch.bool
        assert truncated[team].shape == (len(ids),) and truncated[team].dtype == torch.bool
    flat = torch.cat([obs[t].flatten() for t in env.teams])
    assert torch.equal(env.global_state(state, params), flat)
    assert torch.equal(info["final_global_state"], flat)


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_auto_reset_after_max_cycles(env_id: str) -> None:
    env, params = marl.make(env_id, max_cycles=3)
    obs, state = env.reset(random.key(0), params)
    for t in range(3):
        key = random.fold_in(random.key(1), t)
        actions = random_actions(env, key)
        raw = env.step_env(key, state, actions, params)
        obs, new_state, rewards, terminated, truncated, info = env.step(key, state, actions, params)
        assert_trees_close(info["final_obs"], raw[0], name="final_obs")
        assert_trees_close((rewards, terminated, truncated), raw[2:5], name="rewards and flags")
        ended = t == 2
        assert all(bool(f.all()) == ended for f in truncated.values())
        if ended:
            assert_trees_close((obs, new_state), env.reset(key, params), name="reset after the last step")
            assert int(new_state.time) == 0
        else:
            assert_trees_close((obs, new_state), raw[:2], name="no reset mid-episode")
        state = new_state


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_step_is_pure(env_id: str) -> None:
    env, params = marl.make(env_id)
    _, state = env.reset(random.key(0), params)
    assert_pure(env.step, random.key(1), state, random_actions(env, random.key(2)), params)


@pytest.mark.parametrize("continuous_actions", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("env_id", SCENARIOS)
def test_a_batch_steps_as_it_is_and_equals_each_env_alone_bit_for_bit(
    env_id: str, continuous_actions: bool
) -> None:
    # The scenarios declare batch_polymorphic, so marl.vmap calls step_with on the whole batch.
    env, params = marl.make(env_id, continuous_actions=continuous_actions, max_cycles=3)
    assert env.batch_polymorphic
    num_envs, key = 4, random.key(11)
    batched = marl.vmap(env, num_envs)
    _, state = batched.reset(key, params)
    # Crowded, so that discs overlap: collisions, catches and contact forces differ across envs.
    state = state._replace(pos=state.pos * 0.1)
    for t in range(4):  # across an auto-reset
        k = random.fold_in(key, t)
        actions = random_actions(env, random.fold_in(k, 1), (num_envs,))
        draw = torch.func.vmap(env.draw_step, in_dims=(0, None))(batched.keys(k), params)
        out = env.step_with(draw, state, actions, params)
        assert ftree.tree_equal(out, batched.step(k, state, actions, params))
        for i, k_i in enumerate(batched.keys(k)):
            single = env.step(k_i, ftree.index(state, i), ftree.index(actions, i), params)
            assert ftree.tree_equal(ftree.index(out, i), single), (t, i)
        state = out[1]
    assert bool((state.time == 1).all())  # every env truncated at 3 steps and took its reset


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_vmap_over_envs_equals_single_runs(env_id: str) -> None:
    env, params = marl.make(env_id, max_cycles=4)
    batched = marl.vmap(env, 3)
    key = random.key(7)
    obs, state = batched.reset(key, params)
    for i, k in enumerate(batched.keys(key)):
        assert_trees_close(ftree.index((obs, state), i), env.reset(k, params), name=f"reset env {i}")
    for t in range(5):  # across an auto-reset
        k = random.fold_in(key, t)
        actions = ftree.stack([random_actions(env, random.fold_in(k, i)) for i in range(3)])
        out = batched.step(k, state, actions, params)
        for i, k_i in enumerate(batched.keys(k)):
            single = env.step(k_i, ftree.index(state, i), ftree.index(actions, i), params)
            assert_trees_close(ftree.index(out, i), single, rtol=1e-6, atol=1e-6, name=f"step {t} env {i}")
        state = out[1]


def test_vmap_over_agents_equals_a_loop() -> None:
    """A shared per-agent policy vmapped over the agent axis acts as a loop over the agents would,
    and agents of one team are interchangeable: permuting them permutes obs and rewards."""
    env, params = marl.make("simple_spread")
    obs, state = env.reset(random.key(0), params)
    weights = torch.linspace(-1, 1, 18 * 5).reshape(18, 5)

    def policy(w: torch.Tensor, agent_obs: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return random.categorical(key, agent_obs @ w)

    keys = random.split(random.key(1), 3)
    assert_vmap_equals_loop(policy, (None, 0, 0), weights, obs["agent"], keys)
    actions = {"agent": torch.func.vmap(policy, in_dims=(None, 0, 0))(weights, obs["agent"], keys)}
    obs, state, rewards, _, _, _ = env.step(random.key(2), state, actions, params)

    perm = torch.tensor([2, 0, 1])
    moved = state._replace(
        pos=torch.cat([state.pos[:3][perm], state.pos[3:]]),
        vel=torch.cat([state.vel[:3][perm], state.vel[3:]]),
    )
    step = random_actions(env, random.key(3))
    permuted = env.step_env(random.key(4), moved, {"agent": step["agent"][perm]}, params)
    original = env.step_env(random.key(4), state, step, params)
    assert_trees_close(permuted[2]["agent"], original[2]["agent"][perm], name="rewards")
    # Positions and velocities of the others are listed in agent order, so compare own parts.
    assert_trees_close(permuted[0]["agent"][:, :10], original[0]["agent"][perm][:, :10], name="own obs")


@pytest.mark.parametrize(
    ("actions", "error", "match"),
    [
        (
            {"agent": torch.zeros(2, dtype=torch.int64)},
            ValueError,
            r"actions\['agent'\]: expected shape \[3\]",
        ),
        ({"agent": torch.zeros(3, 1, dtype=torch.int64)}, ValueError, r"expected shape \[3\]"),
        ({"agent": torch.zeros(3)}, TypeError, r"actions\['agent'\]: expected an integer tensor"),
        ({"agent": torch.tensor([0, 5, 1])}, ValueError, r"expected values in \[0, 5\)"),
        ({"agent": torch.tensor([0, -1, 1])}, ValueError, r"expected values in \[0, 5\)"),
        ({"agents": torch.zeros(3, dtype=torch.int64)}, ValueError, r"expected the teams \['agent'\]"),
        (torch.zeros(3, dtype=torch.int64), TypeError, r"actions: expected a dict team -> tensor"),
        ({"agent": [0, 1, 2]}, TypeError, r"actions\['agent'\]: expected a torch.Tensor"),
    ],
)
def test_bad_discrete_actions_are_clear_errors(actions, error, match) -> None:
    env, params = marl.make("simple_spread")
    _, state = env.reset(random.key(0), params)
    with pytest.raises(error, match=match):
        env.step(random.key(1), state, actions, params)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (torch.full((3, 5), math.nan), ValueError, r"actions\['agent'\]: expected finite values"),
        (torch.full((3, 5), math.inf), ValueError, "expected finite values"),
        (torch.zeros(3, 5, dtype=torch.int64), TypeError, "expected a floating tensor"),
        (torch.zeros(3, 4), ValueError, r"expected shape \[3, 5\]"),
    ],
)
def test_bad_continuous_actions_are_clear_errors(value, error, match) -> None:
    env, params = marl.make("simple_spread", continuous_actions=True)
    _, state = env.reset(random.key(0), params)
    with pytest.raises(error, match=match):
        env.step(random.key(1), state, {"agent": value}, params)


def test_batched_bad_actions_name_the_batch() -> None:
    env, params = marl.make("simple_spread")
    batched = marl.vmap(env, 4)
    _, state = batched.reset(random.key(0), params)
    with pytest.raises(ValueError, match=r"expected shape \[4, 3\] .*batch \[4\]"):
        batched.step(random.key(1), state, {"agent": torch.zeros(3, dtype=torch.int64)}, params)
    bad = torch.zeros(4, 3, dtype=torch.int64)
    bad[2, 1] = 7
    with pytest.raises(ValueError, match=r"expected values in \[0, 5\)"):
        batched.step(random.key(1), state, {"agent": bad}, params)


def test_continuous_actions_are_clipped_as_mpe2_clips_them() -> None:
    env, params = marl.make("simple_spread", continuous_actions=True)
    _, state = env.reset(random.key(0), params)
    actions = random_actions(env, random.key(1))
    wide = {"agent": actions["agent"] * 3 - 1}
    assert_trees_close(
        env.step_env(random.key(2), state, wide, params),
        env.step_env(random.key(2), state, {"agent": wide["agent"].clamp(0, 1)}, params),
    )


def test_registry_and_make_options() -> None:
    assert set(SCENARIOS) <= set(marl.registry())
    env, params = marl.make("mpe:simple_spread", N=5, max_cycles=40, local_ratio=0.0)
    assert len(env.agents) == 5 and params.max_steps_in_episode == 40 and params.local_ratio == 0.0
    assert not any(i.startswith("simple_") or i.startswith("mpe:") for i in funrl.envs.registry())
    with pytest.raises(ValueError, match="env_id: unknown multi-agent id 'simple_nothing'"):
        marl.make("simple_nothing")
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['speed'\]"):
        marl.make("simple_spread", speed=1.0)
    with pytest.raises(ValueError, match="local_ratio: expected a value in"):
        marl.make("simple_spread", local_ratio=1.5)


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_each_scenario_has_a_continuous_id(env_id: str) -> None:
    env, params = marl.make(f"mpe:{env_id}_continuous", max_cycles=7)
    reference, reference_params = marl.make(env_id, continuous_actions=True, max_cycles=7)
    assert env.continuous_actions and repr(env) == repr(reference) and params == reference_params
    assert env.action_spaces(params) == reference.action_spaces(reference_params)
    with pytest.raises(TypeError, match=rf"{env_id}_continuous: continuous_actions is fixed to True"):
        marl.make(f"{env_id}_continuous", continuous_actions=False)


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_reset_draws_mpe2s_ranges_and_uniform_goals(env_id: str) -> None:
    env, params = marl.make(env_id)
    _, states = marl.vmap(env, 3000).reset(random.key(0), params)
    a = env.num_agents
    agents, landmarks = states.pos[:, :a], states.pos[:, a:]
    r = env.landmark_range
    assert agents.abs().max() < 1 and agents.abs().max() > 0.99 and agents.mean().abs() < 0.05
    if env.num_landmarks:
        assert landmarks.abs().max() < r and landmarks.abs().max() > 0.99 * r
    assert bool((states.vel == 0).all() and (states.comm == 0).all() and (states.time == 0).all())
    if env_id in ("simple_spread", "simple_tag"):
        return
    counts = torch.bincount(states.goal.flatten(), minlength=env.num_landmarks).float()
    expected = states.goal.numel() / env.num_landmarks
    assert counts.numel() == env.num_landmarks
    assert bool(((counts - expected).abs() < 5 * expected**0.5).all()), counts


def test_simple_spread_takes_the_mappo_benchmarks_landmark_range() -> None:
    env, params = marl.make("simple_spread", landmark_range=0.8)
    _, states = marl.vmap(env, 3000).reset(random.key(0), params)
    landmarks, agents = states.pos[:, 3:], states.pos[:, :3]
    assert 0.79 < landmarks.abs().max() < 0.8 and agents.abs().max() > 0.99
    with pytest.raises(ValueError, match="landmark_range: expected a positive number, got 0"):
        marl.make("simple_spread", landmark_range=0)


@settings(max_examples=6)
@given(env_id=st.sampled_from(SCENARIOS), seed=st.integers(0, 2**31 - 1), continuous=st.booleans())
def test_vmap_of_step_over_keys_equals_a_loop(env_id: str, seed: int, continuous: bool) -> None:
    """Property: for any seed, torch.func.vmap of step over keys, states and actions equals a loop."""
    env, params = marl.make(env_id, continuous_actions=continuous)
    keys = random.split(random.key(seed), 3)
    _, states = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    actions = random_actions(env, random.fold_in(random.key(seed), 1), (3,))
    assert_vmap_equals_loop(env.step, (0, 0, 0, None), keys, states, actions, params)
