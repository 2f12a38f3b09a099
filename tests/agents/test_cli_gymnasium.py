"""``funrl train --env gym:ID``: any gymnasium env through ``from_gymnasium``, eagerly, from the CLI.

A host gymnasium env trains one seed without ``torch.compile``; its run folder records
``gym:ID`` so that ``funrl eval`` rebuilds the same env, and ``--resume`` is refused in one line
(the checkpoint holds only a handle on the host envs, not their physics or generators) while the
same ``--seed`` retrains the run identically.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import gymnasium
import pytest
import torch

from funrl import tree
from funrl.__main__ import main
from funrl.agents import ppo, run

# PPO on CartPole: 2 envs x 128 steps = 256 steps per update, 3 updates.
PPO_ARGS = ["--env", "gym:CartPole-v1", "--num-envs", "2", "--total-steps", "768", "--no-progress"]


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _one_line_error(rc: int, err: str, *fragments: str) -> None:
    assert rc == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("funrl train: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def made_envs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The ``(id, num_envs)`` of every ``from_gymnasium`` env that the run code builds."""
    calls: list[tuple[Any, ...]] = []
    real = run.envs.from_gymnasium

    def spy(id_or_env: Any, num_envs: int = 1, *args: Any, **kwargs: Any) -> Any:
        calls.append((id_or_env, num_envs))
        return real(id_or_env, num_envs, *args, **kwargs)

    monkeypatch.setattr(run.envs, "from_gymnasium", spy)
    return calls


def _checkpoint_leaves(out: Path) -> list[torch.Tensor]:
    return torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)["leaves"]


def test_ppo_trains_eagerly_on_gym_cartpole_then_evaluates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made_envs: list[tuple[Any, ...]]
) -> None:
    out = tmp_path / "run"
    rc, _, err = _main(
        capsys, "train", "ppo", *PPO_ARGS, "--no-compile", "--out", str(out), "--checkpoint-every", "1"
    )
    assert rc == 0, err
    assert made_envs == [("CartPole-v1", 2)]
    for name in (run.CONFIG, run.METRICS, run.CHECKPOINT, run.PLOT):
        assert (out / name).is_file(), name
    meta = json.loads((out / run.CONFIG).read_text())
    assert meta["algo"] == "ppo" and meta["num_seeds"] == 1
    assert meta["config"]["env_id"] == "gym:CartPole-v1" and meta["config"]["num_envs"] == 2
    with (out / run.METRICS).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["update"]), int(r["seed"]), int(r["env_steps"])) for r in rows] == [
        (1, 0, 256),
        (2, 0, 512),
        (3, 0, 768),
    ]
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in rows)
    payload = torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)
    assert json.loads(payload["metadata"])["update"] == 3
    # What the checkpoint holds of the env: a handle, not the gymnasium envs' physics.
    assert "HostState(version=*)" in payload["structure"]

    made_envs.clear()
    rc, stdout, err = _main(capsys, "eval", str(out), "--episodes", "3", "--json")
    assert rc == 0, err
    assert made_envs == [("CartPole-v1", 2)]  # the recorded gym env, rebuilt for evaluation
    result = json.loads(stdout.strip().splitlines()[-1])
    assert set(result) == {"mean_return", "std_return", "per_seed"}
    assert len(result["per_seed"]) == 1 and result["std_return"] == 0.0
    # CartPole pays 1 per step; an episode lasts at least a few steps and at most 500.
    assert 5.0 <= result["mean_return"] <= 500.0
    rc, again, err = _main(capsys, "eval", str(out), "--episodes", "3", "--json")
    assert rc == 0 and json.loads(again.strip().splitlines()[-1]) == result


def test_resume_of_a_gym_run_is_refused_and_the_same_seed_reproduces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        rc, _, err = _main(
            capsys, "train", "ppo", *PPO_ARGS, "--no-compile", "--seed", "3", "--out", str(out)
        )
        assert rc == 0, err
    assert (first / run.METRICS).read_text() == (second / run.METRICS).read_text()
    assert tree.tree_equal(_checkpoint_leaves(first), _checkpoint_leaves(second))

    before = {name: (first / name).read_bytes() for name in (run.CONFIG, run.METRICS, run.CHECKPOINT)}
    rc, _, err = _main(capsys, "train", "--resume", "--out", str(first), "--no-compile", "--no-progress")
    _one_line_error(rc, err, "resume", "gym:CartPole-v1", "checkpoint", "--seed 3")
    assert {name: (first / name).read_bytes() for name in before} == before


