"""Inductor options reach the compiled update step (``make_step``, ``train``, the CLI's ``--cpp-wrapper``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from funrl import control
from funrl.agents import common, dqn, run

TINY = dqn.DQNConfig(env_id="CartPole-v1", total_steps=64, learning_starts=16, buffer_size=64, batch_size=8)


@pytest.fixture()
def recorded_compiles(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Replaces ``control.compile`` by a recorder that returns the function uncompiled."""
    calls: list[dict[str, Any]] = []

    def fake_compile(fn: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return fn

    monkeypatch.setattr(control, "compile", fake_compile)
    return calls


def test_make_step_passes_options_and_mode_to_compile(recorded_compiles: list[dict[str, Any]]) -> None:
    agent = dqn.make_train(TINY)
    common.make_step(agent, batched=False, compile=True, options={"cpp_wrapper": True})
    common.make_step(agent, batched=False, compile=True)
    assert recorded_compiles[0]["options"] == {"cpp_wrapper": True}
    assert recorded_compiles[0]["fullgraph"] is True and recorded_compiles[0]["dynamic"] is False
    assert recorded_compiles[1]["options"] is None


def test_make_step_without_compile_ignores_options(recorded_compiles: list[dict[str, Any]]) -> None:
    agent = dqn.make_train(TINY)
    common.make_step(agent, batched=False, compile=False, options={"cpp_wrapper": True})
    assert recorded_compiles == []


def test_train_forwards_compile_options(recorded_compiles: list[dict[str, Any]]) -> None:
    from funrl import random

    agent = dqn.make_train(TINY)
    common.train(agent, random.key(0), compile=True, num_updates=2, compile_options={"cpp_wrapper": True})
    assert [c["options"] for c in recorded_compiles] == [{"cpp_wrapper": True}]


def test_cli_cpp_wrapper_reaches_train_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from funrl.__main__ import main

    seen: dict[str, Any] = {}

    def fake_train_run(*args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    monkeypatch.setattr(run, "train_run", fake_train_run)
    out = str(tmp_path / "r")
    assert main(["train", "ppo", "--total-steps", "1024", "--out", out, "--cpp-wrapper"]) == 0
    assert seen["compile_options"] == {"cpp_wrapper": True} and seen["compile"] is True
    seen.clear()
    assert main(["train", "ppo", "--total-steps", "1024", "--out", out]) == 0
    assert seen["compile_options"] is None
    seen.clear()  # PPO's vmapped step takes the C++ wrapper (VMAPPED_CPP_WRAPPER_AGENTS)
    assert main(["train", "ppo", "--total-steps", "1024", "--seeds", "2", "--out", out, "--cpp-wrapper"]) == 0
    assert seen["compile_options"] == {"cpp_wrapper": True} and seen["num_seeds"] == 2


def test_cli_cpp_wrapper_with_no_compile_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from funrl.__main__ import main

    code = main(["train", "ppo", "--out", str(tmp_path / "r"), "--no-compile", "--cpp-wrapper"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--cpp-wrapper" in err[0] and "--no-compile" in err[0]
    assert not (tmp_path / "r").exists()


def test_cpp_wrapper_is_refused_for_a_vmapped_step(recorded_compiles: list[dict[str, Any]]) -> None:
    agent = dqn.make_train(TINY)
    with pytest.raises(ValueError, match="options: cpp_wrapper=True is refused for a vmapped .*dqn step"):
        common.make_step(agent, batched=True, compile=True, options={"cpp_wrapper": True})
    common.make_step(agent, batched=True, compile=True, options={"size_asserts": False})
    assert recorded_compiles[-1]["options"] == {"size_asserts": False}


def test_cpp_wrapper_is_taken_for_a_vmapped_ppo_step(recorded_compiles: list[dict[str, Any]]) -> None:
    from funrl.agents import ppo

    agent = ppo.make_train(ppo.PPOConfig(num_envs=2, num_steps=8, total_steps=64))
    common.make_step(agent, batched=True, compile=True, options={"cpp_wrapper": True})
    assert recorded_compiles[-1]["options"] == {"cpp_wrapper": True}


def test_cli_cpp_wrapper_with_several_seeds_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from funrl.__main__ import main

    code = main(["train", "dqn", "--out", str(tmp_path / "r"), "--seeds", "2", "--cpp-wrapper"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--cpp-wrapper" in err[0] and "--seeds 2" in err[0]
    assert not (tmp_path / "r").exists()


def test_train_run_refuses_cpp_wrapper_for_several_seeds_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with pytest.raises(ValueError, match="options: cpp_wrapper"):
        run.train_run("dqn", TINY, out, num_seeds=2, compile_options={"cpp_wrapper": True})
    assert not out.exists()
