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

from funrl.agents import common, run


def funrl(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """``python -m funrl ARGS`` in a fresh interpreter; its stdout and stderr captured."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "funrl", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def metrics_rows(out: Path) -> list[dict[str, str]]:
    with (out / run.METRICS).open(newline="") as f:
        return list(csv.DictReader(f))


def train_compiled_then_eval(
    algo: str, env_id: str, budget: list[str], seeds: int, tmp_path: Path, compare_updates: int
) -> dict[str, Any]:
    """Train ``algo`` on ``env_id`` compiled (the default) for ``seeds`` vmapped seeds and evaluate
    the run; returns ``eval --json``'s result.

    Checks the run folder (one metrics row per update per seed) and that the compiled run's first
    ``compare_updates`` updates report the metrics of the same run trained eagerly in-process.
    """
    out = tmp_path / f"{algo}-run"
    proc = funrl("train", algo, "--env", env_id, *budget, "--seeds", str(seeds), "--out", str(out),
                 "--no-progress", cwd=tmp_path)  # fmt: skip
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
