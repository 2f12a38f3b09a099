"""DQN agent: donated-buffer purity, seeds and sweeps under vmap, schedules and masks, exact resume, errors."""

from __future__ import annotations

import json
from pathlib import Path

import offpolicy_checks as checks
import pytest
import torch
from opt_states import with_learning_rate

from funrl import random, tree
from funrl.agents import common, dqn, ppo, run

TINY = dqn.DQNConfig(
    env_id="CartPole-v1",
    total_steps=2 * 2 * 10,
    num_envs=2,
    num_steps=2,
    train_frequency=2,
    buffer_size=32,
    batch_size=8,
    learning_starts=4,
    target_network_frequency=4,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def agent() -> common.Agent:
    return dqn.make_train(TINY)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"total_steps": 0}, "total_steps"),
        ({"num_envs": 2, "num_steps": 3, "train_frequency": 4}, "train_frequency"),
        ({"target_network_frequency": 27}, "target_network_frequency"),
        ({"gamma": 1.5}, "gamma"),
        ({"exploration_fraction": -0.1}, "exploration_fraction"),
        ({"learning_starts": -1}, "learning_starts"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"loss_type": "l1"}, "loss_type"),
        ({"total_steps": 5}, "total_steps"),
        ({"batch_size": 2.5}, "batch_size"),
    ],
)
def test_config_rejects_bad_values(overrides: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        dqn.DQNConfig(**overrides)


def test_make_train_rejects_continuous_env_and_wrong_config() -> None:
    with pytest.raises(TypeError, match="config: expected a DQNConfig"):
        dqn.make_train(ppo.PPOConfig())
    with pytest.raises(ValueError, match="unknown"):
        dqn.make_train(dqn.DQNConfig(env_id="NoSuchEnv-v0"))


def test_linear_epsilon_matches_cleanrl_schedule() -> None:
    steps = torch.tensor([0, 100, 250, 500, 501, 10_000])
    got = dqn.linear_epsilon(1.0, 0.05, 500.0, steps)
    # CleanRL: max(slope * t + start_e, end_e), slope = (end_e - start_e) / duration.
    expected = torch.tensor([max((0.05 - 1.0) / 500.0 * t + 1.0, 0.05) for t in steps.tolist()])
    torch.testing.assert_close(got, expected)


def test_epsilon_greedy_extremes() -> None:
    q = torch.tensor([[0.0, 1.0, 0.5]] * 256)
    greedy = dqn.epsilon_greedy(random.key(0), q, torch.tensor(0.0))
    assert torch.equal(greedy, torch.ones(256, dtype=torch.int64))
    uniform = dqn.epsilon_greedy(random.key(0), q, torch.tensor(1.0))
    counts = torch.bincount(uniform, minlength=3)
    assert counts.sum() == 256 and (counts > 50).all(), counts  # each action ~85 of 256


def test_update_is_pure_given_fresh_copies_and_stale_state_is_refused(agent: common.Agent) -> None:
    checks.check_update_is_pure_and_stale_state_is_refused(agent, seed=3)


def test_learning_starts_masks_gradient_steps_then_trains(agent: common.Agent) -> None:
    state, run_key = common.init_state(agent, random.key(5))
    first, _ = agent.update(state, random.fold_in(run_key, 0))  # 4 transitions: not > learning_starts
    assert tree.tree_equal(first.params, state.params) and int(first.gradient_count) == 0
    second, _ = agent.update(first, random.fold_in(run_key, 1))  # 8 transitions: 2 gradient steps
    assert not tree.tree_allclose(second.params, first.params)
    assert int(second.gradient_count) == 2
    # target_network_frequency 4 / train_frequency 2: a hard copy after every 2nd gradient step.
    assert tree.tree_equal(second.target_params, second.params)
    third, _ = agent.update(second, random.fold_in(run_key, 2))
    assert int(third.gradient_count) == 4 and tree.tree_equal(third.target_params, third.params)


def test_vmapped_seeds_equal_single_runs(agent: common.Agent) -> None:
    checks.check_vmapped_seeds_equal_single_runs(agent, num_updates=4, loss="loss")


def test_non_finite_loss_names_update_seed_and_term(tmp_path: Path) -> None:
    agent, state, run_key = checks.two_seed_checkpoint("dqn", TINY, dqn.make_train, tmp_path / "run")
    state = state._replace(
        opt_state=with_learning_rate(state.opt_state, torch.tensor([2.5e-4, float("nan")]))
    )
    with pytest.raises(common.NonFiniteError, match=r"non-finite loss .* at update 3, seed 1"):
        common.train(
            agent, common.seed_keys(0, 2), compile=False, state=state, run_key=run_key, num_updates=2
        )


def test_learning_rate_sweep_equals_single_runs(agent: common.Agent) -> None:
    checks.check_learning_rate_sweep_equals_single_runs(agent, "learning_rate", num_updates=3)


def test_resume_is_bitwise_exact(tmp_path: Path) -> None:
    part = checks.check_resume_is_bitwise_exact("dqn", TINY, tmp_path, checkpoint_every=4, stop_after=5)
    assert json.loads((part / run.CONFIG).read_text())["algo"] == "dqn"
