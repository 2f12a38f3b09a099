"""Checks the off-policy agent tests (DQN, SAC, TD3) share: each takes the agent or config under test.

A plain module (imported like ``point_env``), so each test file keeps its own tiny config and
names the check it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from funrl import buffers, random, tree
from funrl.agents import common, run
from funrl.agents.checkpoint import load_checkpoint


def fresh(state: Any) -> Any:
    """An independent copy (new buffer storage and counters): what `update` may consume."""
    return tree.map(torch.clone, state)


def check_update_is_pure_and_stale_state_is_refused(agent: common.Agent, seed: int) -> None:
    """Fresh copies of a state give equal outputs; the donated original gives them once, then is stale."""
    state, run_key = common.init_state(agent, random.key(seed))
    state, _ = agent.update(state, random.fold_in(run_key, 0))
    key = random.fold_in(run_key, 1)
    snapshot = fresh(state)
    a, metrics_a = agent.update(fresh(state), key)
    b, metrics_b = agent.update(fresh(state), key)
    assert tree.tree_equal(a, b) and tree.tree_equal(metrics_a, metrics_b)
    c, _ = agent.update(state, key)  # consumes `state`'s storage
    assert tree.tree_equal(c, a)
    # Donation touches the replay storage only: every other leaf of `state` is as it was.
    assert tree.tree_equal(state._replace(buffer=None), snapshot._replace(buffer=None))
    assert not tree.tree_equal(state.buffer.experience, snapshot.buffer.experience)
    with pytest.raises(buffers.StaleStateError, match="stale"):
        agent.update(state, key)


def check_vmapped_seeds_equal_single_runs(agent: common.Agent, num_updates: int, loss: str) -> None:
    """Two seeds trained under vmap equal each seed trained alone (params and the ``loss`` metric)."""
    keys = common.seed_keys(0, 2)
    state_v, metrics_v = common.train(agent, keys, compile=False, num_updates=num_updates)
    for i in range(2):
        state_i, metrics_i = common.train(agent, keys[i], compile=False, num_updates=num_updates)
        assert tree.tree_allclose(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(metrics_v[loss][:, i], metrics_i[loss], rtol=1e-4, atol=1e-5, equal_nan=True)


def check_learning_rate_sweep_equals_single_runs(
    agent: common.Agent, name: str, num_updates: int, values: tuple[float, float] = (1e-2, 1e-4)
) -> None:
    """Two seeds from one key with the sweepable ``name`` at two ``values`` under vmap: each equals
    the single run with its value, and they differ from each other."""
    keys = torch.stack([random.key(7)] * 2)
    swept = torch.tensor(values)
    state_v, _ = common.train(agent, keys, compile=False, num_updates=num_updates, hparams={name: swept})
    assert not tree.tree_allclose(tree.index(state_v.params, 0), tree.index(state_v.params, 1)), name
    for i in range(2):
        state_i, _ = common.train(
            agent, keys[i], compile=False, num_updates=num_updates, hparams={name: float(swept[i])}
        )
        assert tree.tree_allclose(tree.index(state_v.params, i), state_i.params, rtol=1e-5, atol=1e-5), name


def two_seed_checkpoint(algo: str, config: Any, make_train: Any, out: Path) -> tuple[common.Agent, Any, Any]:
    """``(agent, state, run_key)`` of two seeds after two updates, read back from a run's checkpoint."""
    run.train_run(algo, config, out, num_seeds=2, compile=False, progress=False, stop_after=2, log_every=1)
    agent = make_train(config)
    (state, run_key), _ = load_checkpoint(
        out / run.CHECKPOINT, common.init_state(agent, common.seed_keys(0, 2))
    )
    return agent, state, run_key


def check_resume_is_bitwise_exact(
    algo: str, config: Any, tmp_path: Path, checkpoint_every: int, stop_after: int
) -> Path:
    """A run stopped after ``stop_after`` updates and resumed equals an uninterrupted run, state and
    metrics rows alike; returns the resumed run's folder."""
    options = dict(compile=False, progress=False, checkpoint_every=checkpoint_every)
    full, _ = run.train_run(algo, config, tmp_path / "full", **options)
    part = tmp_path / "part"
    run.train_run(algo, config, part, stop_after=stop_after, **options)
    resumed, _ = run.train_run(algo, None, part, resume=True, **options)
    assert tree.tree_equal(resumed, full)  # params, targets, optimisers, replay storage, env state
    rows = (part / run.METRICS).read_text().splitlines()
    assert rows[1:] == (tmp_path / "full" / run.METRICS).read_text().splitlines()[1:]
    return part