def test_gym_env_without_no_compile_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    rc, _, err = _main(capsys, "train", "ppo", *PPO_ARGS, "--out", str(out))
    _one_line_error(rc, err, "--no-compile", "--env gym:CartPole-v1")
    assert not out.exists()


def test_gym_env_with_several_seeds_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    rc, _, err = _main(capsys, "train", "ppo", *PPO_ARGS, "--no-compile", "--seeds", "2", "--out", str(out))
    _one_line_error(rc, err, "--seeds", "--env gym:CartPole-v1", "got 2")
    assert not out.exists()


MISSING_DEPENDENCY_ID = "FunrlTestMissingDependency-v0"


@pytest.fixture
def missing_dependency_id() -> Any:
    """A registered gymnasium id whose entry point cannot be imported (as a missing extra)."""
    gymnasium.register(MISSING_DEPENDENCY_ID, entry_point="funrl_no_such_module:Env")
    yield MISSING_DEPENDENCY_ID
    del gymnasium.envs.registry[MISSING_DEPENDENCY_ID]


@pytest.mark.parametrize(
    "env, reason",
    [
        ("gym:NoSuchEnv-v0", "doesn't exist"),
        ("gym:CartPole-v9", "v9"),
        ("gym:", "Malformed"),
        (f"gym:{MISSING_DEPENDENCY_ID}", "funrl_no_such_module"),
    ],
)
def test_unknown_gymnasium_id_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], missing_dependency_id: str, env: str, reason: str
) -> None:
    out = tmp_path / "run"
    rc, _, err = _main(
        capsys,
        "train",
        "ppo",
        "--env",
        env,
        "--total-steps",
        "768",
        "--no-compile",
        "--no-progress",
        "--out",
        str(out),
    )
    _one_line_error(rc, err, "--env", repr(env), reason)
    assert not out.exists()


def test_train_run_refuses_to_vmap_or_compile_a_gym_env(tmp_path: Path) -> None:
    config = ppo.PPOConfig(env_id="gym:CartPole-v1", num_envs=2, total_steps=256)
    with pytest.raises(run.RunError, match="num_seeds: .*expected 1, got 2"):
        run.train_run("ppo", config, tmp_path / "a", num_seeds=2, compile=False, progress=False)
    with pytest.raises(run.RunError, match="compile: .*torch.compile"):
        run.train_run("ppo", config, tmp_path / "b", compile=True, progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_sac_trains_on_gym_pendulum_in_the_default_run_folder(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    made_envs: list[tuple[Any, ...]],
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = _main(
        capsys,
        "train",
        "sac",
        "--env",
        "gym:Pendulum-v1",
        "--total-steps",
        "32",
        "--no-compile",
        "--no-progress",
    )
    assert rc == 0, err
    assert made_envs == [("Pendulum-v1", 1)]
    # The default folder name has no ':' (nor a nested folder) from the gym: prefix.
    (out,) = (tmp_path / "runs").iterdir()
    assert out.name.startswith("sac-gym-Pendulum-v1-")
    assert json.loads((out / run.CONFIG).read_text())["config"]["env_id"] == "gym:Pendulum-v1"
    with (out / run.METRICS).open(newline="") as f:
        assert [int(r["update"]) for r in csv.DictReader(f)] == list(range(1, 33))

    made_envs.clear()
    rc, stdout, err = _main(capsys, "eval", str(out), "--episodes", "2", "--json")
    assert rc == 0, err
    assert made_envs == [("Pendulum-v1", 1)]
    result = json.loads(stdout.strip().splitlines()[-1])
    # Pendulum's reward per step is in [-16.27, 0] and an episode is 200 steps.
    assert -16.3 * 200 <= result["mean_return"] < 0.0 and len(result["per_seed"]) == 1


def test_train_help_documents_gym_envs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # argparse would wrap inside "--no-compile"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "gym:ID" in text and "from_gymnasium" in text and "needs --no-compile" in text
