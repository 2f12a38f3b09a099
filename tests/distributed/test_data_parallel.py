"""Data-parallel PPO: environments spread over ranks, gradients and normalisation statistics
all-reduced inside the update; the same agent as one process holding every environment.

One launch of two forked ranks (:func:`launch.run_ranks`) trains the CLI's data-parallel run and
then runs :func:`dp_checks.findings`; the tests assert on what it left."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import dp_checks
import pytest
import torch
from launch import cli, run_ranks

from funrl import distributed, random
from funrl.__main__ import main
from funrl.agents import ppo, run
from funrl.testing import assert_trees_close

# Five eager PPO updates of four CartPole envs (128 steps each): two ranks of two envs, or one process.
TRAIN = ["train", "ppo", "--num-envs", "4", "--total-steps", "2560", "--no-compile", "--no-progress"]


def rows(out: Path) -> list[dict[str, str]]:
    with (out / run.METRICS).open(newline="") as f:
        return list(csv.DictReader(f))


def train_then_check(out: str) -> dict[str, Any] | None:
    """A rank's work: the CLI's data-parallel run into ``out``, then :func:`dp_checks.findings`."""
    assert cli(*TRAIN, "--data-parallel", "--out", out) == 0
    return dp_checks.findings()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The data-parallel run folder and rank 0's findings."""
    two = tmp_path_factory.mktemp("dp") / "two"
    found, _ = run_ranks(train_then_check, str(two), timeout=600)
    return two, found


@pytest.mark.slow
def test_two_ranks_of_two_envs_train_the_agent_of_one_process_with_four(
    two_ranks: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    (two, _), one = two_ranks, tmp_path / "one"
    assert main([*TRAIN, "--out", str(one)]) == 0
    assert json.loads((two / run.CONFIG).read_text())["data_parallel_ranks"] == 2
    expected, got = rows(one), rows(two)
    assert len(got) == len(expected) == 5
    for want, have in zip(expected, got, strict=True):
        assert want.keys() == have.keys()
        for name in want:
            a, b = float(want[name]), float(have[name])
            assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5) or (math.isnan(a) and math.isnan(b)), name
    _, one_state, _ = run.load_run(one)
    _, two_state, _ = run.load_run(two)
    assert_trees_close(two_state.params, one_state.params, rtol=1e-5, atol=1e-5, name="params")
    assert run.evaluate_run(two, episodes=2) == run.evaluate_run(one, episodes=2)


@pytest.mark.slow
def test_statistics_are_pooled_and_the_all_reduce_is_inside_one_compiled_graph(
    two_ranks: tuple[Path, dict[str, Any]],
) -> None:
    _, found = two_ranks
    assert found["pendulum_params"] < 1e-5 and found["pendulum_loss"] < 1e-5
    assert found["pendulum_ranks_agree"] == 0.0  # every rank holds the same params
    assert found["pendulum_stats"] < 1e-5 < found["pendulum_stats_moved"]  # pooled, and they moved
    assert found["graphs"] == 1 and found["all_reduce_in_graph"]
    assert found["compiled_params"] < 1e-6


def test_one_rank_is_the_single_process_agent() -> None:
    config = ppo.PPOConfig(total_steps=64, num_envs=4, num_steps=16, num_minibatches=2, hidden_sizes=(8,))
    plain, single = ppo.make_train(config), ppo.make_train(config, data_parallel=distributed.DataParallel())
    assert single.env is not None and type(single.env) is type(plain.env)
    state = plain.init(random.key(0))
    assert_trees_close(
        single.update(state, random.key(1)), plain.update(state, random.key(1)), rtol=0, atol=0
    )


def test_all_gather_places_each_rank_in_its_block() -> None:
    # With the identity for the sum, rank 1 of 2 sees its own block and zeros for rank 0's.
    dp = distributed.DataParallel(1, 2)
    x = torch.arange(6.0).reshape(3, 2)
    gathered = dp.all_gather(x, dim=1)
    assert gathered.shape == (3, 4) and gathered[:, 2:].equal(x) and not gathered[:, :2].any()
    keys = dp.env_keys(random.key(0), 4)
    assert keys.equal(random.split(random.key(0), 4)[2:])


def test_bad_shares_are_clear_errors(tmp_path: Path) -> None:
    dp = distributed.DataParallel(0, 3)
    with pytest.raises(ValueError, match="num_envs: expected a multiple of the 3 data-parallel ranks, got 4"):
        ppo.make_train(ppo.PPOConfig(num_envs=4), data_parallel=dp)
    config = ppo.PPOConfig(num_envs=6, num_steps=2, num_minibatches=3, total_steps=12)  # minibatches of 4
    with pytest.raises(
        ValueError, match="num_envs \\* num_steps / num_minibatches: expected a multiple of the 3"
    ):
        ppo.make_train(config, data_parallel=dp)
    with pytest.raises(
        run.RunError, match="data_parallel: td3 has no data-parallel update; agents with one: .*'ppo', 'sac'"
    ):
        run.build_agent("td3", run.agent_spec("td3").config_type(), "cpu", distributed.DataParallel())


def test_cli_refuses_seeds_with_data_parallelism(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([*TRAIN, "--seeds", "2", "--data-parallel", "--out", str(tmp_path / "run")]) == 2
    assert (
        "num_seeds: a data-parallel run trains one agent across the ranks; expected 1, got 2"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()


def test_resume_keeps_the_data_parallel_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    config = ppo.PPOConfig(total_steps=2 * 32, num_envs=2, num_steps=16, num_minibatches=2, hidden_sizes=(8,))
    run.train_run("ppo", config, out, compile=False, progress=False, data_parallel=True, stop_after=1)
    assert main(["train", "--resume", "--out", str(out), "--no-compile", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"data_parallel: {out} was trained data-parallel on 1 ranks; resume it the same way" in err
    assert (
        main(["train", "--resume", "--out", str(out), "--no-compile", "--no-progress", "--data-parallel"])
        == 0
    )
    assert int(rows(out)[-1]["update"]) == 2
