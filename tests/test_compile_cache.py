"""funrl's compiled graphs, loops included, come back from torch's on-disk cache in a new process,
and a cached graph is never served where it would be wrong: another graph, another funrl version,
another CPU instruction set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from funrl import control

pytestmark = pytest.mark.slow

# A scan whose body holds a constant: the smallest graph of the kind funrl's update steps are.
# Each argument "K[,VERSION]" compiles it with the constant K (and funrl.__version__ = VERSION)
# after a dynamo reset, as a new process would, and reports whether that compile loaded its
# graph from the on-disk cache and gave the eager result.
SCRIPT = """
import json, sys
import torch
import funrl
from funrl import control
from torch._dynamo.utils import counters

def f(x, c0):
    def body(c, xi):
        c = torch.tanh(c * k + xi)
        return c, c.sum()
    return control.scan(body, c0, x)

x = torch.linspace(-1, 1, 24).reshape(6, 4)
c0 = torch.ones(4)
version, results = funrl.__version__, []
for spec in sys.argv[1:]:
    k, _, other_version = spec.partition(",")
    k, funrl.__version__ = float(k), other_version or version
    torch._dynamo.reset()
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    compiled, _ = control.compile(f)(x, c0)
    eager, _ = f(x, c0)
    results.append({
        "hit": counters["aot_autograd"]["autograd_cache_hit"] - hits,
        "equal": bool(torch.allclose(compiled, eager, atol=1e-6)),
    })
print(json.dumps(results))
"""
MISS, HIT = {"hit": 0, "equal": True}, {"hit": 1, "equal": True}


def run(cache: Path, *specs: str, env: dict[str, str] | None = None) -> list[dict]:
    """The results of :data:`SCRIPT` run with ``specs`` in a new process caching into ``cache``."""
    full_env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *specs], capture_output=True, text=True, env=full_env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache that a first process filled with the graph of constant 0.5 (compiled, not loaded)."""
    folder = tmp_path_factory.mktemp("inductor")
    assert run(folder, "0.5") == [MISS]
    return folder


def test_a_new_process_loads_the_loop_graph_and_another_graph_or_version_recompiles(cache: Path) -> None:
    # The constant lives inside the loop body: a key without the body would serve the old graph.
    assert run(cache, "0.5", "0.25", "0.5,0.0.0-other") == [HIT, MISS, MISS]


def test_another_instruction_set_misses_the_cache(cache: Path) -> None:
    # ATEN_CPU_CAPABILITY makes inductor generate kernels for another instruction set.
    assert run(cache, "0.5", env={"ATEN_CPU_CAPABILITY": "default"}) == [MISS]


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


AFTER_TORCH_LOOKED = """
import os, sys
import torch
import torch._inductor.config  # torch writes its default folder into TORCHINDUCTOR_CACHE_DIR here
assert os.environ["TORCHINDUCTOR_CACHE_DIR"]
from funrl import control
print(control.use_persistent_cache())
torch.compile(lambda x: x.sin() + 1)(torch.ones(3))
"""


def test_the_persistent_cache_is_used_when_torch_has_looked_up_its_default_first(tmp_path: Path) -> None:
    # A notebook that compiled something (or touched inductor's config) before funrl: the variable
    # then holds torch's temporary default, which is not a folder the user chose.
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["FUNRL_CACHE_DIR"] = str(tmp_path / "funrl")
    result = subprocess.run(
        [sys.executable, "-c", AFTER_TORCH_LOOKED], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path / "funrl" / "inductor")
    assert list((tmp_path / "funrl" / "inductor").rglob("*.py")), "the compiled code went elsewhere"


# A saved function (control.compile's saved_as) in a module of its own, so that its source can
# change between processes. Run as `python -c SAVED_SCRIPT FOLDER [VERSION]`: loads or compiles
# `step.f` saved as "step" (with $STEP_THREADS torch threads, default 1), and reports whether dynamo
# traced it and whether it gave eager's result.
STEP_MODULE = """
import torch

SCALE = {scale}


def f(x):
    return torch.tanh(x * SCALE) + x.sum()
"""
SAVED_SCRIPT = """
import json, os, sys
import torch
import funrl
from funrl import control
from torch._dynamo.utils import counters

sys.path.insert(0, sys.argv[1])
import step

if len(sys.argv) > 2:
    funrl.__version__ = sys.argv[2]
torch.set_num_threads(int(os.environ.get("STEP_THREADS", "1")))
x = torch.linspace(-1, 1, 12).reshape(3, 4)
compiled = control.compile(step.f, dynamic=False, saved_as="step")(x)
print(json.dumps({
    "traced": counters["stats"]["unique_graphs"],
    "equal": bool(torch.allclose(compiled, step.f(x), atol=1e-6)),
}))
"""
TRACED, LOADED = {"traced": 1, "equal": True}, {"traced": 0, "equal": True}


