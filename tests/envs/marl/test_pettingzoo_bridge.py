"""Both PettingZoo bridges: to_pettingzoo passes PettingZoo's parallel_api_test and replays funrl's
episodes from a seed; from_pettingzoo on mpe2's envs gives funrl's contract and mpe2's numbers."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from mpe_reference import as_teams, make_reference, per_agent, random_actions
from pettingzoo.test import parallel_api_test

from funrl import random
from funrl.envs import marl
from funrl.testing import assert_trees_close

SCENARIOS = marl.SCENARIOS  # the *_continuous ids are these envs, covered by continuous_actions=True


@pytest.mark.parametrize("continuous_actions", [False, True], ids=["discrete", "continuous"])
@pytest.mark.parametrize("env_id", SCENARIOS)
def test_to_pettingzoo_passes_parallel_api_test(env_id: str, continuous_actions: bool) -> None:
    env, params = marl.make(env_id, continuous_actions=continuous_actions)
    parallel = marl.to_pettingzoo(env, params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel_api_test(parallel, num_cycles=60)
    assert [str(w.message) for w in caught] == []
    assert parallel.state().shape == parallel.state_space.shape


def test_to_pettingzoo_replays_funrl_from_a_seed() -> None:
    env, params = marl.make("simple_tag", max_cycles=5)
    parallel = marl.to_pettingzoo("mpe:simple_tag", params)
    obs, _ = parallel.reset(seed=5)
    key = random.key(5)
    key, sub = random.split(key)
    expected_obs, state = env.reset(sub, params)
    assert_trees_close(as_teams(env, obs, torch.float32), expected_obs, name="reset obs")
    for t in range(5):
        actions = random_actions(env, random.key(t))
        obs, rewards, terminated, truncated, _ = parallel.step(per_agent(env, actions))
        key, sub = random.split(key)
        expected = env.step_env(sub, state, actions, params)
        state = expected[1]
        assert_trees_close(as_teams(env, obs, torch.float32), expected[0], name=f"obs {t}")
        assert_trees_close(as_teams(env, rewards, torch.float32), expected[2], name=f"rewards {t}")
        assert_trees_close(as_teams(env, truncated, torch.bool), expected[4], name=f"truncated {t}")
        np.testing.assert_array_equal(parallel.state(), env.global_state(state, params).numpy())
    assert parallel.agents == []
    again, _ = parallel.reset(seed=5)
    assert_trees_close(as_teams(env, again, torch.float32), expected_obs, name="the same seed again")


def test_to_pettingzoo_bad_input_is_a_clear_error() -> None:
    parallel = marl.to_pettingzoo("simple_spread")
    with pytest.raises(RuntimeError, match="state: call reset first"):
        parallel.state()
    parallel.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions: every live agent acts at once; missing \['agent_2'\]"):
        parallel.step({"agent_0": 0, "agent_1": 0})
    with pytest.raises(ValueError, match=r"actions\['agent'\]: expected values in \[0, 5\)"):
        parallel.step({"agent_0": 0, "agent_1": 9, "agent_2": 0})
    continuous = marl.to_pettingzoo(marl.make("simple_spread", continuous_actions=True)[0])
    continuous.reset(seed=0)
    nan = np.full(5, math.nan, dtype=np.float32)
    with pytest.raises(ValueError, match=r"actions\['agent'\]: expected finite values"):
        continuous.step({"agent_0": nan, "agent_1": nan * 0 + 0.5, "agent_2": nan})
    with pytest.raises(TypeError, match="env_id_or_env: expected an id or a funrl.envs.marl.MultiAgentEnv"):
        marl.to_pettingzoo(42)


@pytest.mark.parametrize("env_id", SCENARIOS)
def test_from_pettingzoo_gives_funrls_teams_and_spaces(env_id: str) -> None:
    native, params = marl.make(env_id)
    bridged = marl.from_pettingzoo(make_reference(env_id, False))
    assert bridged.agents == native.agents
    assert bridged.teams == native.teams
    assert bridged.observation_spaces() == native.observation_spaces(params)
    assert bridged.action_spaces() == native.action_spaces(params)
    assert bridged.global_state_space().shape == native.global_state_space(params).shape
    assert bridged.default_params.max_steps_in_episode == params.max_steps_in_episode


def test_from_pettingzoo_steps_as_mpe2_does_across_an_auto_reset() -> None:
    bridged = marl.from_pettingzoo(make_reference("simple_tag", False))
    direct = make_reference("simple_tag", False)
    key = random.key(11)
    obs, state = bridged.reset(key)
    expected, _ = direct.reset(seed=marl.seed_of(key))
    assert_trees_close(obs, as_teams(bridged, expected, torch.float32), name="reset")
    for t in range(30):  # the episode ends after 25 steps
        k = random.fold_in(key, t)
        actions = random_actions(bridged, k)
        sent = {team: a.clone() for team, a in actions.items()}
        obs, state, rewards, terminated, truncated, info = bridged.step(k, state, actions)
        assert_trees_close(actions, sent, name=f"step {t}: the caller's actions are left as they were")
        ref_obs, ref_rew, ref_term, ref_trunc, _ = direct.step(per_agent(bridged, actions))
        where = f"step {t}"
        assert_trees_close(info["final_obs"], as_teams(bridged, ref_obs, torch.float32), name=f"{where} obs")
        assert_trees_close(rewards, as_teams(bridged, ref_rew, torch.float32), name=f"{where} rewards")
        assert_trees_close(truncated, as_teams(bridged, ref_trunc, torch.bool), name=f"{where} truncated")
        np.testing.assert_allclose(info["final_global_state"].numpy(), direct.state(), rtol=1e-6)
        if not direct.agents:
            expected, _ = direct.reset(seed=marl.seed_of(random.split(k)[1]))
            assert_trees_close(obs, as_teams(bridged, expected, torch.float32), name=f"{where} auto-reset")
    assert t > 25


def test_from_pettingzoo_refuses_stale_states_and_transforms() -> None:
    bridged = marl.from_pettingzoo(make_reference("simple_spread", False))
    _, old = bridged.reset(random.key(0))
    actions = random_actions(bridged, random.key(1))
    _, new, *_ = bridged.step(random.key(2), old, actions)
    with pytest.raises(ValueError, match="state: stale handle"):
        bridged.step(random.key(3), old, actions)
    with pytest.raises(ValueError, match=r"actions\['agent'\]: expected shape \[3\]"):
        bridged.step(random.key(3), new, {"agent": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(RuntimeError, match="from_pettingzoo: a host PettingZoo env cannot run under"):
        torch.func.vmap(bridged.reset)(random.split(random.key(0), 2))
    with pytest.raises(TypeError, match="parallel_env: expected a PettingZoo ParallelEnv"):
        marl.from_pettingzoo(object())


def test_pettingzoo_is_imported_on_first_use_only() -> None:
    """PettingZoo is optional: importing funrl.envs.marl and making an env must not import it."""
    code = (
        "import sys, funrl.envs.marl as m; m.make('simple_spread'); "
        "assert 'pettingzoo' not in sys.modules, 'imported with funrl'; m.to_pettingzoo; "
        "assert 'pettingzoo' in sys.modules; import funrl.envs as e; "
        "assert e.to_pettingzoo is m.to_pettingzoo and e.from_pettingzoo is m.from_pettingzoo"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])
