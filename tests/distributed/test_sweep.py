"""Sweeps: every grid point x every seed as one vmapped batch, and the same batch sharded over
two ranks (forked, :func:`launch.run_ranks`), whose run folder is the one a single process writes
(bitwise, eager)."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
from launch import cli, run_ranks
from test_seed_sharding import assert_same_run, checkpoint

from funrl import tree
from funrl.__main__ import main
from funrl.agents import common, ppo, run

# Three eager PPO updates of two learning rates x two seeds on two CartPole envs each.
SWEEP = ["--seeds", "2", "--sweep", "learning_rate=1e-3,3e-4"]
TRAIN = ["train", "ppo", *SWEEP, "--num-envs", "2", "--total-steps", "768", "--no-compile"]
TRAIN += ["--no-progress", "--checkpoint-every", "1"]
TINY = ppo.PPOConfig(total_steps=32, num_envs=2, num_steps=16, num_minibatches=2, hidden_sizes=(8,))


def rows(out: Path) -> list[dict[str, str]]:
    with (out / run.METRICS).open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_grid_is_every_combination_last_name_fastest() -> None:
    assert run.sweep_grid(None) == [{}]
    assert run.sweep_grid({"gamma": [0.9, 0.99], "learning_rate": [1e-3, 3e-4, 1e-4]}) == [
        {"gamma": g, "learning_rate": lr} for g in (0.9, 0.99) for lr in (1e-3, 3e-4, 1e-4)
    ]
    for bad, what in [
        ({}, "a non-empty mapping"),
        ({"gamma": []}, "a non-empty list of numbers for 'gamma'"),
        ({"gamma": "0.9"}, "a non-empty list of numbers for 'gamma'"),
        ({"gamma": [0.9, float("nan")]}, "finite numbers for 'gamma', got nan"),
        ({"gamma": [True]}, "finite numbers for 'gamma', got True"),
    ]:
        with pytest.raises(ValueError, match=f"sweep: expected {what}"):
            run.sweep_grid(bad)


def test_a_point_of_a_sweep_is_the_run_of_its_config(tmp_path: Path) -> None:
    """Members are point-major; seed s at point p trains the agent a run of the config holding
    p's values trains as its seed s (the same keys, the same hyper-parameters in the state)."""
    sweep = {"learning_rate": [1e-3, 3e-4], "gamma": [0.9]}
    out = tmp_path / "sweep"
    state, _ = run.train_run("ppo", TINY, out, num_seeds=2, compile=False, progress=False, sweep=sweep)
    for p, lr in enumerate(sweep["learning_rate"]):
        config = dataclasses.replace(TINY, learning_rate=lr, gamma=0.9)
        alone, _ = common.train(ppo.make_train(config), common.seed_keys(0, 2), compile=False)
        assert tree.tree_equal(tree.map(lambda x, p=p: x[2 * p : 2 * p + 2], state), alone)
    got = rows(tmp_path / "sweep")
    assert [(r["update"], r["point"], r["seed"]) for r in got] == [
        ("1", str(p), str(s)) for p in (0, 1) for s in (0, 1)
    ]
    meta = json.loads((tmp_path / "sweep" / run.CONFIG).read_text())
    assert meta["sweep"] == sweep and meta["num_seeds"] == 2
    assert (tmp_path / "sweep" / run.PLOT).read_bytes().startswith(b"\x89PNG")
    result = run.evaluate_run(tmp_path / "sweep", episodes=1)
    assert len(result["per_seed"]) == 4
    assert [p["learning_rate"] for p in result["per_point"]] == sweep["learning_rate"]
    means = [sum(result["per_seed"][2 * p : 2 * p + 2]) / 2 for p in (0, 1)]
    assert [p["mean_return"] for p in result["per_point"]] == pytest.approx(means)


def test_a_run_without_a_sweep_keeps_its_files(tmp_path: Path) -> None:
    run.train_run("ppo", TINY, tmp_path / "plain", num_seeds=2, compile=False, progress=False)
    assert "sweep" not in json.loads((tmp_path / "plain" / run.CONFIG).read_text())
    assert "point" not in rows(tmp_path / "plain")[0]
    assert set(run.evaluate_run(tmp_path / "plain", episodes=1)) == {"mean_return", "std_return", "per_seed"}


def test_bad_sweeps_are_clear_errors_and_leave_no_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    cases = [
        (["--sweep", "lr=1e-3"], "error: sweep: unknown ['lr']; sweepable: ['learning_rate'"),
        (["--sweep", "gamma=0.9,1.5"], "error: sweep: gamma: expected a value in [0, 1], got 1.5"),
        (["--sweep", "gamma=0.9", "--sweep", "gamma=0.8"], "--sweep: gamma is given twice"),
        (["--sweep", "gamma=0.9", "--data-parallel"], "error: sweep: a data-parallel run trains one agent"),
        (["--sweep", "gamma=0.9", "--env", "gym:Pendulum-v1"], "--sweep: --env gym:Pendulum-v1 is one set"),
    ]
    for extra, message in cases:
        assert main(["train", "ppo", "--total-steps", "512", "--no-compile", "--out", str(out), *extra]) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()
    with pytest.raises(SystemExit):
        main(["train", "ppo", "--sweep", "gamma", "--out", str(out)])
    assert "expected NAME=V1,V2,... (e.g. learning_rate=1e-3,3e-4), got 'gamma'" in capsys.readouterr().err
    run.train_run("ppo", TINY, out, compile=False, progress=False, sweep={"gamma": [0.9]}, stop_after=1)
    with pytest.raises(
        run.RunError, match="sweep: a resumed run continues the grid in .*; expected no sweep"
    ):
        run.train_run("ppo", TINY, out, compile=False, progress=False, resume=True, sweep={"gamma": [0.8]})


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_two_ranks_write_the_sweep_of_one_process(
    one_process: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    capfd.readouterr()
    assert run_ranks(cli, *TRAIN, "--out", str(out)) == [0, 0]
    assert capfd.readouterr().out.count("funrl: trained in") == 1  # rank 0 reports
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in one_process.iterdir())
    assert_same_run(out, one_process)
    assert json.loads(checkpoint(out)["metadata"])["update"] == 3


def test_a_stopped_sweep_resumes_exactly(tmp_path: Path) -> None:
    """The checkpoint holds every member's state, hyper-parameters included (they ride in it), so a
    resumed sweep continues its grid; on another number of ranks too, through the same layout as
    seeds (``test_seed_sharding``)."""
    config = dataclasses.replace(TINY, total_steps=64)  # two updates
    sweep = {"learning_rate": [1e-3, 3e-4]}
    common_args = dict(num_seeds=2, compile=False, progress=False, checkpoint_every=1, log_every=1)
    run.train_run("ppo", config, tmp_path / "whole", sweep=sweep, **common_args)
    run.train_run("ppo", config, tmp_path / "cut", sweep=sweep, stop_after=1, **common_args)
    assert json.loads(checkpoint(tmp_path / "cut")["metadata"])["update"] == 1
    run.train_run("ppo", None, tmp_path / "cut", resume=True, **common_args)
    assert_same_run(tmp_path / "cut", tmp_path / "whole")