def run_saved(
    folder: Path, *args: str, env: dict[str, str] | None = None, script: str = SAVED_SCRIPT
) -> dict:
    full_env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
        "FUNRL_CACHE_DIR": str(folder / "funrl"),
        **(env or {}),
    }
    result = subprocess.run(
        [sys.executable, "-c", script, str(folder), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_saved_function_loads_untraced_and_never_where_it_would_be_wrong(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(STEP_MODULE.format(scale=0.5))
    assert run_saved(tmp_path) == TRACED
    assert len(list((tmp_path / "funrl" / "compiled").iterdir())) == 1
    assert run_saved(tmp_path) == LOADED
    assert run_saved(tmp_path, "0.0.0-other") == TRACED  # another funrl
    assert run_saved(tmp_path, env={"ATEN_CPU_CAPABILITY": "default"}) == TRACED  # another instruction set
    # Inductor's code depends on the thread count (a guard): each count has its own file.
    assert run_saved(tmp_path, env={"STEP_THREADS": "2"}) == TRACED
    assert run_saved(tmp_path, env={"STEP_THREADS": "2"}) == LOADED
    # The same name with another source: the saved graph would compute the old scale.
    (tmp_path / "step.py").write_text(STEP_MODULE.format(scale=0.25))
    assert run_saved(tmp_path) == TRACED
    assert run_saved(tmp_path) == LOADED


def test_saved_as_needs_one_static_full_graph() -> None:
    with pytest.raises(ValueError, match="saved_as: a saved function is one static full graph"):
        control.compile(abs, dynamic=None, saved_as="f")
    with pytest.raises(ValueError, match="saved_as: .* mode='max-autotune'"):
        control.compile(abs, dynamic=False, mode="max-autotune", saved_as="f")


def test_a_saved_function_compiles_again_for_global_state_its_file_name_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2 + x.sum()

    compiled = control.compile(f, dynamic=False, saved_as="deterministic")
    x = torch.linspace(-1, 1, 5)
    assert torch.allclose(compiled(x), f(x))
    # A guard of the saved entry refuses deterministic mode; the call compiles an entry that holds it.
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.allclose(compiled(x), f(x))
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.allclose(compiled(x), f(x))


def test_saved_refs_come_from_the_loading_side_and_a_function_that_cannot_be_saved_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    layer, other = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)

    def f(x: torch.Tensor) -> torch.Tensor:
        return layer(x).tanh()

    x = torch.randn(4, 3)
    # A module in the closure cannot be pickled: the step runs, unsaved, with a warning.
    with pytest.warns(UserWarning, match="could not be saved for later processes"):
        assert torch.allclose(control.compile(f, dynamic=False, saved_as="m")(x), f(x))
    assert not (tmp_path / "compiled").exists() or not any((tmp_path / "compiled").iterdir())
    # Given as a reference it is not saved; whoever loads gives theirs, and the graph reads it.
    control.compile(f, dynamic=False, saved_as="m", saved_refs={"layer": layer})(x)
    (saved,) = (tmp_path / "compiled").iterdir()
    loaded = control.compile(f, dynamic=False, saved_as="m", saved_refs={"layer": other})
    assert torch.allclose(loaded(x), other(x).tanh())
    assert not torch.allclose(loaded(x), f(x))
    # A damaged file is compiled again and rewritten whole.
    saved.write_bytes(saved.read_bytes()[:100])
    assert torch.allclose(
        control.compile(f, dynamic=False, saved_as="m", saved_refs={"layer": layer})(x), f(x)
    )
    assert saved.stat().st_size > 100


# A saved step holding a MuJoCo physics op, loaded by a process that built another model first.
# Walker2d's and HalfCheetah's states and controls have the same sizes, so a loaded graph naming
# the wrong model would run without an error. Run as `python -c MUJOCO_SCRIPT FOLDER [ENV_ID ...]`:
# the given envs are made before Walker2d.
MUJOCO_SCRIPT = """
import json, sys
import torch
import funrl.envs as E
from funrl import control, random
from funrl.envs.mujoco import physics
from torch._dynamo.utils import counters

for env_id in sys.argv[2:]:
    E.make(env_id)
env, params = E.make("Walker2d-v5")
_, state = E.vmap(env, 2).reset(random.key(0), params)
controls = torch.full((2, env.nu), 0.3, dtype=torch.float64)

def step(states, warmstarts):
    return physics.step(env.model_id, states, warmstarts, controls, params.frame_skip)[0]

compiled = control.compile(step, dynamic=False, saved_as="walker2d-physics")(state.physics, state.warmstart)
print(json.dumps({
    "traced": counters["stats"]["unique_graphs"],
    "equal": bool(torch.equal(compiled, step(state.physics, state.warmstart))),
}))
"""


def test_a_saved_mujoco_step_names_its_model_in_a_process_that_made_others_first(tmp_path: Path) -> None:
    assert run_saved(tmp_path, script=MUJOCO_SCRIPT) == TRACED
    assert run_saved(tmp_path, "HalfCheetah-v5", "Hopper-v5", script=MUJOCO_SCRIPT) == LOADED


def test_a_saved_scan_under_vmap_compiles_without_a_vmap_fallback_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tracing a scan takes its inputs' first slice with an op vmap has no batching rule for;
    # the warning it gives speaks of a slowdown the compiled function does not have.
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))

    def seed_step(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return control.scan(lambda c, x: (c + x.sum(), x * c), torch.zeros_like(xs[0, 0]), xs)

    xs = torch.linspace(-1, 1, 24).reshape(2, 3, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = control.compile(torch.func.vmap(seed_step), dynamic=False, saved_as="vmapped-scan")(xs)
    assert [str(w.message) for w in caught if "batching rule" in str(w.message)] == []
    want = [seed_step(x) for x in xs]
    assert torch.allclose(got[0], torch.stack([w[0] for w in want]))
    assert torch.allclose(got[1], torch.stack([w[1] for w in want]))
