"""``funrl train`` / ``funrl eval`` as users run them: help, one-line errors, threads, a run that
diverges (one error line, the last good checkpoint kept), and the learning curve's data."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from opt_states import with_learning_rate

from funrl import tree
from funrl.__main__ import main
from funrl.agents import common, ppo, run
from funrl.agents.checkpoint import load_checkpoint, save_checkpoint

TINY = ppo.PPOConfig(
    env_id="CartPole-v1",
    total_steps=2 * 8 * 12,
    num_envs=2,
    num_steps=8,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16, 16),
)


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_cli_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--env", "--total-steps", "--seeds", "--device", "--out", "--resume", "--lr", "(default:"):
        assert option in text
    assert "cpp" not in text and "allocator" not in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "ppo", "--env", "NoSuchEnv-v0", "--total-steps", "1000"], "NoSuchEnv-v0"),
        (["train", "dqnx"], "algo: unknown algorithm 'dqnx'; known: dqn, ippo, mappo, ppo, sac, td3"),
        (["train", "dqn", "--env", "Pendulum-v1"], "env_id: DQN needs discrete actions"),
        (["train", "sac", "--env", "CartPole-v1"], "env_id: expected continuous (Box) actions"),
        (["train", "ppo", "--env", "mpe:simple_spread"], "train it with mappo or ippo"),
        (["train", "ppo", "--set", "foo=1"], "--set: expected NAME=VALUE with NAME a field of PPOConfig ("),
        (["train", "ppo", "--set", "anneal_lr=yes"], "--set anneal_lr: expected bool, got 'yes'"),
        (["train", "ppo", "--set", "hidden_sizes=64"], "--set hidden_sizes: expected a JSON list, got '64'"),
        (["train", "ppo", "--set", "gamma=0.9", "gamma=0.8"], "--set: gamma is given twice"),
        (["train", "ppo", "--set", "env_id=Acrobot-v1"], "--set env_id: --env gives it"),
        (["train", "sac", "--lr", "1e-3", "--set", "q_lr=1e-3"], "--set q_lr: --lr gives it"),
        (["train", "ppo", "--sweep", "gamma=0.9,0.99", "--set", "gamma=0.9"], "--set gamma: --sweep gives it"),
        (["train", "--resume", "--out", "r", "--set", "gamma=0.9"], "--set: a resumed run continues with"),
        (["train", "--resume"], "out: --resume needs --out"),
        (["eval", "does-not-exist"], "config.json"),
    ],
)
def test_bad_option_is_one_error_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    (line,) = _error_lines(capsys.readouterr().err)
    assert line.startswith(f"funrl {args[0]}: error: ") and message in line, line
    assert not (tmp_path / "runs").exists()


def test_set_gives_any_config_field_its_type_and_config_json_records_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "ppo", "--total-steps", "192", "--num-envs", "2", "--no-compile", "--no-progress"]
    sets = ["num_steps=8", "update_epochs=2", "num_minibatches=2", "hidden_sizes=[16,16]", "activation=relu"]
    assert main([*args, "--set", *sets[:3], "--set", *sets[3:], "ent_coef=0", "--out", str(out)]) == 0
    _, config, _ = run.read_run(out)
    assert (config.num_steps, config.update_epochs, config.num_minibatches) == (8, 2, 2)
    assert config.hidden_sizes == (16, 16) and config.activation == "relu"
    assert config.ent_coef == 0.0 and isinstance(config.ent_coef, float)


@pytest.mark.parametrize("text", ['{"landmark_range": 0.8}', '[["landmark_range", 0.8]]'])
def test_set_takes_env_kwargs_as_a_json_object_or_pairs(text: str) -> None:
    from funrl.agents import mappo

    fields = run.config_overrides(mappo.MAPPOConfig, [f"env_kwargs={text}", "normalize_advantages=false"])
    config = mappo.MAPPOConfig(**fields)
    assert config.env_kwargs == (("landmark_range", 0.8),) and config.normalize_advantages is False
    teams_env, _ = mappo.make_teams_env(config.env_id, dict(config.env_kwargs))
    assert teams_env.env.landmark_range == 0.8


@pytest.mark.parametrize(
    "pair, value",
    [("normalize_obs=null", None), ("normalize_obs=true", True), ("activation=123", "123"), ("network=[1]", "[1]")],
)
def test_set_reads_optional_fields_and_keeps_strings_as_text(pair: str, value: Any) -> None:
    assert run.config_overrides(ppo.PPOConfig, [pair]) == {pair.partition("=")[0]: value}


@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**62), 2**62))
def test_set_reads_numbers_exactly(x: float, n: int) -> None:
    fields = run.config_overrides(ppo.PPOConfig, [f"gamma={json.dumps(x)}", f"num_steps={n}", f"clip_eps={n}"])
    assert fields == {"gamma": x, "num_steps": n, "clip_eps": float(n)}
    assert type(fields["clip_eps"]) is float and type(fields["num_steps"]) is int


def test_argparse_errors_name_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "ppo", "--total-steps", "-5"])
    assert exit_info.value.code == 2
    lines = _error_lines(capsys.readouterr().err)
    assert all(line.startswith(("usage:", " ")) for line in lines[:-1]), lines
    assert lines[-1] == "funrl train: error: argument --total-steps: expected a positive integer, got -5"


def test_threads_sets_torchs_threads_for_the_run_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[int] = []
    monkeypatch.setattr(run, "train_run", lambda *args, **kwargs: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    base = ["train", "ppo", "--total-steps", "1024", "--out", str(tmp_path / "r")]
    assert main([*base, "--threads", "3"]) == 0
    assert torch.get_num_threads() == before
    assert main(base) == 0  # no per-algorithm default: torch's own
    assert seen == [3, before]


def test_diverging_run_ends_in_one_error_line(tmp_path: Path) -> None:
    """``--lr 1e38`` makes the first update's losses non-finite: the run stops with one line naming
    the update, the seed and the metric, exit 1, and writes no checkpoint of the broken state. The
    progress bar (on by default) is the only other output on stderr."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "funrl", "train", "ppo", "--lr", "1e38", "--no-compile",
         "--total-steps", "1024", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = _error_lines(proc.stderr)
    assert re.fullmatch(
        r"funrl train: error: non-finite \w+ \((nan|-?inf)\) at update 1, seed 0", lines[-1]
    ), proc.stderr
    bar = [line for line in lines[:-1] if line.lstrip("\r").startswith("ppo CartPole-v1 x1: ")]
    assert bar and len(bar) == len(lines) - 1, proc.stderr  # the progress bar ran, nothing else spoke
    assert "trained in" not in proc.stdout
    assert not (out / run.CHECKPOINT).exists() and not (out / run.METRICS).exists()


