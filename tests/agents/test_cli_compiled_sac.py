"""``funrl train sac`` compiled (the default), two seeds vmapped, from a fresh process; then ``funrl eval``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runs import train_compiled_then_eval


@pytest.mark.slow
def test_sac_trains_compiled_from_the_cli_then_evaluates(tmp_path: Path) -> None:
    result = train_compiled_then_eval(
        "sac",
        "Pendulum-v1",
        ["--num-envs", "10", "--total-steps", "1100"],  # 110 updates; 10 gradient steps each from update 101
        seeds=2,
        tmp_path=tmp_path,
        compare_updates=4,  # the first 4 (warm-up) and 4 after the checkpoint of update 101 (trained)
        snapshot_at=110,
    )
    assert all(-16.3 * 200 <= r <= 0.0 for r in result["per_seed"])  # Pendulum: 200 steps in [-16.3, 0]
