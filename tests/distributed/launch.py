"""Ranks of a fresh process group on this machine (gloo, CPU), two ways.

``run_ranks(fn, ...)`` forks this test process once per rank and runs ``fn`` in each, with the
variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...): a fork has torch and
funrl imported already, so a rank costs nothing to start, where a fresh interpreter spends
seconds of CPU importing them. No inductor compiles there: a fork shares this process's compiler
state (inductor's pool of compile workers), so checks that compile with inductor start fresh
processes with torchrun; dynamo tracing into a capturing backend (graph counts) is fine.

``torchrun(P, ARGS)`` runs ``python -m torch.distributed.run --standalone --nproc-per-node P
ARGS``: torchrun's own launcher, as users run it, with a rendezvous on a free local port, one
thread per rank. ``TRAIN_RUN`` is a script that calls :func:`funrl.agents.run.train_run` with the
keyword arguments given as JSON, for the options the command line does not have (``stop_after``,
the agent's config fields: ``config``, lists as tuples; ``agent_files`` to import first, which
register agents of their own; ``compile_in_turn``: each rank makes its first compiled call once
the rank before it has made its own, so that when the ranks compile the same graph every rank
but the first loads it from the on-disk compile cache they share instead of compiling it again).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

TRAIN_RUN = """
import importlib, json, os, sys, time
from pathlib import Path
from funrl.agents import common, run

kwargs = json.loads(sys.argv[1])
if kwargs.pop("compile_in_turn", False):
    rank, turns, make_step = int(os.environ["RANK"]), Path(kwargs["out"]).parent, common.make_step

    def step_in_turn(*args, **kw):
        step, calls = make_step(*args, **kw), []

        def first_call_in_turn(*a):
            while not calls and rank and not (turns / f"compiled{rank - 1}").exists():
                time.sleep(0.1)
            result = step(*a)
            if not calls:
                (turns / f"compiled{rank}").touch()
            calls.append(1)
            return result

        return first_call_in_turn

    common.make_step = step_in_turn
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


def free_port() -> int:
    """A local TCP port nobody listens on now (the rendezvous of :func:`run_ranks`)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank(rank: int, nproc: int, port: int, folder: str, fn: Callable[..., Any], args: tuple) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    result = fn(*args)
    if dist.is_initialized():
        dist.destroy_process_group()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(result))


def run_ranks(fn: Callable[..., Any], *args: Any, nproc: int = 2, timeout: float = 300) -> list[Any]:
    """``fn(*args)`` on ``nproc`` forked ranks (no inductor compiles: module docstring); each
    rank's return value (JSON) in rank order. A rank's exception is raised here with its traceback
    (``torch.multiprocessing.ProcessRaisedException``), the other ranks stopped."""
    with tempfile.TemporaryDirectory() as folder:
        context = mp.start_processes(
            _rank, (nproc, free_port(), folder, fn, args), nprocs=nproc, join=False, start_method="fork"
        )
        deadline = time.monotonic() + timeout
        while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= deadline:
                for process in context.processes:
                    process.kill()
                    process.join()
                raise TimeoutError(f"run_ranks: {fn.__name__} did not end within {timeout} s")
        return [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(nproc)]


def cli(*argv: str) -> int:
    """``funrl ARGV`` in this process (a rank of :func:`run_ranks`); its exit status."""
    from funrl.__main__ import main

    return main(list(argv))
