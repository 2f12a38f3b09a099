"""``import funrl``: every subpackage is an attribute, and importing them changes no global state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run in a fresh interpreter. funrl's third-party dependencies are imported first: some of them
# add warning filters or create cache folders on import, which is theirs, not funrl's, to answer for.
_IMPORT_FUNRL = """
import json, os, sys, warnings
import gymnasium, numpy, optree, tensordict, torch

def snapshot():
    files = sorted(
        os.path.join(root, name)
        for folder in sys.argv[1:]
        for root, dirs, names in os.walk(folder)
        for name in names + dirs
    )
    return {
        "warnings": [repr(f) for f in warnings.filters],
        "default_dtype": str(torch.get_default_dtype()),
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "files": files,
    }

before = snapshot()
import funrl
loaded_by_import = sorted(m for m in sys.modules if m.startswith("funrl."))
reached = {name: getattr(funrl, name).__name__ for name in ("losses", "agents", "envs", *funrl.__all__[:-1])}
print(json.dumps({"before": before, "after": snapshot(), "loaded": loaded_by_import, "reached": reached}))
"""


def test_import_funrl_reaches_every_subpackage_and_changes_no_global_state(tmp_path: Path) -> None:
    folders = {
        "HOME": tmp_path / "home",
        "XDG_CACHE_HOME": tmp_path / "cache",
        "TORCHINDUCTOR_CACHE_DIR": tmp_path / "inductor",
        "TORCH_EXTENSIONS_DIR": tmp_path / "extensions",
        "TRITON_CACHE_DIR": tmp_path / "triton",
        "MPLCONFIGDIR": tmp_path / "matplotlib",
    }
    for folder in folders.values():
        folder.mkdir()
    env = {**os.environ, **{name: str(folder) for name, folder in folders.items()}}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_FUNRL, *map(str, folders.values())],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["after"] == report["before"]
    assert report["loaded"] == []  # subpackages load on first use
    expected = ["agents", "buffers", "control", "envs", "losses", "nets", "optim", "random", "testing", "tree"]
    assert {name: f"funrl.{name}" for name in expected} == report["reached"]


def test_funrl_leaves_tensordict_unimported_until_a_buffer_is_saved_or_converted() -> None:
    """Importing tensordict patches ``torch.func.vmap``'s unwrapping for the whole process (and
    slows every eager vmapped call): funrl imports it only where a buffer meets tensordict."""
    code = (
        "import sys, funrl.agents, funrl.buffers, funrl.envs, funrl.losses; "
        "assert 'tensordict' not in sys.modules, 'imported with funrl'; "
        "funrl.buffers.to_tensordict({'obs': __import__('torch').zeros(2, 3)}, 1); "
        "assert 'tensordict' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
