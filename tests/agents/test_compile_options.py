"""Inductor options reach the compiled update step (``make_step``, ``train``, the CLI's ``--cpp-wrapper``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

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
    assert main(["train", "ppo", "--total-steps", "1024", "--out", out, "--no-cpp-wrapper"]) == 0
    assert seen["compile_options"] is None
    seen.clear()  # PPO's vmapped step takes the C++ wrapper (VMAPPED_CPP_WRAPPER_AGENTS)
    assert main(["train", "ppo", "--total-steps", "1024", "--seeds", "2", "--out", out, "--cpp-wrapper"]) == 0
    assert seen["compile_options"] == {"cpp_wrapper": True} and seen["num_seeds"] == 2


def test_cli_takes_the_cpp_wrapper_by_default_for_ppo_on_a_cpu_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Neither --cpp-wrapper nor --no-cpp-wrapper: the C++ wrapper for a compiled PPO step on a CPU
    (DEFAULT_CPP_WRAPPER_AGENTS), the Python wrapper for the other algorithms, other devices and
    eager runs; a resumed run decides by the algorithm and device in its folder."""
    from funrl.__main__ import main

    seen: list[dict[str, Any] | None] = []
    monkeypatch.setattr(run, "train_run", lambda *args, **kwargs: seen.append(kwargs["compile_options"]))
    out = str(tmp_path / "r")
    base = ["train", "--total-steps", "1024", "--out", out]
    assert main([*base, "ppo"]) == 0
    assert main([*base, "ppo", "--seeds", "8"]) == 0
    assert main([*base, "ppo", "--no-compile"]) == 0
    assert main([*base, "dqn"]) == 0
    assert main([*base, "sac", "--env", "Pendulum-v1"]) == 0
    on = {"cpp_wrapper": True}
    assert seen == [on, on, None, None, None]
    assert common.DEFAULT_CPP_WRAPPER_AGENTS == {"ppo"}
    assert not common.uses_cpp_wrapper_by_default("ppo", torch.device("cuda", 0), compile=True)
    for algo, device, expected in (("ppo", "cpu", on), ("ppo", "cuda:0", None), ("td3", "cpu", None)):
        folder = tmp_path / f"{algo}-{device.replace(':', '')}"
        folder.mkdir()
        meta = {"algo": algo, "config": {}, "seed": 0, "num_seeds": 1, "device": device}
        (folder / run.CONFIG).write_text(json.dumps(meta))
        seen.clear()
        assert main(["train", "--resume", "--out", str(folder)]) == 0
        assert seen == [expected], (algo, device)


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


def test_a_vmapped_cpp_wrapper_step_refuses_a_batch_of_one_seed(
    recorded_compiles: list[dict[str, Any]],
) -> None:
    """torch 2.13's C++ wrapper segfaults on a vmapped step over one seed; the step says so instead
    (before the compiled call), takes two seeds, and a step without the C++ wrapper takes one."""
    from funrl.agents import ppo

    agent = ppo.make_train(ppo.PPOConfig(num_envs=2, num_steps=8, total_steps=64))
    cpp_step = common.make_step(agent, batched=True, compile=True, options={"cpp_wrapper": True})
    plain_step = common.make_step(agent, batched=True, compile=True)
    one = common.init_state(agent, common.seed_keys(0, 1))
    with pytest.raises(
        ValueError, match=r"run_key: a vmapped step built with cpp_wrapper=True got a batch of one"
    ):
        cpp_step(*one)
    two_state, _ = cpp_step(*common.init_state(agent, common.seed_keys(0, 2)))
    one_state, _ = plain_step(*one)
    assert two_state.update_count.tolist() == [1, 1] and one_state.update_count.tolist() == [1]


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


def test_one_seed_of_a_vmapped_run_steps_unbatched_and_keeps_the_seed_dimension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``funrl train --seeds 1`` trains a ``[1, 2]`` key: the step is made unbatched (torch 2.13's
    C++ wrapper crashes on a vmapped step of one seed, and the unbatched step is faster), while
    callbacks, metrics and the returned state keep the seed dimension; the numbers are those of
    seed 0 of a two-seed vmapped run."""
    from funrl import tree

    made: list[bool] = []
    real_make_step = common.make_step

    def spy(agent: Any, batched: bool, *args: Any, **kwargs: Any) -> Any:
        made.append(batched)
        return real_make_step(agent, batched, *args, **kwargs)

    monkeypatch.setattr(common, "make_step", spy)
    agent = dqn.make_train(TINY)
    seen: list[tuple[list[int], list[int]]] = []

    def callback(update: int, state_and_key: Any, host: dict[str, Any]) -> None:
        state, run_key = state_and_key
        seen.append((list(state.update_count.shape), list(run_key.shape)))

    one, metrics = common.train(
        agent, common.seed_keys(0, 1), compile=False, num_updates=6, callback=callback, log_every=3
    )
    two, _ = common.train(agent, common.seed_keys(0, 2), compile=False, num_updates=6)
    assert made == [False, True]
    assert seen == [([1], [1, 2]), ([1], [1, 2])]
    assert {list(v.shape)[1] for v in metrics.values()} == {1}
    for a, b in zip(tree.leaves(one), tree.leaves(two), strict=True):
        assert a.shape[0] == 1
        if a.is_floating_point():
            torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(a[0], b[0])


def test_cli_threads_sets_torchs_threads_for_the_run_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--threads sets torch's threads for the run and restores them after; without it, one PPO seed
    on a CPU runs on one thread (ONE_THREAD_AGENTS) and everything else on torch's default, a
    resumed run judged by the algorithm, seeds and device in its folder. Planted check: a default
    that ignored the seed count would give the 2-seed run one thread."""
    from funrl.__main__ import main

    seen: list[int] = []
    monkeypatch.setattr(run, "train_run", lambda *args, **kwargs: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the suite runs on one thread (conftest): make torch's default tell
    try:
        out = str(tmp_path / "r")
        base = ["train", "--total-steps", "1024", "--out", out]
        assert main([*base, "ppo", "--threads", "3"]) == 0
        assert main([*base, "ppo"]) == 0
        assert main([*base, "ppo", "--seeds", "2"]) == 0
        assert main([*base, "ppo", "--no-compile"]) == 0
        assert main([*base, "dqn"]) == 0
        assert seen == [3, 1, 2, 1, 2] and torch.get_num_threads() == 2
        for algo, num_seeds, device, expected in (
            ("ppo", 1, "cpu", 1),
            ("ppo", 4, "cpu", 2),
            ("ppo", 1, "cuda:0", 2),
            ("sac", 1, "cpu", 2),
        ):
            folder = tmp_path / f"{algo}-{num_seeds}-{device.replace(':', '')}"
            folder.mkdir()
            meta = {"algo": algo, "config": {}, "seed": 0, "num_seeds": num_seeds, "device": device}
            (folder / run.CONFIG).write_text(json.dumps(meta))
            seen.clear()
            assert main(["train", "--resume", "--out", str(folder)]) == 0
            assert seen == [expected], (algo, num_seeds, device)
    finally:
        torch.set_num_threads(before)
    assert common.ONE_THREAD_AGENTS == {"ppo"}
    assert common.default_threads("ppo", 1, torch.device("cuda", 0)) is None


def test_cli_threads_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from funrl.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "ppo", "--threads", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and "--threads: expected a positive integer, got 0" in err[-1]
