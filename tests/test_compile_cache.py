"""funrl's compiled graphs, loops included, come back from torch's on-disk cache in a new process,
and a cached graph is never served where it would be wrong: another graph, another funrl version,
another CPU instruction set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from funrl import control

pytestmark = pytest.mark.slow

# A scan whose body holds a constant: the smallest graph of the kind funrl's update steps are.
SCRIPT = """
import json, sys
import torch
import funrl
from funrl import control
from torch._dynamo.utils import counters

k = float(sys.argv[1])
if len(sys.argv) > 2:
    funrl.__version__ = sys.argv[2]

def f(x, c0):
    def body(c, xi):
        c = torch.tanh(c * k + xi)
        return c, c.sum()
    return control.scan(body, c0, x)

x = torch.linspace(-1, 1, 24).reshape(6, 4)
c0 = torch.ones(4)
compiled, _ = control.compile(f)(x, c0)
eager, _ = f(x, c0)
print(json.dumps({
    "hit": counters["aot_autograd"]["autograd_cache_hit"],
    "equal": bool(torch.allclose(compiled, eager, atol=1e-6)),
}))
"""


def run(cache: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=full_env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_loop_graph_and_a_changed_one_recompiles(tmp_path: Path) -> None:
    first = run(tmp_path, "0.5")
    assert first == {"hit": 0, "equal": True}
    assert run(tmp_path, "0.5") == {"hit": 1, "equal": True}
    # The constant lives inside the loop body: a key without the body would serve the old graph.
    assert run(tmp_path, "0.25") == {"hit": 0, "equal": True}


def test_another_funrl_version_or_instruction_set_misses_the_cache(tmp_path: Path) -> None:
    assert run(tmp_path, "0.5") == {"hit": 0, "equal": True}
    assert run(tmp_path, "0.5", "0.0.0-other") == {"hit": 0, "equal": True}
    # ATEN_CPU_CAPABILITY makes inductor generate kernels for another instruction set.
    assert run(tmp_path, "0.5", env={"ATEN_CPU_CAPABILITY": "default"}) == {"hit": 0, "equal": True}


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path / "mine"))
    assert control.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("FUNRL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert control.cache_dir() == tmp_path / "xdg" / "funrl"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert control.use_persistent_cache() == tmp_path / "xdg" / "funrl" / "inductor"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "xdg" / "funrl" / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-own"))
    assert control.use_persistent_cache() == tmp_path / "torch-own"
