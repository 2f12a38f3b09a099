"""Scaling over processes with torchrun: seed sharding and data-parallel PPO on CartPole.

    python benchmarks/distributed.py --device cpu [--procs 1 2] [--seeds 8] [--num-envs 8]
                                     [--updates 20] [--no-compile] [--runs seeds dp]

For each process count P it launches ``torchrun --standalone --nproc-per-node P`` on this script's
worker (one torch thread per rank) twice:

- seed sharding: ``--seeds`` PPO seeds split over the ranks, each rank vmapping its block;
  seeds/s counts seed-updates per second (every seed advancing one update), env steps/s the
  environment steps of all seeds;
- data parallelism: one PPO agent with ``--num-envs`` environments split over the ranks, env
  steps/s for the agent, the all-reduce's share of an update (the same compiled update with the
  all-reduce replaced by the identity, timed in the same process) and the bytes each rank sends
  into all-reduces per update (counted on an eager update).

Prints a markdown table; updates are timed after a first (compiling) update, median of three
timed blocks of ``--updates`` updates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from funrl import distributed, random
    from funrl.agents import common, ppo

    torch.set_num_threads(1)
    rank, world = distributed.rank(), distributed.world_size()
    config = ppo.PPOConfig(num_envs=args.num_envs, total_steps=10**9)

    def timed(step: Any, state: Any, run_key: torch.Tensor) -> tuple[float, Any]:
        """Median seconds per update over three blocks, after one update that compiles."""
        state, metrics = step(state, run_key)
        metrics["loss"].sum().item()
        blocks = []
        for _ in range(3):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.updates):
                state, metrics = step(state, run_key)
            metrics["loss"].sum().item()
            blocks.append((time.perf_counter() - t0) / args.updates)
        return statistics.median(blocks), state

    compile = not args.no_compile
    if args.mode == "seeds":
        agent = ppo.make_train(dataclass_replace(config, num_envs=args.seed_envs), device=args.device)
        block = distributed.shard(args.seeds, rank, world)
        keys = common.seed_keys(0, args.seeds)[block.start : block.stop]
        # A block of one seed steps unbatched, as funrl.agents.common.train does.
        state, run_key = common.init_state(agent, keys if len(block) > 1 else keys[0])
        step = common.make_step(agent, batched=len(block) > 1, compile=compile)
        per_update, _ = timed(step, state, run_key)
        result = {
            "update_s": per_update,
            "seeds": args.seeds,
            "env_steps": args.seeds * agent.steps_per_update,
        }
    else:
        dp = distributed.data_parallel()
        sent = []

        def counting_sum(x: torch.Tensor) -> torch.Tensor:
            sent.append(x.numel() * x.element_size())
            return dp.all_reduce_sum(x)

        counting = ppo.make_train(
            config, device=args.device, data_parallel=dp._replace(all_reduce_sum=counting_sum)
        )
        state, run_key = common.init_state(counting, random.key(0))
        counting.update(state, run_key)  # eager: every all-reduce call is counted once
        agent = ppo.make_train(config, device=args.device, data_parallel=dp)
        state, run_key = common.init_state(agent, random.key(0))
        per_update, _ = timed(common.make_step(agent, batched=False, compile=compile), state, run_key)
        # The same update with the identity for the sum: the computation without communication.
        alone = ppo.make_train(
            config, device=args.device, data_parallel=dp._replace(all_reduce_sum=lambda x: x)
        )
        alone = dataclass_replace(alone, static_key=None)  # its own compiled step, not agent's
        state, run_key = common.init_state(alone, random.key(0))
        alone_update, _ = timed(common.make_step(alone, batched=False, compile=compile), state, run_key)
        result = {
            "update_s": per_update,
            "alone_s": alone_update,
            "env_steps": agent.steps_per_update,
            "allreduce_bytes": sum(sent),
            "allreduce_calls": len(sent),
            "params": sum(p.numel() for p in state.params.values()),
        }
    if rank == 0:
        print("BENCH " + json.dumps({"procs": world, "mode": args.mode, **result}), flush=True)


def dataclass_replace(config: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, **changes)


def launch(procs: int, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}"]
    # -P: the benchmarks folder stays off sys.path, where its files would shadow packages.
    command += ["--no-python", sys.executable, "-P", str(Path(__file__).resolve())]
    command += ["--worker", "--mode", mode, "--device", args.device]
    command += [
        "--seeds",
        str(args.seeds),
        "--num-envs",
        str(args.num_envs),
        "--seed-envs",
        str(args.seed_envs),
    ]
    command += ["--updates", str(args.updates)] + (["--no-compile"] if args.no_compile else [])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"torchrun with {procs} processes failed:\n{proc.stderr[-4000:]}")
    return json.loads(lines[0].removeprefix("BENCH "))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seeds", type=int, default=8, help="seeds of the seed-sharding rows (default: 8)")
    parser.add_argument(
        "--seed-envs", type=int, default=4, help="envs per seed there (default: 4, PureJaxRL's)"
    )
    parser.add_argument(
        "--num-envs", type=int, default=8, help="envs of the data-parallel agent (default: 8)"
    )
    parser.add_argument("--updates", type=int, default=20, help="updates per timed block (default: 20)")
    parser.add_argument("--no-compile", action="store_true", help="time eager updates")
    parser.add_argument(
        "--runs", nargs="+", choices=("seeds", "dp"), default=["seeds", "dp"],
        help="which rows: seed sharding, data parallelism (default: both)",
    )  # fmt: skip
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("seeds", "dp"), default="seeds", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from funrl import distributed

        with distributed.process_group(args.device):
            worker(args)
        return
    rows = {(mode, p): launch(p, mode, args) for mode in args.runs for p in args.procs}
    mode = "eager" if args.no_compile else "compiled"
    print(
        f"PPO CartPole-v1, {mode}, --device {args.device}, one torch thread per process, {os.cpu_count()} CPUs"
    )
    print()
    print("| run | processes | s/update | seeds/s | env steps/s | speed-up | all-reduce share |")
    print("|---|---|---|---|---|---|---|")
    for (kind, procs), row in rows.items():
        base = rows[(kind, args.procs[0])]
        rate = row["env_steps"] / row["update_s"]
        speedup = base["update_s"] / row["update_s"]
        if kind == "seeds":
            seeds = f"{row['seeds'] / row['update_s']:.1f}"
            name, share = f"{args.seeds} seeds x {args.seed_envs} envs, sharded", "-"
        else:
            seeds = "-"
            name = f"1 agent x {args.num_envs} envs, data-parallel"
            share = f"{max(0.0, 1 - row['alone_s'] / row['update_s']):.0%}"
        print(
            f"| {name} | {procs} | {row['update_s'] * 1e3:.1f} ms | {seeds} | {rate:,.0f} | {speedup:.2f}x | {share} |"
        )
    dp = rows.get(("dp", args.procs[-1]))
    if dp is None:
        return
    print()
    print(
        f"data-parallel all-reduce traffic per update and rank: {dp['allreduce_bytes'] / 1e6:.3f} MB in "
        f"{dp['allreduce_calls']} calls ({dp['params']} params)"
    )


if __name__ == "__main__":
    main()
