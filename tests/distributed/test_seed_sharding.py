"""Seed sharding under torchrun: ranks train blocks of the seed axis and rank 0 writes the one
run folder a single process would, bitwise (eager); a run resumes on another number of ranks.

The first check launches ``torchrun -m funrl train`` as users do; the resume runs the same CLI
in forked ranks (:func:`launch.run_ranks`), which start without importing torch again."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
import torch
from launch import cli, run_ranks, torchrun

from funrl import distributed, tree
from funrl.__main__ import main
from funrl.agents import run

# Three eager PPO updates of four seeds on two CartPole envs each (128 steps per env).
TRAIN = ["train", "ppo", "--seeds", "4", "--num-envs", "2", "--total-steps", "768", "--no-compile"]
TRAIN += ["--no-progress", "--checkpoint-every", "1"]


def checkpoint(out: Path) -> dict:
    return torch.load(out / run.CHECKPOINT, map_location="cpu", weights_only=True)


def assert_same_run(a: Path, b: Path) -> None:
    """The same config, metrics and final checkpoint, bitwise."""
    assert json.loads((a / run.CONFIG).read_text()) == json.loads((b / run.CONFIG).read_text())
    assert (a / run.METRICS).read_text() == (b / run.METRICS).read_text()
    first, second = checkpoint(a), checkpoint(b)
    assert first["structure"] == second["structure"] and first["metadata"] == second["metadata"]
    assert tree.tree_equal(first["leaves"], second["leaves"])


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_shard_cuts_the_seeds_into_contiguous_blocks(world: int) -> None:
    for num_seeds in range(world, 12):
        blocks = [distributed.shard(num_seeds, r, world) for r in range(world)]
        assert [i for block in blocks for i in block] == list(range(num_seeds))
        sizes = [len(block) for block in blocks]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_shard_refuses_fewer_seeds_than_ranks() -> None:
    with pytest.raises(
        ValueError, match=r"num_seeds: expected at least one per rank, i.e. >= 4 ranks, got 3"
    ):
        distributed.shard(3, 0, 4)
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < world_size=2, got 2"):
        distributed.shard(4, 2, 2)


def test_without_a_process_group_every_helper_is_the_single_process() -> None:
    assert not torch.distributed.is_initialized()
    assert (distributed.rank(), distributed.world_size(), distributed.is_first()) == (0, 1, True)
    x = {"a": torch.arange(3)}
    assert distributed.gather_to_first(x)[0]["a"].equal(x["a"])
    assert distributed.broadcast_from_first(x) is x
    dp = distributed.data_parallel()
    assert dp == distributed.DataParallel() and dp.all_reduce_sum(x["a"]) is x["a"]


def group_lifetimes() -> list:
    """In a rank: whether a group is up inside ``process_group`` and after it, an all-reduce in
    each of three blocks (the second left by an exception), and whether the group is the first."""
    seen: list = []
    first_group = None
    for block in range(3):
        with contextlib.suppress(KeyError), distributed.process_group() as up:
            total = torch.tensor([torch.distributed.get_rank() + 10 * block])
            torch.distributed.all_reduce(total)
            seen += [up, total.item()]
            if block == 1:
                raise KeyError("a failed run")
        first_group = first_group or torch.distributed.group.WORLD
        seen += [torch.distributed.is_initialized(), torch.distributed.group.WORLD is first_group]
    return seen


def test_process_group_keeps_one_group_for_every_block_of_the_process() -> None:
    # A group made again after one was destroyed rendezvouses where torchrun's store still holds
    # the first group's addresses; so every block runs in the group the first one made.
    each_block = [[True, 1 + 20 * block, True, True] for block in range(3)]
    assert run_ranks(group_lifetimes) == [sum(each_block, [])] * 2


def caller_group() -> list[bool]:
    """In a rank: whether ``process_group`` runs in a group the caller made, and keeps it."""
    torch.distributed.init_process_group("gloo")
    group = torch.distributed.group.WORLD
    with distributed.process_group() as up:
        seen = [up, torch.distributed.group.WORLD is group]
    return [*seen, torch.distributed.group.WORLD is group]


def test_process_group_runs_in_a_group_the_caller_made() -> None:
    assert run_ranks(caller_group) == [[True, True, True]] * 2


# A script that trains twice under torchrun: two blocks, an all-reduce in each.
TWO_BLOCKS = """
import torch
from funrl import distributed
for block in range(2):
    with distributed.process_group():
        total = torch.tensor([torch.distributed.get_rank() + 10 * block])
        torch.distributed.all_reduce(total)
        print(f"rank {torch.distributed.get_rank()} block {block}: {total.item()}")
"""


@pytest.mark.slow
def test_a_script_under_torchrun_runs_two_blocks(tmp_path: Path) -> None:
    script = tmp_path / "two_blocks.py"
    script.write_text(TWO_BLOCKS)
    proc = torchrun(2, str(script), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    printed = sorted(re.findall(r"rank \d block \d: \d+", proc.stdout))  # ranks' lines may interleave
    assert printed == [f"rank {r} block {b}: {1 + 20 * b}" for r in range(2) for b in range(2)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_two_ranks_write_the_run_folder_of_one_process(one_process: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = torchrun(2, "-m", "funrl", *TRAIN, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in one_process.iterdir())
    assert_same_run(out, one_process)
    assert proc.stdout.count("funrl: trained in") == 1  # rank 0 reports


@pytest.mark.slow
def test_a_run_stopped_on_one_process_resumes_on_two_ranks(one_process: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = run.read_run(one_process)[1]
    run.train_run("ppo", config, out, num_seeds=4, compile=False, progress=False, stop_after=2)
    assert json.loads(checkpoint(out)["metadata"])["update"] == 2
    resume = ["train", "--resume", "--out", str(out), "--no-progress", "--no-compile"]
    assert run_ranks(cli, *resume) == [0, 0]
    assert_same_run(out, one_process)
