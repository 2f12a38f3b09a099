"""``python -m funrl`` in a fresh process, as users run it: the helpers of the compiled CLI tests
(one file per agent, ``test_cli_compiled_*.py``, so that pytest-xdist spreads their compiles)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from funrl import tree
from funrl.agents import common, run

# `funrl train ARGS` with one addition: when the metrics of update KILLED_AT (or the first log
# point past it) are on disk, the run folder is copied to COPY_TO, which is what a kill at that
# moment leaves behind (every file is written atomically).
# Run as `python -c TRAIN_AND_SNAPSHOT KILLED_AT COPY_TO train ARGS`.
TRAIN_AND_SNAPSHOT = """
import os, shutil, sys
from funrl.__main__ import main
from funrl.agents import run

write_metrics, killed_at, copy_to = run._write_metrics, int(sys.argv[1]), sys.argv[2]

def write_then_snapshot(out, rows, header, append):
    write_metrics(out, rows, header, append)
    if rows[-1]["update"] >= killed_at and not os.path.exists(copy_to):
        shutil.copytree(out, copy_to)

run._write_metrics = write_then_snapshot
sys.exit(main(sys.argv[3:]))
"""


def funrl(
    *args: str, cwd: Path, timeout: int = 900, killed_at: int | None = None, copy_to: Path | None = None
):
    """``python -m funrl ARGS`` in a fresh interpreter, stdout and stderr captured; with
    ``killed_at``, the run folder as a kill after update ``killed_at``'s metrics leaves it is
    copied to ``copy_to`` (:data:`TRAIN_AND_SNAPSHOT`)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = (
        ["-m", "funrl"] if killed_at is None else ["-c", TRAIN_AND_SNAPSHOT, str(killed_at), str(copy_to)]
    )
    return subprocess.run(
        [sys.executable, *command, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def checkpoint(out: Path) -> dict[str, Any]:
    return torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)


def resume_and_check_it_equals_the_uninterrupted_run(killed: Path, full: Path, killed_at: int) -> None:
    """``funrl train --resume`` of the folder a kill after update ``killed_at`` left (its last
    checkpoint before that, metrics past the checkpoint) ends with the uninterrupted run's metrics
    and state, bitwise."""
    checkpoint_at = json.loads(checkpoint(killed)["metadata"])["update"]
    assert 0 < checkpoint_at < killed_at <= int(metrics_rows(killed)[-1]["update"])  # rows to redo
    proc = funrl("train", "--resume", "--out", str(killed), "--no-progress", cwd=killed.parent)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert (killed / run.METRICS).read_text() == (full / run.METRICS).read_text()
    resumed, uninterrupted = checkpoint(killed), checkpoint(full)
    assert resumed["structure"] == uninterrupted["structure"]
    assert tree.tree_equal(resumed["leaves"], uninterrupted["leaves"])


def metrics_rows(out: Path) -> list[dict[str, str]]:
    with (out / run.METRICS).open(newline="") as f:
        return list(csv.DictReader(f))


def train_compiled_then_eval(
    algo: str,
    env_id: str,
    budget: list[str],
    seeds: int,
    tmp_path: Path,
    compare_updates: int,
    killed_at: int | None = None,
    checkpoint_every: int = 50,
) -> dict[str, Any]:
    """Train ``algo`` on ``env_id`` compiled (the default) for ``seeds`` vmapped seeds and evaluate
    the run; returns ``eval --json``'s result.

    Checks the run folder (one metrics row per update per seed) and that the compiled run's first
    ``compare_updates`` updates report the metrics of the same run trained eagerly in-process.
    With ``killed_at``, the folder a kill after that update leaves is resumed and must end equal
    to the uninterrupted run.
    """
    out, killed = tmp_path / f"{algo}-run", tmp_path / f"{algo}-killed"
    proc = funrl(
        "train", algo, "--env", env_id, *budget, "--seeds", str(seeds), "--out", str(out),
        "--checkpoint-every", str(checkpoint_every), "--no-progress",
        cwd=tmp_path, killed_at=killed_at, copy_to=killed,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "trained in" in proc.stdout
    for name in (run.CONFIG, run.METRICS, run.CHECKPOINT):
        assert (out / name).is_file(), name
    rows = metrics_rows(out)
    num_updates = int(rows[-1]["update"])
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [
        (u, s) for u in range(1, num_updates + 1) for s in range(seeds)
    ]
    check_compiled_metrics_equal_eager(out, rows, compare_updates)
    if killed_at is not None:
        resume_and_check_it_equals_the_uninterrupted_run(killed, out, killed_at)
    proc = funrl("eval", str(out), "--episodes", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"mean_return", "std_return", "per_seed"} and len(result["per_seed"]) == seeds
    return result


def check_compiled_metrics_equal_eager(out: Path, rows: list[dict[str, str]], updates: int) -> None:
    """The first ``updates`` updates of the run in ``out`` (compiled) against the same run eagerly."""
    algo, config, meta = run.read_run(out)
    agent = run.build_agent(algo, config, "cpu")
    keys = common.seed_keys(meta["seed"], meta["num_seeds"])
    _, eager = common.train(agent, keys, compile=False, num_updates=updates)
    for name, values in eager.items():
        compiled = torch.tensor([float(r[name]) for r in rows[: updates * meta["num_seeds"]]])
        torch.testing.assert_close(
            compiled.reshape(values.shape), values.to(torch.float32), rtol=1e-4, atol=1e-5, equal_nan=True,
            msg=lambda m, name=name: f"{name}: {m}",
        )  # fmt: skip
