"""``funrl train mappo`` and ``funrl train ippo`` compiled (the default), two seeds vmapped, from a
fresh process each, then ``funrl eval``: MAPPO on discrete simple_spread, IPPO on the two teams of
continuous simple_adversary."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from cli_runs import train_compiled_then_eval

# Two envs x one 25-step episode per update, two updates.
BUDGET = ["--total-steps", "100", "--num-envs", "2"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, env_id", [("mappo", "mpe:simple_spread"), ("ippo", "mpe:simple_adversary_continuous")]
)
def test_multi_agent_trains_compiled_from_the_cli_then_evaluates(
    algo: str, env_id: str, tmp_path: Path
) -> None:
    result = train_compiled_then_eval(algo, env_id, BUDGET, seeds=2, tmp_path=tmp_path, compare_updates=2)
    assert all(math.isfinite(r) for r in result["per_seed"]), result
