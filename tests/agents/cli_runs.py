"""``python -m funrl`` in a fresh process, as users run it: the helpers of the compiled CLI tests
(one file per agent, ``test_cli_compiled_*.py``, so that pytest-xdist spreads their compiles)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from funrl import tree
from funrl.__main__ import main
from funrl.agents import common, run
from funrl.agents.checkpoint import load_checkpoint

# `funrl train ARGS` with two additions. When the metrics of update KILLED_AT (or the first log
# point past it) are on disk, the run folder is copied to COPY_TO, which is what a kill at that
# moment leaves behind (every file is written atomically). Unless RESUMED_TO is "-", a copy of
# COPY_TO is then resumed there by `funrl train --resume` in the same process: the compiled step
# is built once for both runs, and the resumed run starts from the files alone (the agent and its
# state are rebuilt from config.json and the checkpoint).
# Run as `python -c TRAIN_AND_SNAPSHOT KILLED_AT COPY_TO RESUMED_TO train ARGS`.
TRAIN_AND_SNAPSHOT = """
import os, shutil, sys
from funrl.__main__ import main
from funrl.agents import run

write_metrics, killed_at, copy_to, resumed_to = run._write_metrics, int(sys.argv[1]), sys.argv[2], sys.argv[3]

def write_then_snapshot(out, rows, header, append):
    write_metrics(out, rows, header, append)
    if rows[-1]["update"] >= killed_at and not os.path.exists(copy_to):
        shutil.copytree(out, copy_to)

run._write_metrics = write_then_snapshot
code = main(sys.argv[4:])
run._write_metrics = write_metrics
if code == 0 and resumed_to != "-":
    shutil.copytree(copy_to, resumed_to)
    code = main(["train", "--resume", "--out", resumed_to, "--no-progress"])
sys.exit(code)
"""


def funrl(
    *args: str,
    cwd: Path,
    timeout: int = 900,
    killed_at: int | None = None,
    copy_to: Path | None = None,
    resumed_to: Path | None = None,
):
    """``python -m funrl ARGS`` in a fresh interpreter, stdout and stderr captured; with
    ``killed_at``, the run folder as a kill after update ``killed_at``'s metrics leaves it is
    copied to ``copy_to``, and with ``resumed_to`` a copy of that is resumed there afterwards
    (:data:`TRAIN_AND_SNAPSHOT`)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = ["-m", "funrl"]
    if killed_at is not None:
        command = ["-c", TRAIN_AND_SNAPSHOT, str(killed_at), str(copy_to), str(resumed_to or "-")]
    return subprocess.run(
        [sys.executable, *command, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def checkpoint(out: Path) -> dict[str, Any]:
    return torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)


def check_resumed_run_equals_the_uninterrupted_run(
    killed: Path, resumed: Path, full: Path, killed_at: int
) -> None:
    """``resumed``, a copy of the folder a kill after update ``killed_at`` left (``killed``: its
    last checkpoint before that, metrics past the checkpoint) continued by ``funrl train
    --resume``, ends with the uninterrupted run's metrics and state, bitwise."""
    checkpoint_at = json.loads(checkpoint(killed)["metadata"])["update"]
    assert 0 < checkpoint_at < killed_at <= int(metrics_rows(killed)[-1]["update"])  # rows to redo
    assert (resumed / run.METRICS).read_text() == (full / run.METRICS).read_text()
    after_resume, uninterrupted = checkpoint(resumed), checkpoint(full)
    assert after_resume["structure"] == uninterrupted["structure"]
    assert tree.tree_equal(after_resume["leaves"], uninterrupted["leaves"])


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
    snapshot_at: int | None = None,
    resume: bool = False,
    checkpoint_every: int = 50,
) -> dict[str, Any]:
    """Train ``algo`` on ``env_id`` compiled (the default) for ``seeds`` vmapped seeds and evaluate
    the run (``funrl eval`` in this process); returns ``eval --json``'s result.

    Checks the run folder (one metrics row per update per seed) and that the compiled run reports
    the metrics of the same run trained eagerly in-process over its first ``compare_updates``
    updates. With ``snapshot_at``, also over the ``compare_updates`` after the checkpoint that a
    kill after update ``snapshot_at`` leaves, which must be past the agent's warm-up (gradient
    steps run there); with ``resume`` too, a copy of that killed folder is resumed (in the
    training's process, after it) and must end equal to the uninterrupted run.
    """
    out, killed, resumed = (tmp_path / f"{algo}-{name}" for name in ("run", "killed", "resumed"))
    proc = funrl(
        "train", algo, "--env", env_id, *budget, "--seeds", str(seeds), "--out", str(out),
        "--checkpoint-every", str(checkpoint_every), "--no-progress",
        cwd=tmp_path, killed_at=snapshot_at, copy_to=killed, resumed_to=resumed if resume else None,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "Warning" not in proc.stderr, proc.stderr[-6000:]  # torch's included: a user reads them all
    assert "trained in" in proc.stdout
    for name in (run.CONFIG, run.METRICS, run.CHECKPOINT):
        assert (out / name).is_file(), name
    rows = metrics_rows(out)
    num_updates = int(rows[-1]["update"])
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [
        (u, s) for u in range(1, num_updates + 1) for s in range(seeds)
    ]
    check_compiled_metrics_equal_eager(out, rows, compare_updates)
    if snapshot_at is not None:
        _, config, _ = run.read_run(out)
        checkpoint_at = json.loads(checkpoint(killed)["metadata"])["update"]
        assert checkpoint_at * config.num_envs * config.num_steps >= config.learning_starts  # trained
        check_compiled_metrics_equal_eager(out, rows, compare_updates, start=killed)
        if resume:
            check_resumed_run_equals_the_uninterrupted_run(killed, resumed, out, snapshot_at)
    # Evaluation compiles nothing: in this process, as tests/agents/test_cli_matrix.py runs it.
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["eval", str(out), "--episodes", "2", "--json"]) == 0
    result = json.loads(printed.getvalue().strip().splitlines()[-1])
    assert set(result) == {"mean_return", "std_return", "per_seed"} and len(result["per_seed"]) == seeds
    return result


def check_compiled_metrics_equal_eager(
    out: Path, rows: list[dict[str, str]], updates: int, start: Path | None = None
) -> None:
    """``updates`` updates of the run in ``out`` (compiled) against the same updates trained
    eagerly: the first ones, or with ``start``, those after the checkpoint in that folder."""
    algo, config, meta = run.read_run(out)
    agent = run.build_agent(algo, config, "cpu")
    keys = common.seed_keys(meta["seed"], meta["num_seeds"])
    state = run_key = None
    done = 0
    if start is not None:
        template = common.init_state(agent, keys)
        (state, run_key), checkpoint_meta = load_checkpoint(start / run.CHECKPOINT, template)
        done = checkpoint_meta["update"]
    _, eager = common.train(agent, keys, compile=False, state=state, run_key=run_key, num_updates=updates)
    compared = rows[done * meta["num_seeds"] : (done + updates) * meta["num_seeds"]]
    assert int(compared[0]["update"]) == done + 1 and int(compared[-1]["update"]) == done + updates
    for name, values in eager.items():
        compiled = torch.tensor([float(r[name]) for r in compared])
        torch.testing.assert_close(
            compiled.reshape(values.shape), values.to(torch.float32), rtol=1e-4, atol=1e-5, equal_nan=True,
            msg=lambda m, name=name: f"{name} after update {done}: {m}",
        )  # fmt: skip
