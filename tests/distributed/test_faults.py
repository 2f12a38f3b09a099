"""A rank killed mid-run: the job stops soon with an error on the other rank, the checkpoint on
disk loads, and resuming it gives the uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from launch import environment

from funrl import distributed, tree
from funrl.__main__ import main
from funrl.agents import run

# `funrl train ARGS` logging (and so checkpointing) every update, each rank writing its pid to
# OUT/../rankR.pid. Run as `python -c SCRIPT OUT train ARGS`.
TRAIN_LOGGING_EVERY_UPDATE = """
import functools, os, sys
from pathlib import Path
from funrl.__main__ import main
from funrl.agents import run

out = Path(sys.argv[1])
(out.parent / f"rank{os.environ['RANK']}.pid").write_text(str(os.getpid()))
run.train_run = functools.partial(run.train_run, log_every=1)
sys.exit(main(sys.argv[2:]))
"""
# Ten eager updates of four seeds (two per rank, vmapped as in one process) on one CartPole env
# (128 steps), a checkpoint each.
TRAIN = ["train", "ppo", "--seeds", "4", "--num-envs", "1", "--total-steps", "1280", "--no-compile"]
TRAIN += ["--no-progress", "--checkpoint-every", "1"]
STOP_WITHIN_S = 60


def checkpoint_update(out: Path) -> int:
    payload = torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)
    return json.loads(payload["metadata"])["update"]


@pytest.mark.slow
def test_killing_a_rank_stops_the_job_and_the_checkpoint_resumes_exactly(tmp_path: Path) -> None:
    out, script = tmp_path / "run", tmp_path / "train.py"
    script.write_text(TRAIN_LOGGING_EVERY_UPDATE)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    proc = subprocess.Popen(
        [*launcher, str(script), str(out), *TRAIN, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not ((out / run.CHECKPOINT).exists() and checkpoint_update(out) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-4000:]
            time.sleep(0.2)
        os.kill(int((tmp_path / "rank1.pid").read_text()), signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = proc.communicate(timeout=STOP_WITHIN_S)
        assert time.monotonic() - killed < STOP_WITHIN_S
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0
    # rank 0's own line (whichever way it learnt of the failure), and torchrun's root cause
    assert "funrl train: error: rank 0 of 2: " in stderr, stderr[-4000:]
    assert "rank      : 1 (local_rank: 1)" in stderr and "Signal 9 (SIGKILL)" in stderr
    stopped_at = checkpoint_update(out)
    assert 2 <= stopped_at < 10
    assert run.load_run(out)[1].params["head.actor.0.weight"].shape[0] == 4  # every seed is there

    full = tmp_path / "full"
    assert main([*TRAIN, "--out", str(full)]) == 0
    assert main(["train", "--resume", "--out", str(out), "--no-compile", "--no-progress"]) == 0
    assert (out / run.METRICS).read_text() == (full / run.METRICS).read_text()
    assert tree.tree_equal(run.load_run(out)[1], run.load_run(full)[1])


def test_the_launchers_sigterm_passes_through_code_that_catches_its_own_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal lands wherever the rank is; a handler for that code's own errors (as the
    distributions' shape checks turn torch's RuntimeError into a ValueError) must not catch it."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(distributed.RankStopped):
        with distributed.stop_on_sigterm():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
            except Exception as exc:  # noqa: BLE001 - the point of the test
                raise ValueError("the stop was taken for this code's own error") from exc


def test_sigterm_from_the_launcher_is_an_exception_only_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed.stop_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) is before  # no launcher: handlers left alone
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        distributed.RankStopped, match="rank 0 of 1: stopped by the launcher, which saw another"
    ):
        with distributed.stop_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_lost_connection_is_one_line_naming_the_rank() -> None:
    error = torch.distributed.DistBackendError("Connection closed by peer [127.0.0.1]:1234\nmore detail")
    message = distributed.lost_rank_message(error)
    assert message.startswith("rank 0 of 1: lost contact with another rank")
    assert message.endswith("last good state: Connection closed by peer [127.0.0.1]:1234")


@pytest.mark.parametrize("collective", ["gather_object", "broadcast_object_list"])
def test_gloo_reporting_a_closed_peer_as_a_runtime_error_is_a_lost_rank(
    monkeypatch: pytest.MonkeyPatch, collective: str
) -> None:
    # gloo's TCP pair raises a plain RuntimeError from the collective's wait when a peer dies
    def closed_by_peer(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:22752")

    monkeypatch.setattr(distributed, "_group_up", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 0)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, collective, closed_by_peer)
    call = distributed.gather_to_first if collective == "gather_object" else distributed.broadcast_from_first
    with pytest.raises(torch.distributed.DistError, match="Connection closed by peer") as caught:
        call({"x": torch.zeros(2)})
    assert distributed.lost_rank_message(caught.value).startswith("rank 0 of 2: lost contact")
