"""``funrl train ppo`` compiled with several seeds, as the README runs it, from a fresh process: a
copy of the run as a kill between checkpoints leaves it, resumed (in that process, after the run),
equals the uninterrupted one, metrics.csv has a row per update per seed, the first update reports
eager's metrics, the progress bar runs, and the agent learns CartPole. A second process with
another learning rate loads the saved step instead of compiling it, and reports its own run."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from cli_runs import (
    check_compiled_metrics_equal_eager,
    check_resumed_run_equals_the_uninterrupted_run,
    funrl,
    metrics_rows,
)

from funrl import control
from funrl.__main__ import main

SEEDS = 2
UPDATES = 60  # of PPO's default 4 envs x 128 steps
KILLED_AT = 50  # between checkpoints (every 20 updates, at the log points: every 10)


@pytest.mark.slow
def test_ppo_compiled_with_seeds_resumes_exactly_and_learns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A saved-steps folder of its own: the suite's shared one gains files from the other worker.
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path / "cache"))
    full, killed, resumed = tmp_path / "full", tmp_path / "killed", tmp_path / "resumed"
    proc = funrl(
        "train", "ppo", "--env", "CartPole-v1", "--total-steps", str(UPDATES * 512), "--seeds", str(SEEDS),
        "--checkpoint-every", "20", "--out", str(full),
        cwd=tmp_path, killed_at=KILLED_AT, copy_to=killed, resumed_to=resumed,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert f"ppo CartPole-v1 x{SEEDS}: 100%" in proc.stderr  # the default progress bar ran to the end
    assert "Warning" not in proc.stderr, proc.stderr[-6000:]  # torch's included: a user reads them all

    rows = metrics_rows(full)
    assert [(int(r["update"]), int(r["seed"])) for r in rows] == [
        (u, s) for u in range(1, UPDATES + 1) for s in range(SEEDS)
    ]
    check_compiled_metrics_equal_eager(full, rows, updates=1)  # a rollout and 16 minibatch steps
    check_resumed_run_equals_the_uninterrupted_run(killed, resumed, full, KILLED_AT)

    # A warm start: every compile saves its step (atomically, a new file), so a process that
    # writes nothing there and reports eager's numbers for its own learning rate loaded it.
    saved = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (control.cache_dir() / "compiled").iterdir()}
    assert saved, "the compiled run saved no step"
    warm = tmp_path / "warm"
    proc = funrl(
        "train", "ppo", "--env", "CartPole-v1", "--total-steps", str(UPDATES * 512), "--seeds", str(SEEDS),
        "--lr", "1e-3", "--no-progress", "--out", str(warm), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "could not be saved" not in proc.stderr
    now = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (control.cache_dir() / "compiled").iterdir()}
    assert now == saved
    check_compiled_metrics_equal_eager(warm, metrics_rows(warm), updates=1)
    assert metrics_rows(warm)[-1]["loss"] != rows[-1]["loss"]  # trained with its own learning rate

    # Evaluation compiles nothing: in this process, as tests/agents/test_cli_matrix.py runs it.
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["eval", str(full), "--episodes", "10", "--json"]) == 0
    result = json.loads(printed.getvalue().strip().splitlines()[-1])
    # A random CartPole policy lasts about 22 steps; each seed must do far better.
    assert min(result["per_seed"]) >= 150.0, result
