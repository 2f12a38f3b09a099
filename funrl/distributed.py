"""Beyond one process: seed sharding and data-parallel agents on ``torch.distributed``.

This is the one module of funrl that touches ``torch.distributed`` state (the process group);
everything else receives what it needs from here as plain values and functions. Launch with
torchrun, which starts one process per rank and sets ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``::

    torchrun --nproc-per-node 2 -m funrl train ppo --seeds 64 --out runs/ppo64
    torchrun --nproc-per-node 2 -m funrl train ppo --seeds 32 --sweep learning_rate=1e-3,3e-4 --out runs/lr
    torchrun --nproc-per-node 2 -m funrl train ppo --num-envs 64 --data-parallel --out runs/dp
    torchrun --nproc-per-node 2 -m funrl train sac --num-envs 2 --data-parallel --out runs/sac-dp
    torchrun --nnodes 16 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 -m funrl ...

Without torchrun (no ``WORLD_SIZE`` in the environment) nothing here starts a process group and
every helper is the identity: a run is the single-process run, through the same code.

**Seed sharding** (:func:`shard`): the ``S`` seeds of a run are cut into contiguous blocks, one
per rank; each rank vmaps its block. Seed ``i`` trains from the key a single process would give
it (``fold_in(key(seed), i)``), so it is the same agent wherever it ran. Metrics and checkpoints
are gathered with ``gather_object`` between updates (outside the compiled step) and rank 0
writes the one run folder, which holds every seed as a single-process run would. A resumed run
reads that folder, so it may use another number of ranks. A sweep's members (grid points x
seeds, see :mod:`funrl.agents.run`) are sharded the same way.

**Data parallelism** (:class:`DataParallel`): one agent whose ``num_envs`` environments are cut
into one block per rank. Its compiled update calls :meth:`DataParallel.all_reduce_sum` (the public
``torch.distributed.all_reduce``, which ``torch.compile`` traces into the graph as a functional
collective in torch 2.13, so the update stays one graph) on rollout data and running
normalisation statistics, and through :meth:`DataParallel.sum_tree` / :meth:`DataParallel.mean_tree`
on gradients with their loss metrics: every leaf of a tree in one all-reduce of their flattened
concatenation. With one rank it is the identity, chosen when the agent is built.
PPO and SAC have a data-parallel update; SAC keeps per-rank replay (each rank's environments'
transitions in its own buffer, their shares of every batch drawn there).

**Faults**: a rank that dies closes its connections, so the collective every other rank next
enters (at the next log point) fails at once with an error; ``funrl train`` prints it as one
line and exits 1, and torchrun stops the job with a non-zero status. A rank that hangs alive
is caught by the process group's ``timeout`` (:data:`DEFAULT_TIMEOUT_S`, ``--dist-timeout``). Checkpoints are written atomically by rank 0 between updates, so the last
one on disk always loads.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from funrl import envs, random
from funrl import tree as ftree
from funrl.envs import wrappers

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DataParallel",
    "RankStopped",
    "ShardedBatchedEnv",
    "broadcast_from_first",
    "data_parallel",
    "gather_to_first",
    "init",
    "is_first",
    "launched",
    "lost_rank_message",
    "pool_moments",
    "process_group",
    "rank",
    "shard",
    "shard_envs",
    "stop_on_sigterm",
    "world_size",
]

DEFAULT_TIMEOUT_S = 600.0
"""Seconds a collective waits for a live rank before it raises (the process-group timeout).

Long enough for a rank whose first update compiles later than the others' (each rank compiles
its own step); a rank that dies is noticed at once, since its connections close."""


def launched() -> bool:
    """True in a process started by torchrun (or any launcher that sets ``WORLD_SIZE``)."""
    return "WORLD_SIZE" in os.environ


def _group_up() -> bool:
    # torch builds without distributed support have no process group at all.
    return dist.is_available() and dist.is_initialized()


_group_made: weakref.ref | None = None
"""The process group :func:`init` made, if any (the one destroyed at exit). A weak reference: a
group still referenced after ``destroy_process_group`` lives on to the interpreter's finalisation."""