def test_a_resumed_run_that_diverges_keeps_its_last_good_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    run.train_run(
        "ppo",
        TINY,
        out,
        num_seeds=2,
        compile=False,
        checkpoint_every=1,
        progress=False,
        stop_after=2,
        log_every=1,
    )
    template = common.init_state(ppo.make_train(TINY), common.seed_keys(0, 2))
    (state, run_key), meta = load_checkpoint(out / run.CHECKPOINT, template)
    # Plant the divergence in seed 1's learning rate, in the checkpoint the run resumes from.
    state = state._replace(opt_state=with_learning_rate(state.opt_state, torch.tensor([2.5e-4, 1e38])))
    save_checkpoint(out / run.CHECKPOINT, (state, run_key), meta)
    good = (out / run.CHECKPOINT).read_bytes()

    assert main(["train", "--resume", "--out", str(out), "--no-compile", "--no-progress"]) == 1
    (line,) = _error_lines(capsys.readouterr().err)
    assert re.fullmatch(r"funrl train: error: non-finite \w+ \((nan|-?inf)\) at update 3, seed 1", line), line
    assert (out / run.CHECKPOINT).read_bytes() == good
    (kept, _), kept_meta = load_checkpoint(out / run.CHECKPOINT, template)
    assert kept_meta["update"] == 2 and tree.tree_equal(kept, state)
    with (out / run.METRICS).open(newline="") as f:
        assert [(r["update"], r["seed"]) for r in csv.DictReader(f)] == [
            ("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")
        ]  # fmt: skip


def _rows(returns: list[list[float]]) -> list[dict[str, Any]]:
    """metrics.csv rows: ``returns[update][seed]`` at 100 env steps per update."""
    return [
        {"update": u + 1, "seed": s, "env_steps": 100 * (u + 1), "episode_return": value}
        for u, per_seed in enumerate(returns)
        for s, value in enumerate(per_seed)
    ]


def test_learning_curve_carries_each_seeds_last_return_forward() -> None:
    """A seed that finishes no episode in an update keeps its last return there (SB3's episode
    buffer), so every seed counts at every point, the last one included; points before every
    seed has finished an episode are left out."""
    nan = math.nan
    steps, values = run.learning_curve(
        _rows([[nan, 5.0, nan], [1.0, nan, nan], [2.0, 6.0, 9.0], [nan, 7.0, nan], [3.0, nan, nan]])
    )
    assert steps == [300, 400, 500]
    assert values.tolist() == [[2.0, 6.0, 9.0], [2.0, 7.0, 9.0], [3.0, 7.0, 9.0]]


def test_learning_curve_of_a_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run.train_run("ppo", TINY, out, num_seeds=2, compile=False, progress=False)
    with (out / run.METRICS).open(newline="") as f:
        rows = list(csv.DictReader(f))
    steps, values = run.learning_curve(rows)
    assert values.shape == (len(steps), 2) and bool(values.isfinite().all())
    assert steps[-1] == TINY.total_steps  # the last update is plotted for both seeds
    assert steps == list(range(steps[0], TINY.total_steps + 1, TINY.steps_per_update))  # no gaps
    for seed in (0, 1):
        finite = [float(r["episode_return"]) for r in rows if int(r["seed"]) == seed]
        finite = [v for v in finite if math.isfinite(v)]
        assert values[-1, seed] == finite[-1]
    assert (out / run.PLOT).read_bytes().startswith(b"\x89PNG")
