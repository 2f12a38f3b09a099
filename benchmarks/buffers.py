"""Replay buffer add / sample throughput: funrl.buffers against TorchRL and a plain ring buffer.

Items are MuJoCo-sized transitions: obs f32[17], action f32[6], reward f32, done bool,
next_obs f32[17]. At each capacity every buffer is first filled (so adds wrap around and samples
draw from the whole storage), then timed per call:

- add: one batch of 256 transitions;
- sample: 256 transitions, uniformly;
- prioritised (at --prioritised-capacity): sample 256 + update 256 priorities.

Contestants, all in the same process and run:

- ``funrl eager``: ``funrl.buffers.flat`` called directly (with its eager stale-state and
  can-sample checks);
- ``funrl compiled``: the same functions under ``funrl.control.compile``, one compiled call per
  add or sample;
- ``funrl compiled, 8 per call``: 8 adds (a loop over 8 batches) or 8 samples (vmap over 8 keys)
  in one compiled call, reported per add / sample: what one costs inside a compiled update step;
- ``plain ring``: preallocated tensors written with ``index_copy_`` at a Python-int pointer and
  sampled with ``torch.randint`` + indexing: the floor any buffer pays;
- ``torchrl ReplayBuffer``: ``ReplayBuffer(storage=LazyTensorStorage(capacity))`` holding
  TensorDicts (``extend`` / ``sample``); prioritised: ``TensorDictPrioritizedReplayBuffer``;
- ``flashbax`` (with ``--flashbax-python PATH``, a Python with jax + flashbax): its buffers under
  ``jax.jit``, run by ``flashbax_buffer.py`` in that Python after the torch rows.

The contestants of one capacity are timed in turn, repeat by repeat, so that load drifting on a
shared machine falls on all of them alike; each figure is the median over ``--repeats`` timings of
``--iters`` calls: wall clock and (on CPU) the calling thread's CPU time. Every sample call draws
with a different key (a pool of distinct keys, cycled), as the plain ring and TorchRL draw fresh
rows: a fixed key would gather the same rows on every call, from cache.

    OMP_NUM_THREADS=1 python benchmarks/buffers.py --device cpu
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

import torch

import funrl.buffers as fb
from funrl import random as frandom
from funrl.control import compile as fcompile

BATCH = 256
PER_CALL = 8
KEY_POOL = 4096  # 4096 draws of 256 rows outrun the caches; one fixed key would not
_POOL_SEEDS = itertools.count()  # a pool per contestant: none samples rows another just cached


def key_pool(device: torch.device, per_call: int = 1) -> Callable[[], torch.Tensor]:
    """A function returning the next key (``[2]``, or ``[per_call, 2]`` when ``per_call > 1``)."""
    keys = frandom.split(frandom.key(next(_POOL_SEEDS)), KEY_POOL * per_call).to(device)
    if per_call > 1:
        keys = keys.reshape(KEY_POOL, per_call, 2)
    pool = itertools.cycle([k.clone() for k in keys])  # separate tensors: no views, no re-guarding
    return lambda: next(pool)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(call: Callable[[], object], device: torch.device, iters: int) -> tuple[float, float]:
    """(wall, thread CPU) seconds per call over ``iters`` calls, after a warm-up."""
    for _ in range(max(3, iters // 4)):
        call()
    sync(device)
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range(iters):
        call()
    sync(device)
    return (time.perf_counter() - start) / iters, (time.thread_time() - start_cpu) / iters


def example_item(device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.zeros(17, device=device),
        "action": torch.zeros(6, device=device),
        "reward": torch.zeros((), device=device),
        "done": torch.zeros((), dtype=torch.bool, device=device),
        "next_obs": torch.zeros(17, device=device),
    }


def make_batch(size: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return {
        "obs": torch.randn(size, 17, generator=g).to(device),
        "action": torch.randn(size, 6, generator=g).to(device),
        "reward": torch.randn(size, generator=g).to(device),
        "done": (torch.rand(size, generator=g) < 0.01).to(device),
        "next_obs": torch.randn(size, 17, generator=g).to(device),
    }


def fill_batches(capacity: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Batches that, added in order, fill a buffer of ``capacity``."""
    chunk = min(capacity, 1 << 16)
    return [make_batch(chunk, device, seed=2)] * -(-capacity // chunk)


class PlainRing:
    """Preallocated storage, Python-int write pointer, index_copy_ writes: the floor."""

    def __init__(self, capacity: int, device: torch.device):
        self.capacity, self.device = capacity, device
        self.storage = {
            k: torch.zeros((capacity, *v.shape), dtype=v.dtype, device=device)
            for k, v in example_item(device).items()
        }
        self.ptr = self.size = 0

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        n = next(iter(batch.values())).shape[0]
        rows = (torch.arange(n, device=self.device) + self.ptr) % self.capacity
        for k, v in batch.items():
            self.storage[k].index_copy_(0, rows, v)
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        idx = torch.randint(self.size, (n,), device=self.device)
        return {k: v[idx] for k, v in self.storage.items()}


def funrl_calls(mode: str, capacity: int, device: torch.device) -> tuple[Callable, Callable, int]:
    """``(add, sample, per_call)`` of a filled ``funrl.buffers.flat`` in ``mode`` ("eager",
    "compiled" or "several"), compiled and warmed up here."""
    buf = fb.flat(capacity)
    state = buf.init(example_item(device))
    for batch in fill_batches(capacity, device):
        state = buf.add(state, batch)
    per_call, next_key = 1, key_pool(device)
    batch = make_batch(BATCH, device, seed=1)
    if mode == "eager":
        add, sample = buf.add, buf.sample
    elif mode == "compiled":
        add, sample = fcompile(buf.add, dynamic=False), fcompile(buf.sample, dynamic=False)
    else:
        per_call, next_key = PER_CALL, key_pool(device, PER_CALL)
        batches = [make_batch(BATCH, device, seed=10 + i) for i in range(PER_CALL)]

        def add_several(state, batches):
            for b in batches:
                state = buf.add(state, b)
            return state

        compiled_add = fcompile(add_several, dynamic=False)
        sample = fcompile(torch.func.vmap(buf.sample, in_dims=(None, 0, None)), dynamic=False)

        def add(state, _):
            return compiled_add(state, batches)

    holder = [state]

    def do_add() -> None:
        holder[0] = add(holder[0], batch)

    def do_sample() -> None:
        sample(holder[0], next_key(), BATCH)

    do_add(), do_sample()  # compile outside the timings
    return do_add, do_sample, per_call


def contestants(capacity: int, device: torch.device, args: argparse.Namespace) -> dict[str, tuple]:
    """Every contestant at ``capacity``: name -> ``(add, sample, per_call)``."""
    modes = {"eager": "funrl eager"}
    if not args.no_compile:
        modes |= {"compiled": "funrl compiled", "several": f"funrl compiled, {PER_CALL} per call"}
    out = {name: funrl_calls(mode, capacity, device) for mode, name in modes.items()}
    ring = PlainRing(capacity, device)
    for batch in fill_batches(capacity, device):
        ring.add(batch)
    batch = make_batch(BATCH, device, seed=1)
    out["plain ring"] = (lambda: ring.add(batch), lambda: ring.sample(BATCH), 1)
    if not args.no_torchrl:
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        rb = ReplayBuffer(storage=LazyTensorStorage(capacity, device=device), batch_size=BATCH)
        for fill in fill_batches(capacity, device):
            rb.extend(fb.to_tensordict(fill))
        td_batch = fb.to_tensordict(batch)
        out["torchrl ReplayBuffer"] = (lambda: rb.extend(td_batch), rb.sample, 1)
    return out


def bench_capacity(capacity: int, device: torch.device, args: argparse.Namespace) -> dict[str, list]:
    """name -> [add wall, add CPU, sample wall, sample CPU] per add / sample of 256 at ``capacity``,
    medians over repeats that time every contestant in turn."""
    calls = contestants(capacity, device, args)
    times: dict[str, list[list[float]]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, (add, sample, per_call) in calls.items():
            t = (*time_call(add, device, args.iters), *time_call(sample, device, args.iters))
            times[name].append([x / per_call for x in t])
    calls = None
    gc.collect()
    return {name: [statistics.median(t[i] for t in ts) for i in range(4)] for name, ts in times.items()}


def bench_flashbax(python: str, capacities: list[int], args: argparse.Namespace) -> dict[int, dict]:
    """capacity -> {name: [add wall, add CPU, sample wall, sample CPU]} from ``flashbax_buffer.py``
    run by ``python`` (one XLA thread, as torch here)."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flashbax_buffer.py")
    cmd = [python, script, "--iters", str(args.iters), "--repeats", str(args.repeats), "--capacities"]
    done = subprocess.run([*cmd, *map(str, capacities)], env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"# flashbax {result['flashbax']}, jax {result['jax']} ({result['backend']})")
    out: dict[int, dict] = {}
    for r in result["rows"]:
        name = f"flashbax {r['kind']} (jit, donated)"
        out.setdefault(r["capacity"], {})[name] = [
            r[k] for k in ("add_wall", "add_cpu", "sample_wall", "sample_cpu")
        ]
    return out


def bench_prioritised(capacity: int, device: torch.device, args: argparse.Namespace) -> dict[str, list]:
    """name -> [wall, CPU] of one sample of 256 + update of 256 priorities at ``capacity``."""
    buf = fb.prioritised(capacity, alpha=0.6, beta=0.4)
    priorities = torch.rand(BATCH, generator=torch.Generator().manual_seed(3)).to(device) + 0.01

    def step(state, key):
        sample = buf.sample(state, key, BATCH)
        return buf.update_priorities(state, sample.indices, priorities)

    calls = {}
    for mode in ("eager",) + (() if args.no_compile else ("compiled",)):
        state = buf.init(example_item(device))
        for batch in fill_batches(capacity, device):
            state = buf.add(state, batch)
        fn = fcompile(step, dynamic=False) if mode == "compiled" else step
        holder, next_key = [state], key_pool(device)

        def call(fn=fn, holder=holder, next_key=next_key) -> None:
            holder[0] = fn(holder[0], next_key())

        call()  # compile outside the timings
        calls[f"funrl prioritised {mode}"] = call
    if not args.no_torchrl:
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        try:
            rb = TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity, device=device), batch_size=BATCH
            )
        except RuntimeError as err:  # its segment trees are a C++ extension some builds lack
            print(f"# torchrl TensorDictPrioritizedReplayBuffer unavailable: {err}")
        else:
            for fill in fill_batches(capacity, device):
                rb.extend(fb.to_tensordict(fill))

            def torchrl_step() -> None:
                rb.update_priority(rb.sample()["index"], priorities)

            calls["torchrl TensorDictPrioritizedReplayBuffer"] = torchrl_step
    times: dict[str, list] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            times[name].append(time_call(call, device, args.iters))
    return {name: [statistics.median(t[i] for t in ts) for i in (0, 1)] for name, ts in times.items()}


def print_table(capacity: int, rows: dict[str, list]) -> None:
    print(f"\ncapacity {capacity:.0e}, per add / sample of {BATCH}:\n")
    print("| buffer | add (µs) | add CPU (µs) | add (M/s) | sample (µs) | sample CPU (µs) | sample (M/s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (t_add, c_add, t_sample, c_sample) in rows.items():
        print(
            f"| {name} | {t_add * 1e6:.1f} | {c_add * 1e6:.1f} | {BATCH / t_add / 1e6:.2f} "
            f"| {t_sample * 1e6:.1f} | {c_sample * 1e6:.1f} | {BATCH / t_sample / 1e6:.2f} |"
        )
    peer = rows.get("torchrl ReplayBuffer")
    if peer is not None:
        for name in [n for n in rows if n.startswith("funrl")]:
            ours = rows[name]
            print(
                f"\ntorchrl / {name} at {capacity:.0e}: add {peer[0] / ours[0]:.2f}x, "
                f"sample {peer[2] / ours[2]:.2f}x (wall)",
                end="",
            )
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--capacities", default="10000,1000000,10000000")
    parser.add_argument("--prioritised-capacity", type=int, default=1_000_000)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared box)")
    parser.add_argument("--no-torchrl", action="store_true")
    parser.add_argument("--no-compile", action="store_true", help="eager funrl only (no compile time)")
    parser.add_argument("--no-prioritised", action="store_true")
    parser.add_argument("--flashbax-python", default=None, help="a Python with jax + flashbax: adds its rows")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    machine = platform.processor() or platform.machine()
    print(f"# torch {torch.__version__}, {machine}, device {device}, threads {args.threads}")
    capacities = [int(c) for c in args.capacities.split(",")]
    peer = bench_flashbax(args.flashbax_python, capacities, args) if args.flashbax_python else {}
    for capacity in capacities:
        print_table(capacity, {**bench_capacity(capacity, device, args), **peer.get(capacity, {})})
    if not args.no_prioritised:
        print(f"\nprioritised at {args.prioritised_capacity:.0e}, per sample of {BATCH} + update:\n")
        print("| buffer | time (µs) | CPU (µs) |")
        print("|---|---:|---:|")
        for name, (t, c) in bench_prioritised(args.prioritised_capacity, device, args).items():
            print(f"| {name} | {t * 1e6:.1f} | {c * 1e6:.1f} |")


if __name__ == "__main__":
    main()