def _made_here() -> bool:
    """True while the group up is the one :func:`init` made."""
    return _group_up() and _group_made is not None and dist.group.WORLD is _group_made()


def _destroy_at_exit() -> None:
    # Before the interpreter's finalisation: left to it, gloo's worker threads can outlive it and
    # abort the process (SIGABRT, pytorch/pytorch#190489) after a successful run.
    if _made_here():
        dist.destroy_process_group()


def init(device: str | torch.device = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Join the process group torchrun describes (gloo on CPU, NCCL on CUDA); True if one is up.

    A no-op returning False outside torchrun, and when the group exists already (a caller that
    made its own). On CUDA each rank uses ``cuda:LOCAL_RANK``. A group it makes is destroyed when
    the interpreter exits.
    """
    if _group_up():
        return True
    if not launched():
        return False
    if not timeout_s > 0:
        raise ValueError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    global _group_made
    if _group_made is None:
        atexit.register(_destroy_at_exit)
    _group_made = weakref.ref(dist.group.WORLD)
    return True


@contextlib.contextmanager
def process_group(device: str | torch.device = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[bool]:
    """:func:`init` for the ``with`` block; True inside if a process group is up.

    The group stays up for the rest of the process (it is destroyed at exit), so a later block,
    such as a script's second ``train_run``, runs in the same group: a group made again after one
    was destroyed would rendezvous at the same address, where torchrun's store still holds the
    first group's keys (its ranks dial ports nobody listens on any more). A block of the group
    :func:`init` made that ends normally ends with a barrier, so every rank has finished the
    block's collectives before any rank leaves; one left by an exception does not wait, since a
    peer may still wait in a collective. A group made before (a caller's own) is left alone.
    """
    init(device, timeout_s)
    yield _group_up()
    if _made_here():
        with _lost_peer_as_dist_error():
            dist.barrier()


def rank() -> int:
    """This process's rank; 0 without a process group."""
    return dist.get_rank() if _group_up() else 0


def world_size() -> int:
    """The number of ranks; 1 without a process group."""
    return dist.get_world_size() if _group_up() else 1


def is_first() -> bool:
    """True on rank 0, the rank that writes run folders (and in a single process)."""
    return rank() == 0


def shard(num_items: int, rank: int, world_size: int, what: str = "num_seeds") -> range:
    """The contiguous block of ``range(num_items)`` that rank ``rank`` of ``world_size`` holds.

    Blocks differ in size by at most one, the larger ones first (as ``torch.tensor_split``); every
    rank holds at least one item, so ``num_items >= world_size`` (a ValueError naming ``what``).
    """
    if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 1:
        raise ValueError(f"{what}: expected a positive int, got {num_items!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: expected 0 <= rank < world_size={world_size}, got {rank}")
    if num_items < world_size:
        raise ValueError(
            f"{what}: expected at least one per rank, i.e. >= {world_size} ranks, got {num_items}"
        )
    base, extra = divmod(num_items, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


class RankStopped(BaseException):
    """The launcher stopped this rank (SIGTERM), as torchrun does to every rank once one failed.

    A ``BaseException``, as ``KeyboardInterrupt`` is: the signal raises it wherever the rank is,
    and an ``except RuntimeError`` or ``except Exception`` there (a shape check turning torch's
    error into its own) must not take it for that code's own failure.
    """


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While training under a launcher, its SIGTERM raises :class:`RankStopped` in this rank.

    torchrun stops the surviving ranks with SIGTERM as soon as one rank fails, often before their
    next collective notices the loss; the exception lets each print its own one-line error (and
    leave files as an exception does: checkpoints are atomic). Outside a launcher, or off the main
    thread (where Python cannot take signals), the handlers are left alone.
    """
    if not launched() or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise RankStopped(
            f"rank {rank()} of {world_size()}: stopped by the launcher, which saw another rank fail "
            "(its report names the first failure); the last checkpoint holds the last good state"
        )

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def lost_rank_message(exc: BaseException) -> str:
    """One line for a collective that failed: this rank, and the first line of torch's reason."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"rank {rank()} of {world_size()}: lost contact with another rank (it stopped, or did not "
        f"answer within the process group's timeout); the last checkpoint holds the last good "
        f"state: {reason}"
    )


@contextlib.contextmanager
def _lost_peer_as_dist_error() -> Iterator[None]:
    # gloo's TCP transport reports a peer that closed its connection as a plain RuntimeError
    # from the collective's wait (not a DistError); one type lets the CLI print its one line.
    try:
        yield
    except dist.DistError:
        raise
    except RuntimeError as exc:
        raise dist.DistNetworkError(str(exc)) from exc


def _to_cpu(tree: Any) -> Any:
    return ftree.map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def gather_to_first(tree: Any) -> list[Any] | None:
    """Every rank's ``tree`` (on the CPU), in rank order, on rank 0; None on the other ranks.

    A collective: every rank calls it at the same point. ``[tree]`` without a process group.
    """
    local = _to_cpu(tree)
    if not _group_up():
        return [local]
    first = dist.get_rank() == 0
    out: list[Any] | None = [None] * dist.get_world_size() if first else None
    with _lost_peer_as_dist_error():
        dist.gather_object(local, out, dst=0)
    return out


def broadcast_from_first(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (the others' ``obj`` is ignored); ``obj`` without a group."""
    if not _group_up():
        return obj
    box = [_to_cpu(obj) if dist.get_rank() == 0 else None]
    with _lost_peer_as_dist_error():
        dist.broadcast_object_list(box, src=0)
    return box[0]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    # The public, in-place collective on a copy: dynamo rewrites it to the functional
    # all_reduce, so it stays inside the compiled graph; eagerly it is the ordinary call.
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


class DataParallel(NamedTuple):
    """This rank's place in a data-parallel agent: ``rank`` of ``world_size``, and the sum.

    ``all_reduce_sum`` is ``torch.distributed.all_reduce`` (SUM) on a copy, or the identity for
    one rank. Build it with :func:`data_parallel`; ``DataParallel()`` is the single process.
    """

    rank: int = 0
    world_size: int = 1
    all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] = _identity

    def local_block(self, num_items: int, what: str = "num_envs") -> range:
        """This rank's equal block of ``num_items`` (which ``world_size`` must divide)."""
        if num_items % self.world_size:
            raise ValueError(
                f"{what}: expected a multiple of the {self.world_size} data-parallel ranks, got {num_items}"
            )
        return shard(num_items, self.rank, self.world_size, what)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of ``x`` over ranks (every rank contributes an equal share)."""
        return self.all_reduce_sum(x) / self.world_size

    def sum_tree(self, tree: Any) -> Any:
        """Every leaf of ``tree`` summed over the ranks, in one all-reduce of their flattened
        concatenation; ``tree`` itself for one rank (no copies into a buffer for nothing)."""
        if self.world_size == 1:  # a Python constant of the agent: decided when it is built
            return tree
        leaves, spec = ftree.flatten(tree)
        flat = self.all_reduce_sum(torch.cat([leaf.reshape(-1) for leaf in leaves]))
        parts = flat.split([leaf.numel() for leaf in leaves])
        return ftree.unflatten(spec, [part.view_as(leaf) for part, leaf in zip(parts, leaves, strict=True)])

    def mean_tree(self, tree: Any) -> Any:
        """Every leaf of ``tree`` averaged over the ranks (one all-reduce, as :meth:`sum_tree`)."""
        if self.world_size == 1:
            return tree
        return ftree.map(lambda leaf: leaf / self.world_size, self.sum_tree(tree))

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's ``x`` concatenated along ``dim`` in rank order, on every rank.

        Written as one all-reduce of a zero-padded buffer (adding zeros is exact): with a ring
        algorithm it moves about twice what an all-gather would, and it needs only the one
        collective the update already traces.
        """
        if self.world_size == 1:  # a Python constant of the agent: decided when it is built
            return x
        dim = dim % x.dim()
        blocks = [torch.zeros_like(x)] * self.world_size
        blocks[self.rank] = x
        return self.all_reduce_sum(torch.cat(blocks, dim=dim))

    def at_all_rows(self, xs: Sequence[torch.Tensor], num_rows: int) -> list[torch.Tensor]:
        """``xs`` (broadcast together: this rank's rows ``[n, ...]`` of ``num_rows``) repeated to
        ``[num_rows, ...]``, its rows where one process holding all of them would have them;
        ``xs`` as they are for one rank.

        For a row-wise computation (a sample from per-row logits) whose rows must match one
        process's: the other ranks' rows are stand-ins, computed and dropped (:meth:`my_rows`).
        """
        if self.world_size == 1:  # a Python constant of the agent: decided when it is built
            return list(xs)
        self.local_block(num_rows)
        return [x.repeat(self.world_size, *([1] * (x.dim() - 1))) for x in torch.broadcast_tensors(*xs)]

    def my_rows(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's block of the rows of ``x`` ``[num_rows, ...]``; ``x`` for one rank."""
        if self.world_size == 1:
            return x
        block = self.local_block(x.shape[0])
        return x[block.start : block.stop]

    def env_keys(self, key: torch.Tensor, num_envs: int) -> torch.Tensor:
        """This rank's rows of ``split(key, num_envs)``: the keys its environments would get in
        one process holding all ``num_envs``."""
        block = self.local_block(num_envs)
        return random.split(key, num_envs)[block.start : block.stop]


def data_parallel() -> DataParallel:
    """The :class:`DataParallel` of the current process group (one rank without one)."""
    if world_size() == 1:
        return DataParallel()
    return DataParallel(rank(), world_size(), _all_reduce_sum)


def pool_moments(
    dp: DataParallel, mean: torch.Tensor, var: torch.Tensor, count: int, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Mean, population variance and count of all ranks' equal-sized batches from each rank's own
    (``funrl.envs.wrappers.PoolMoments`` once ``dp`` is bound).

    One all-reduce of ``[mean - shift, var + (mean - shift)^2]``: moments about ``shift``, a value
    every rank shares (the running mean), so the subtraction loses little precision.
    """
    centred = mean - shift
    pooled = dp.mean(torch.stack([centred, var + centred.square()]))
    return pooled[0] + shift, (pooled[1] - pooled[0].square()).clamp_min(0.0), count * dp.world_size


class ShardedBatchedEnv(envs.BatchedEnv):
    """This rank's block of ``total_envs`` environments: reset and step give its environments
    the keys one process holding all ``total_envs`` would (its rows of ``split(key, total_envs)``)."""

    def __init__(
        self, env: Any, dp: DataParallel, total_envs: int, batched_params: Sequence[str] = ()
    ) -> None:
        super().__init__(env, len(dp.local_block(total_envs)), batched_params)
        self.dp = dp
        self.total_envs = total_envs

    def keys(self, key: torch.Tensor) -> torch.Tensor:
        return self.dp.env_keys(key, self.total_envs)


def shard_envs(benv: Any, dp: DataParallel, total_envs: int) -> Any:
    """The wrapper chain of ``benv`` (built for this rank's share of ``total_envs``) around a
    :class:`ShardedBatchedEnv`, its normalisation statistics pooled over the ranks.

    ``benv`` itself for one rank. ``benv`` must hold a ``funrl.envs.vmap`` view (a ValueError
    otherwise: a host gymnasium env or a user's batched env cannot be sharded here).
    """
    if dp.world_size == 1:
        return benv
    if isinstance(benv, envs.BatchedEnv):
        return ShardedBatchedEnv(benv.env, dp, total_envs, benv.batched_params)
    if isinstance(benv, wrappers.Wrapper):
        sharded = copy.copy(benv)  # wrappers hold only static options and their inner env
        sharded.env = shard_envs(benv.env, dp, total_envs)
        if isinstance(sharded, (wrappers.NormalizeObservation, wrappers.NormalizeReward)):
            sharded.pool = functools.partial(pool_moments, dp)
        return sharded
    raise ValueError(
        f"env: a data-parallel agent shards a funrl.envs.vmap view over the ranks, got {type(benv).__name__}"
    )


def stack_over(trees: Sequence[Any], dim: int = 0) -> Any:
    """The ranks' trees concatenated along ``dim`` (their seed dimension), in rank order."""
    return ftree.concatenate(list(trees), dim=dim)
