"""``funrl train`` says what its time went to, and ``funrl cache`` finds and clears the compile cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from funrl.__main__ import main


def test_a_run_records_the_first_update_apart_from_training(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "2048", "--no-compile", "--out", str(out)]
    assert main(argv) == 0
    timing = json.loads((out / "timing.json").read_text())
    assert set(timing) == {"first_update_s", "train_s", "updates"}
    assert timing["updates"] == 4  # 2048 steps of 4 envs x 128
    assert timing["first_update_s"] > 0 and timing["train_s"] > 0
    rows = (out / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 4  # the first update's row is written like every other


def test_cache_path_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    folder = tmp_path / "cache"
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(folder))
    (folder / "inductor").mkdir(parents=True)
    (folder / "inductor" / "graph").write_text("x")
    assert main(["cache", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(folder)
    assert main(["cache", "clear"]) == 0
    assert not folder.exists()


def test_the_progress_bar_says_it_is_compiling_and_keeps_its_clock_moving() -> None:
    import time

    from funrl.agents import run

    class Bar:
        def __init__(self) -> None:
            self.desc, self.refreshes = "ppo CartPole-v1 x1", 0

        def set_description_str(self, text: str) -> None:
            self.desc = text

        def refresh(self) -> None:
            self.refreshes += 1

    bar = Bar()
    with run._compiling_note(bar):
        assert bar.desc == "ppo CartPole-v1 x1 (compiling the update step)"
        time.sleep(2.2)
    assert bar.refreshes >= 1
    assert bar.desc == "ppo CartPole-v1 x1"
    with run._compiling_note(None):  # no bar (--no-progress): nothing to say
        pass
