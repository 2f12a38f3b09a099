"""SAC agent: donated-buffer purity, seeds and sweeps under vmap, masks, action scaling, exact resume, errors."""

from __future__ import annotations

import math
from pathlib import Path

import offpolicy_checks as checks
import point_env
import pytest
import torch
from opt_states import with_learning_rate

from funrl import buffers, random, tree
from funrl.agents import common, sac

TINY = sac.SACConfig(
    env_id=point_env.ENV_ID,
    total_steps=2 * 2 * 8,
    num_envs=2,
    num_steps=2,
    train_frequency=2,
    buffer_size=32,
    batch_size=8,
    learning_starts=4,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def agent() -> common.Agent:
    return sac.make_train(TINY)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"total_steps": 0}, "total_steps"),
        ({"num_envs": 3, "train_frequency": 2}, "train_frequency"),
        ({"gamma": -0.1}, "gamma"),
        ({"tau": 2.0}, "tau"),
        ({"learning_starts": -5}, "learning_starts"),
        ({"policy_lr": 0.0}, "policy_lr"),
        ({"q_lr": -1e-3}, "q_lr"),
        ({"alpha": 0.0}, "alpha"),
        ({"buffer_size": True}, "buffer_size"),
    ],
)
def test_config_rejects_bad_values(overrides: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        sac.SACConfig(**overrides)


def test_make_train_rejects_discrete_env_and_wrong_config() -> None:
    with pytest.raises(ValueError, match="env_id: expected continuous"):
        sac.make_train(sac.SACConfig(env_id="CartPole-v1"))
    with pytest.raises(TypeError, match="config: expected a SACConfig"):
        sac.make_train(TINY.__dict__)
    with pytest.raises(
        ValueError, match=r"hparams: unknown \['learning_rate'\]; sweepable: \['policy_lr', 'q_lr'"
    ):
        sac.make_train(TINY).init(random.key(0), learning_rate=1e-3)


def test_update_is_pure_given_fresh_copies_and_stale_state_is_refused(agent: common.Agent) -> None:
    checks.check_update_is_pure_and_stale_state_is_refused(agent, seed=1)


def test_warm_up_acts_uniformly_then_trains_every_part(agent: common.Agent) -> None:
    state, run_key = common.init_state(agent, random.key(2))
    first, _ = agent.update(state, random.fold_in(run_key, 0))
    assert tree.tree_equal(first.params, state.params)  # 4 transitions: not past learning_starts
    assert tree.tree_equal(first.log_alpha, state.log_alpha)
    second, metrics = agent.update(first, random.fold_in(run_key, 1))
    for name in ("actor", "critic"):
        assert not tree.tree_allclose(second.params[name], first.params[name]), name
    assert not torch.equal(second.log_alpha, first.log_alpha)
    assert not tree.tree_allclose(second.target_critic, first.target_critic)
    # Polyak: the target moved by about tau of the distance, not all the way.
    assert not tree.tree_allclose(second.target_critic, second.params["critic"])
    stored = buffers.items_in_order(second.buffer)
    assert stored["action"].abs().max() <= 1.0  # the buffer holds actions in [-1, 1]
    # Warm-up actions are uniform over the whole box, not concentrated near the policy's mean.
    assert stored["action"][:4].abs().max() > 0.3
    assert set(metrics) >= {"critic_loss", "actor_loss", "alpha_loss", "alpha", "episode_return"}


def test_fixed_temperature_stays_fixed() -> None:
    agent = sac.make_train(sac.SACConfig(**{**TINY.__dict__, "autotune": False, "alpha": 0.5}))
    state, _ = common.train(agent, random.key(0), compile=False, num_updates=3)
    torch.testing.assert_close(state.log_alpha.exp(), torch.tensor(0.5))


def test_greedy_action_is_scaled_into_the_env_box(agent: common.Agent) -> None:
    state, _ = common.init_state(agent, random.key(0))
    params = tree.map(lambda p: p * 50.0, state.params)  # saturate tanh
    action = agent.greedy_action(params, torch.linspace(-1, 1, 9).reshape(9, 1))
    assert action.shape == (9, 1) and action.abs().max() <= 2.0 and action.abs().max() > 1.5


def test_vmapped_seeds_equal_single_runs(agent: common.Agent) -> None:
    checks.check_vmapped_seeds_equal_single_runs(agent, num_updates=4, loss="critic_loss")


def test_learning_rate_sweeps_equal_single_runs(agent: common.Agent) -> None:
    checks.check_learning_rate_sweep_equals_single_runs(agent, "policy_lr", num_updates=3)
    checks.check_learning_rate_sweep_equals_single_runs(agent, "q_lr", num_updates=3)


def test_non_finite_loss_names_update_seed_and_term(tmp_path: Path) -> None:
    agent, state, run_key = checks.two_seed_checkpoint("sac", TINY, sac.make_train, tmp_path / "run")
    state = state._replace(
        critic_opt=with_learning_rate(state.critic_opt, torch.tensor([1e-3, float("nan")]))
    )
    with pytest.raises(common.NonFiniteError, match=r"non-finite \w+ \(nan\) at update 3, seed 1"):
        common.train(
            agent, common.seed_keys(0, 2), compile=False, state=state, run_key=run_key, num_updates=2
        )


def test_resume_is_bitwise_exact(tmp_path: Path) -> None:
    checks.check_resume_is_bitwise_exact("sac", TINY, tmp_path, checkpoint_every=3, stop_after=4)


def test_losses_never_copy_the_critic_weights_per_batch_row(agent: common.Agent) -> None:
    # Each row's policy noise has its own key, but only that draw is vmapped over rows: the
    # networks see the whole batch. Vmapping the losses over rows turns every critic layer into a
    # batched matmul of the weights copied per row (batch x hidden x hidden), slow eager and
    # compiled. No op of a training update may see a tensor that large.
    state, run_key = common.init_state(agent, random.key(3))
    state, _ = agent.update(state, random.fold_in(run_key, 0))  # warm-up: fills learning_starts
    assert int(state.update_count) * TINY.steps_per_update >= TINY.learning_starts
    hidden = max(TINY.hidden_sizes)
    limit = TINY.batch_size * hidden * hidden
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        after, _ = agent.update(state, random.fold_in(run_key, 1))
    assert not tree.tree_allclose(after.params["critic"], state.params["critic"])  # it trained
    sizes = {
        (event.name, tuple(shape))
        for event in prof.events()
        for shape in event.input_shapes
        if shape and math.prod(shape) >= limit
    }
    assert not sizes, f"ops on tensors of batch x hidden x hidden elements or more: {sorted(sizes)[:5]}"
