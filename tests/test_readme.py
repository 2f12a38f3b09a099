"""The README's quick-start commands and CI's script stay the same commands; its tour runs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    quick = text[start : text.index("\n## ", start + 1)]  # the section, up to the next heading
    return re.findall(r"```bash\n(.+?)\n```", quick, flags=re.S)


def test_readme_has_exactly_two_quick_start_commands() -> None:
    commands = _commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "funrl train ppo --env CartPole-v1" in commands[0]


def test_ci_installs_and_tests_as_the_readme_says() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    _, test_command = _commands()
    parts = [p.strip() for p in test_command.split("&&")]
    install = next(p for p in parts if p.startswith("pip install"))
    pytest_command = next(p for p in parts if "pytest" in p)
    assert "torch==2.13.0" in install
    assert re.search(rf"^{re.escape(install)}", ci, flags=re.M), install
    assert re.search(rf"^{re.escape(pytest_command)}$", ci, flags=re.M), pytest_command
    assert 'if [ "$rc" -eq 5 ]' in ci


def _tour() -> str:
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A tour") :]
    (block,) = re.findall(r"```python\n(.+?)\n```", tour, flags=re.S)[:1]
    return block


@pytest.mark.slow  # the tour compiles an update step and trains PPO
def test_readme_tour_runs_verbatim(tmp_path) -> None:
    """The tour runs as a user pastes it: a fresh interpreter, the block as it stands."""
    script = tmp_path / "tour.py"
    script.write_text(_tour())
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "torch.Size([4, 4])", result.stdout


def test_readme_does_not_point_to_the_developers_design_contract() -> None:
    text = (ROOT / "README.md").read_text()
    assert "DESIGN.md" not in text
    assert (ROOT / "docs" / "design.md").is_file()
