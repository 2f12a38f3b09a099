"""TD3 agent: donated-buffer purity, seeds under vmap, the delayed actor, exact resume, errors."""

from __future__ import annotations

from pathlib import Path

import offpolicy_checks as checks
import point_env
import pytest
import torch
from opt_states import with_learning_rate

from funrl import buffers, random, tree
from funrl.agents import common, td3

TINY = td3.TD3Config(
    env_id=point_env.ENV_ID,
    total_steps=2 * 2 * 8,
    num_envs=2,
    num_steps=2,
    train_frequency=4,
    buffer_size=32,
    batch_size=8,
    learning_starts=4,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def agent() -> common.Agent:
    return td3.make_train(TINY)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"total_steps": -1}, "total_steps"),
        ({"num_envs": 3, "train_frequency": 2}, "train_frequency"),
        ({"gamma": 1.01}, "gamma"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"policy_noise": -0.2}, "policy_noise"),
        ({"exploration_noise": -1.0}, "exploration_noise"),
        ({"policy_frequency": 0}, "policy_frequency"),
        ({"batch_size": "256"}, "batch_size"),
    ],
)
def test_config_rejects_bad_values(overrides: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        td3.TD3Config(**overrides)


def test_make_train_rejects_discrete_env() -> None:
    with pytest.raises(ValueError, match="env_id: expected continuous"):
        td3.make_train(td3.TD3Config(env_id="CartPole-v1"))
    with pytest.raises(TypeError, match="config: expected a TD3Config"):
        td3.make_train(None)


def test_update_is_pure_given_fresh_copies_and_stale_state_is_refused(agent: common.Agent) -> None:
    checks.check_update_is_pure_and_stale_state_is_refused(agent, seed=1)


def test_actor_and_targets_move_every_policy_frequency_steps(agent: common.Agent) -> None:
    state, run_key = common.init_state(agent, random.key(4))
    s1, _ = agent.update(state, random.fold_in(run_key, 0))  # warm-up: nothing trains
    assert tree.tree_equal(s1.params, state.params) and int(s1.gradient_count) == 0
    s2, _ = agent.update(s1, random.fold_in(run_key, 1))  # gradient step 1: critics only
    assert int(s2.gradient_count) == 1
    assert not tree.tree_allclose(s2.params["critic"], s1.params["critic"])
    assert tree.tree_equal(s2.params["actor"], s1.params["actor"])
    assert tree.tree_equal(s2.target_params, s1.target_params)
    assert tree.tree_equal(s2.actor_opt, s1.actor_opt)
    s3, _ = agent.update(s2, random.fold_in(run_key, 2))  # gradient step 2: actor and targets too
    assert not tree.tree_allclose(s3.params["actor"], s2.params["actor"])
    assert not tree.tree_allclose(s3.target_params["actor"], s2.target_params["actor"])
    assert not tree.tree_allclose(s3.target_params["critic"], s2.target_params["critic"])
    stored = buffers.items_in_order(s3.buffer)
    assert stored["action"].abs().max() <= 1.0


def test_greedy_action_is_scaled_into_the_env_box(agent: common.Agent) -> None:
    state, _ = common.init_state(agent, random.key(0))
    params = tree.map(lambda p: p * 50.0, state.params)
    action = agent.greedy_action(params, torch.linspace(-1, 1, 9).reshape(9, 1))
    assert action.shape == (9, 1) and action.abs().max() <= 2.0 and action.abs().max() > 1.5


def test_vmapped_seeds_equal_single_runs(agent: common.Agent) -> None:
    checks.check_vmapped_seeds_equal_single_runs(agent, num_updates=5, loss="critic_loss")


def test_non_finite_loss_names_update_seed_and_term(tmp_path: Path) -> None:
    agent, state, run_key = checks.two_seed_checkpoint("td3", TINY, td3.make_train, tmp_path / "run")
    lr = torch.tensor([3e-4, float("inf")])
    state = state._replace(critic_opt=with_learning_rate(state.critic_opt, lr))
    with pytest.raises(
        common.NonFiniteError, match=r"non-finite (grad_norm|critic_loss|actor_loss) .* at update 4, seed 1"
    ):
        common.train(
            agent, common.seed_keys(0, 2), compile=False, state=state, run_key=run_key, num_updates=3
        )


def test_sweeps_equal_single_runs(agent: common.Agent) -> None:
    checks.check_learning_rate_sweep_equals_single_runs(agent, "learning_rate", num_updates=3)
    checks.check_learning_rate_sweep_equals_single_runs(
        agent, "exploration_noise", num_updates=2, values=(0.0, 0.5)
    )


def test_resume_is_bitwise_exact(tmp_path: Path) -> None:
    checks.check_resume_is_bitwise_exact("td3", TINY, tmp_path, checkpoint_every=3, stop_after=4)
