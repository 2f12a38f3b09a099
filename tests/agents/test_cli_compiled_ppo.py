"""``funrl train ppo`` compiled with several seeds, as the README runs it, from fresh processes:
a run killed between checkpoints and resumed equals the uninterrupted one, metrics.csv has a row
per update per seed, the progress bar runs, and the agent learns CartPole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_runs import funrl, metrics_rows

from funrl import tree
from funrl.agents import run

SEEDS = 2
UPDATES = 60  # of PPO's default 4 envs x 128 steps
KILLED_AT = 50  # metrics are written every 10 updates; the last checkpoint before it is update 40
CHECKPOINT_EVERY = 20

# `funrl train` with one addition: when the metrics of update KILLED_AT are on disk, the run folder
# is copied, which is what a kill at that moment leaves behind (every file is written atomically).
TRAIN_AND_SNAPSHOT = """
import shutil, sys
from funrl.__main__ import main
from funrl.agents import run

write_metrics, killed_at, copy_to = run._write_metrics, int(sys.argv[1]), sys.argv[2]

def write_then_snapshot(out, rows, header, append):
    write_metrics(out, rows, header, append)
    if rows[-1]["update"] == killed_at:
        shutil.copytree(out, copy_to)

run._write_metrics = write_then_snapshot
sys.exit(main(sys.argv[3:]))
"""


def _checkpoint(out: Path) -> dict:
    return torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)


@pytest.mark.slow
def test_ppo_compiled_with_seeds_resumes_exactly_and_learns(tmp_path: Path) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, "-c", TRAIN_AND_SNAPSHOT, str(KILLED_AT), str(killed),
         "train", "ppo", "--env", "CartPole-v1", "--total-steps", str(UPDATES * 512), "--seeds", str(SEEDS),
         "--checkpoint-every", str(CHECKPOINT_EVERY), "--out", str(full)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert f"ppo CartPole-v1 x{SEEDS}: 100%" in proc.stderr  # the default progress bar ran to the end

    rows = metrics_rows(full)
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [
        (u, s) for u in range(1, UPDATES + 1) for s in range(SEEDS)
    ]
    assert json.loads(_checkpoint(killed)["metadata"])["update"] == 40
    assert len(metrics_rows(killed)) == KILLED_AT * SEEDS  # rows past the checkpoint, dropped on resume

    proc = funrl("train", "--resume", "--out", str(killed), "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert (killed / run.METRICS).read_text() == (full / run.METRICS).read_text()
    resumed, uninterrupted = _checkpoint(killed), _checkpoint(full)
    assert resumed["structure"] == uninterrupted["structure"]
    assert tree.tree_equal(resumed["leaves"], uninterrupted["leaves"])

    proc = funrl("eval", str(full), "--episodes", "10", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # A random CartPole policy lasts about 22 steps; each seed must do far better.
    assert min(result["per_seed"]) >= 150.0, result
