"""Launch funrl under torchrun in a fresh process group on this machine (gloo, CPU).

``torchrun(P, ARGS)`` runs ``python -m torch.distributed.run --standalone --nproc-per-node P
ARGS``: torchrun's own launcher, with a rendezvous on a free local port, one thread per rank.
``TRAIN_RUN`` is a script that calls :func:`funrl.agents.run.train_run` with the keyword
arguments given as JSON, for the options the command line does not have (``stop_after``, the
agent's config fields: ``config``, lists as tuples; ``agent_files`` to import first, which
register agents of their own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TRAIN_RUN = """
import importlib, json, sys
from pathlib import Path
from funrl.agents import run

kwargs = json.loads(sys.argv[1])
for path in kwargs.pop("agent_files", []):  # a user's agent file registers its agent on import
    sys.path.insert(0, str(Path(path).parent))
    importlib.import_module(Path(path).stem)
algo = kwargs.pop("algo", "ppo")
fields = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.pop("config", {}).items()}
config = run.agent_spec(algo).config_type(**fields)
run.train_run(algo, config, Path(kwargs.pop("out")), progress=False, **kwargs)
"""


def environment() -> dict[str, str]:
    # One thread per rank: two ranks share this machine's cores.
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def torchrun(
    nproc: int, *args: str, cwd: Path, timeout: float = 300, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node nproc [extra] ARGS`` (``ARGS`` as torchrun takes
    them: ``-m funrl train ...`` or a script), output captured."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    # Its own session, so that a timeout stops the ranks too, not only torchrun.
    with subprocess.Popen(
        [*command, *extra, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=environment(),
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def train_run(nproc: int, cwd: Path, timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess:
    """:data:`TRAIN_RUN` with ``kwargs`` on ``nproc`` ranks."""
    script = cwd / "train_run.py"
    script.write_text(TRAIN_RUN)
    return torchrun(nproc, str(script), json.dumps(kwargs), cwd=cwd, timeout=timeout)
