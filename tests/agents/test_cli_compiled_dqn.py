"""``funrl train dqn`` compiled (the default), two seeds vmapped, from a fresh process; a copy of
the run as a kill between checkpoints leaves it, resumed; then ``funrl eval``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runs import train_compiled_then_eval


@pytest.mark.slow
def test_dqn_trains_compiled_from_the_cli_then_evaluates(tmp_path: Path) -> None:
    result = train_compiled_then_eval(
        "dqn",
        "CartPole-v1",
        ["--total-steps", "1200"],  # 120 updates of 10 envs; gradient steps from update 101
        seeds=2,
        tmp_path=tmp_path,
        compare_updates=4,  # the first 4 (warm-up) and 4 after the checkpoint of update 101 (trained)
        snapshot_at=110,
        resume=True,
        checkpoint_every=50,
    )
    assert all(r >= 1.0 for r in result["per_seed"])  # CartPole pays 1 per step
