"""The suite's own order (tests/conftest.py): files holding ``slow`` tests are queued first, so
``pytest -n 2 --dist loadfile`` does not leave a long file for last while a worker idles."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import slow_files_first


class FakeItem(NamedTuple):
    path: Path
    slow: bool

    def get_closest_marker(self, name: str) -> object | None:
        return "marker" if name == "slow" and self.slow else None


def test_files_with_a_slow_test_come_first_each_file_in_one_block() -> None:
    a, b, c, d = (Path(f"tests/test_{name}.py") for name in "abcd")
    items = [
        FakeItem(a, False), FakeItem(a, False),
        FakeItem(b, False), FakeItem(b, True), FakeItem(b, False),
        FakeItem(c, False),
        FakeItem(d, True),
    ]  # fmt: skip
    ordered = slow_files_first(items)
    assert ordered == [items[2], items[3], items[4], items[6], items[0], items[1], items[5]]


def test_this_session_runs_slow_files_first_and_xdist_keeps_the_order(request: pytest.FixtureRequest) -> None:
    assert request.config.getoption("loadscopereorder") is False  # pyproject's addopts
    slow_files = {item.path for item in request.session.items if item.get_closest_marker("slow")}
    in_slow_file = [item.path in slow_files for item in request.session.items]
    assert in_slow_file == sorted(in_slow_file, reverse=True), "a slow file is collected after a quick one"
