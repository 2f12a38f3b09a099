"""Exact resume over a long run (issue 6, Reliability): 2000 PPO updates uninterrupted against the
same run killed between checkpoints and resumed from its folder; bitwise equal in eager mode.

The killed run is what a process killed at update 1950 leaves on disk: the folder is copied at the
moment the uninterrupted run has written its metrics up to update 1950 (or the first log point past
it), with its last checkpoint near update 1900 (checkpoints are written atomically, so any moment's
copy is a consistent folder). Resuming it in a fresh agent must restore the state of 1900 updates
and redo the updates past the checkpoint bit for bit: params, optimiser, env state, observation,
counters and every metrics row. The same run doubles as the uninterrupted reference, and the
checkpoint sits late in it, so the test costs 2100 eager updates (4 env steps each) instead of
4000; the real SIGKILL of a separate process is tested at 12 updates in ``test_ppo.py``.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch

from funrl import tree
from funrl.agents import common, ppo, run
from funrl.agents.checkpoint import load_checkpoint

NUM_UPDATES = 2000
CHECKPOINT_EVERY = 1900
LOG_EVERY = 50
KILLED_AT = 1950  # after the checkpoint of update 1900, before the final one

# The smallest PPO that still does everything: 2 CartPole envs x 2 steps (about 350 episodes end
# and auto-reset over the run), GAE, one epoch of one minibatch, an annealed learning rate.
CONFIG = ppo.PPOConfig(
    env_id="CartPole-v1",
    total_steps=2 * 2 * NUM_UPDATES,
    num_envs=2,
    num_steps=2,
    update_epochs=1,
    num_minibatches=1,
    hidden_sizes=(8,),
)


def train_run(out: Path, **kwargs) -> common.Agent:
    state, _ = run.train_run(
        "ppo",
        CONFIG if not kwargs.get("resume") else None,
        out,
        compile=False,
        progress=False,
        checkpoint_every=CHECKPOINT_EVERY,
        log_every=LOG_EVERY,
        **kwargs,
    )
    return state


@pytest.mark.slow
def test_resume_after_a_kill_between_checkpoints_is_bitwise_exact_over_2000_updates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CONFIG.num_updates == NUM_UPDATES
    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    write_metrics = run._write_metrics

    def write_then_snapshot(out: Path, rows: list[dict], header: list[str], append: bool) -> None:
        write_metrics(out, rows, header, append)
        if rows[-1]["update"] >= KILLED_AT and not killed_dir.exists():
            shutil.copytree(out, killed_dir)  # the folder a kill at this moment leaves behind

    monkeypatch.setattr(run, "_write_metrics", write_then_snapshot)
    full = train_run(full_dir)
    monkeypatch.undo()

    template = common.init_state(ppo.make_train(CONFIG), common.seed_keys(0, 1))
    (at_kill, _), meta = load_checkpoint(killed_dir / run.CHECKPOINT, template)
    rows_at_kill = len((killed_dir / run.METRICS).read_text().splitlines()) - 1
    # The last checkpoint is from about update CHECKPOINT_EVERY (the first log point past it), and
    # metrics past it, to be dropped on resume, were written up to about update KILLED_AT.
    assert CHECKPOINT_EVERY <= meta["update"] < KILLED_AT <= rows_at_kill < KILLED_AT + LOG_EVERY
    assert not tree.tree_equal(at_kill.params, full.params)  # the resumed part has work to do

    resumed = train_run(killed_dir, resume=True)
    assert int(resumed.update_count.reshape(-1)[0]) == NUM_UPDATES
    assert tree.tree_equal(resumed.params, full.params)
    assert tree.tree_equal(resumed, full)  # optimiser, env state, obs, counters, hyper-parameters
    full_rows = (full_dir / run.METRICS).read_text().splitlines()
    assert (killed_dir / run.METRICS).read_text().splitlines() == full_rows
    assert len(full_rows) == 1 + NUM_UPDATES
    with (full_dir / run.METRICS).open(newline="") as f:
        episodes = [float(row["episodes"]) for row in csv.DictReader(f)]
    print(f"episodes ended: {sum(episodes):.0f}, {sum(episodes[meta['update'] :]):.0f} of them resumed")
    assert sum(episodes) > 100, "the run should cross many episode ends and auto-resets"
    assert sum(episodes[meta["update"] :]) > 5, "so should the resumed part"
    assert all(torch.isfinite(leaf).all() for leaf in tree.leaves(full.params))
