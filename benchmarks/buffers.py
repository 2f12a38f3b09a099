"""Replay buffer add / sample throughput: funrl.buffers vs TorchRL and a plain in-place ring buffer.

Items are MuJoCo-sized transitions: obs f32[17], action f32[6], reward f32, done bool,
next_obs f32[17]. For each capacity the buffer is first filled (so adds wrap around and samples
draw from the whole storage), then timed:

- add: one batch of 256 transitions per call;
- sample: 256 transitions per call, uniformly;
- prioritised (at --prioritised-capacity): sample 256 + update 256 priorities per call.

Contestants, all in the same process and run:

- ``funrl eager``: ``funrl.buffers.flat`` called directly (includes its eager stale-state and
  can-sample checks, which read two scalars);
- ``funrl compiled``: the same functions under ``funrl.control.compile`` (``torch.compile`` with
  ``fullgraph=True`` and funrl's inductor options: the path the docs tell users to take), one
  compiled call per add or sample;
- ``funrl compiled, 8 per call``: 8 adds (an unrolled loop over 8 batches) or 8 samples (vmap
  over 8 keys) in one compiled call, reported per add / per sample: what an add or a sample costs
  inside a compiled update step, where the per-call overhead of a compiled function is shared;
- ``plain ring``: preallocated tensors (``torch.zeros``) written with ``index_copy_`` at a
  Python-int pointer and sampled with ``torch.randint`` + indexing: the floor any buffer pays;
- ``plain ring, huge pages``: the same ring on storages allocated like funrl's (transparent huge
  pages for CPU storages of 2 MiB or more), so that the allocation is not what separates them;
- ``torchrl``: ``ReplayBuffer(storage=LazyTensorStorage(capacity))`` holding TensorDicts
  (``extend`` / ``sample``), and ``TensorDictReplayBuffer`` over the same storage type;
  prioritised: ``TensorDictPrioritizedReplayBuffer`` (``sample`` + ``update_priority``);
- ``flashbax`` (with ``--flashbax-python PATH``, a Python with jax + flashbax): its flat and
  item buffers under ``jax.jit`` with the state donated to ``add``, run by
  ``flashbax_buffer.py`` in that Python (single-threaded XLA) after the torch rows of each
  capacity, same item, sizes and timing; its CPU column is that process's CPU time (all its
  threads, so it can exceed wall clock where XLA's runtime works beside the Python thread).

Every sample call draws with a different key (a pool of 4096 distinct keys, cycled; flashbax's
rows likewise), as the plain ring and TorchRL draw fresh rows: a fixed key would gather the same
rows on every call, from cache.

Each figure is the median over ``--repeats`` timings of ``--iters`` calls, after a warm-up: wall
clock, and (on CPU) the calling thread's CPU time, which leaves out the time other processes on a
shared machine take the core away (torch runs one thread here, so all the work is on it).

    python benchmarks/buffers.py --device cpu
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
from funrl.buffers._core import storage_zeros
from funrl.control import compile as fcompile

BATCH = 256
# Sample calls cycle through this many distinct keys (or key batches): with one fixed key every
# call would gather the same rows, which then sit in cache, while the plain ring and TorchRL draw
# fresh rows on every call. 4096 keys of 256 rows (~0.5 GB of rows) outrun the caches.
KEY_POOL = 4096
# Every pool has its own seed: a contestant that reused another's keys would sample rows the other
# had just pulled into the cache (this machine's last-level cache is 260 MB, as big as the rows a
# packed 1e7 storage gives a whole timing run).
_POOL_SEEDS = itertools.count()


def key_pool(device: torch.device, per_call: int = 1) -> Callable[[], torch.Tensor]:
    """A function returning the next key (``[2]``, or ``[per_call, 2]`` when ``per_call > 1``),
    from a pool no other call of this function shares."""
    keys = frandom.split(frandom.key(next(_POOL_SEEDS)), KEY_POOL * per_call).to(device)
    if per_call > 1:
        keys = keys.reshape(KEY_POOL, per_call, 2)
    pool = itertools.cycle([k.clone() for k in keys])  # separate tensors: no views, no re-guarding
    return lambda: next(pool)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    call: Callable[[], None], device: torch.device, iters: int, repeats: int
) -> tuple[float, float]:
    """Median (wall, thread CPU) seconds per call over ``repeats`` runs of ``iters`` calls."""
    for _ in range(max(3, iters // 4)):
        call()
    sync(device)
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        for _ in range(iters):
            call()
        sync(device)
        wall.append((time.perf_counter() - start) / iters)
        cpu.append((time.thread_time() - start_cpu) / iters)
    return statistics.median(wall), statistics.median(cpu)


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


FILL_CHUNK = 1 << 16


def fill_plan(capacity: int, device: torch.device) -> tuple[dict[str, torch.Tensor], int]:
    """The batch that fills a buffer of ``capacity`` (filled buffers wrap on add and sample from
    the whole storage) and how many times to add it."""
    return make_batch(min(capacity, FILL_CHUNK), device, seed=2), -(-capacity // FILL_CHUNK)


class PlainRing:
    """Preallocated storage, Python-int write pointer, index_copy_ writes: the floor."""

    def __init__(self, capacity: int, device: torch.device, huge_pages: bool = False):
        self.capacity = capacity
        zeros = (
            storage_zeros
            if huge_pages
            else (lambda shape, dtype, dev: torch.zeros(shape, dtype=dtype, device=dev))
        )
        self.storage = {
            k: zeros((capacity, *v.shape), v.dtype, device) for k, v in example_item(device).items()
        }
        self.ptr = 0
        self.size = 0
        self.device = device
        self.arange = {}

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        n = next(iter(batch.values())).shape[0]
        if n not in self.arange:
            self.arange[n] = torch.arange(n, device=self.device)
        rows = (self.arange[n] + self.ptr) % self.capacity
        for k, v in batch.items():
            self.storage[k].index_copy_(0, rows, v)
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        idx = torch.randint(self.size, (n,), device=self.device)
        return {k: v[idx] for k, v in self.storage.items()}


PER_CALL = 8


def _prepare_funrl_flat(buf, mode, fill, n_fill, batch, device, warm_sample: bool = True) -> tuple:
    """A filled ``buf`` in ``mode``: ``(do_add, do_sample, per_call, compile_s)``; compiled modes
    are compiled here (the sample only if ``warm_sample``: an add-only contestant never samples)."""
    state = buf.init(example_item(device))
    for _ in range(n_fill):
        state = buf.add(state, fill)
    per_call = 1
    next_key = key_pool(device)
    if mode == "eager":
        add, sample = buf.add, buf.sample
    elif mode == "compiled":
        add, sample = fcompile(buf.add, dynamic=False), fcompile(buf.sample, dynamic=False)
    else:  # several adds / samples in one compiled call
        per_call = PER_CALL
        batches = [make_batch(BATCH, device, seed=10 + i) for i in range(PER_CALL)]
        next_key = key_pool(device, PER_CALL)

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

    compile_s = 0.0
    if mode != "eager":
        start = time.perf_counter()
        do_add()
        if warm_sample:
            do_sample()
        sync(device)
        compile_s = time.perf_counter() - start
    return do_add, do_sample, per_call, compile_s


def _bench_funrl_flat(buf, mode, fill, n_fill, batch, device, args) -> tuple:
    """(add wall, add cpu, sample wall, sample cpu, compile s) for ``buf`` in ``mode``, per add / sample."""
    do_add, do_sample, per_call, compile_s = _prepare_funrl_flat(buf, mode, fill, n_fill, batch, device)
    t_add = time_call(do_add, device, args.iters, args.repeats)
    t_sample = time_call(do_sample, device, args.iters, args.repeats)
    return (*(t / per_call for t in t_add), *(t / per_call for t in t_sample), compile_s)


FUNRL_MODES = {
    "eager": "funrl eager",
    "compiled": "funrl compiled",
    "several": f"funrl compiled, {PER_CALL} per call",
}
MODE_OF = {name: mode for mode, name in FUNRL_MODES.items()}


def bench_head_to_head(capacity: int, device: torch.device, args: argparse.Namespace) -> list:
    """funrl against flashbax at ``capacity``, timed in turn repeat by repeat: each repeat times
    every funrl mode once here, then asks a flashbax process (``flashbax_buffer.py --serve``,
    every kind prepared and compiled once) to time each of its kinds once. Medians per add /
    sample, so that load drifting on a shared machine falls on both sides alike."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flashbax_buffer.py")
    cmd = [args.flashbax_python, script, "--serve", "--iters", str(args.iters), "--capacities", str(capacity)]
    peer = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout is not None and peer.stdin is not None
        json.loads(peer.stdout.readline())  # every kind filled and compiled
        batch = make_batch(BATCH, device, seed=1)
        fill, n_fill = fill_plan(capacity, device)
        buf = fb.flat(capacity)
        ours = {
            name: _prepare_funrl_flat(buf, mode, fill, n_fill, batch, device)
            for mode, name in FUNRL_MODES.items()
        }
        times: dict[str, list] = {}
        for _ in range(args.repeats):
            for name, (do_add, do_sample, per_call, _) in ours.items():
                t = (*time_call(do_add, device, args.iters, 1), *time_call(do_sample, device, args.iters, 1))
                times.setdefault(name, []).append([x / per_call for x in t])
            peer.stdin.write("time\n")
            peer.stdin.flush()
            for kind, t in json.loads(peer.stdout.readline()).items():
                times.setdefault(FLASHBAX_NAMES[kind], []).append(t)
        peer.stdin.close()
        if peer.wait(timeout=60) != 0:
            raise RuntimeError(f"{cmd} exited with {peer.returncode}")
    finally:
        if peer.poll() is None:
            peer.kill()
    ours = None
    gc.collect()
    return [
        (capacity, name, *(statistics.median(t[i] for t in ts) for i in range(4)), 0.0)
        for name, ts in times.items()
    ]


def bench_capacity(capacity: int, device: torch.device, args: argparse.Namespace, rows: list) -> None:
    batch = make_batch(BATCH, device, seed=1)
    fill, n_fill = fill_plan(capacity, device)

    # funrl eager and compiled share one buffer definition; each has its own storage in turn.
    buf = fb.flat(capacity)
    for mode, name in (
        ("eager", "funrl eager"),
        ("compiled", "funrl compiled"),
        ("several", f"funrl compiled, {PER_CALL} per call"),
    ):
        rows.append((capacity, name, *_bench_funrl_flat(buf, mode, fill, n_fill, batch, device, args)))
        gc.collect()

    for huge_pages, name in ((False, "plain ring"), (True, "plain ring, huge pages")):
        ring = PlainRing(capacity, device, huge_pages=huge_pages)
        for _ in range(n_fill):
            ring.add(fill)
        t_add = time_call(lambda ring=ring: ring.add(batch), device, args.iters, args.repeats)
        t_sample = time_call(lambda ring=ring: ring.sample(BATCH), device, args.iters, args.repeats)
        rows.append((capacity, name, *t_add, *t_sample, 0.0))
        ring.storage = {}
        gc.collect()

    if not args.no_torchrl:
        from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer

        td_batch = fb.to_tensordict(batch)
        td_fill = fb.to_tensordict(fill)
        for name, cls in (
            ("torchrl ReplayBuffer", ReplayBuffer),
            ("torchrl TensorDictReplayBuffer", TensorDictReplayBuffer),
        ):
            rb = cls(storage=LazyTensorStorage(capacity, device=device), batch_size=BATCH)
            for _ in range(n_fill):
                rb.extend(td_fill)
            t_add = time_call(lambda rb=rb: rb.extend(td_batch), device, args.iters, args.repeats)
            t_sample = time_call(lambda rb=rb: rb.sample(), device, args.iters, args.repeats)
            rows.append((capacity, name, *t_add, *t_sample, 0.0))
            rb.empty()
            gc.collect()


FLASHBAX_NAMES = {
    "flat": "flashbax flat buffer (JAX, jit, donated)",
    "item": "flashbax item buffer (JAX, jit, donated)",
    "flat, 8 per call": f"flashbax flat buffer, {PER_CALL} per call",
}


def time_flashbax(python: str, capacities: list[int], args: argparse.Namespace) -> dict:
    """flashbax's rows from ``flashbax_buffer.py`` run by ``python`` (one XLA thread, as torch here)."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flashbax_buffer.py")
    cmd = [python, script, "--iters", str(args.iters), "--repeats", str(args.repeats), "--capacities"]
    out = subprocess.run([*cmd, *map(str, capacities)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def flashbax_rows(result: dict, capacity: int) -> list:
    """Rows in ``print_rows`` form for one capacity of a ``time_flashbax`` result."""
    return [
        (
            capacity,
            FLASHBAX_NAMES[r["kind"]],
            r["add_wall"],
            r["add_cpu"],
            r["sample_wall"],
            r["sample_cpu"],
            r["compile_s"],
        )
        for r in result["rows"]
        if r["capacity"] == capacity
    ]


def _filled_ring(name: str, capacity: int, device: torch.device) -> PlainRing:
    """The plain ring of contestant ``name`` (huge pages or not), filled to ``capacity``."""
    fill, n_fill = fill_plan(capacity, device)
    ring = PlainRing(capacity, device, huge_pages=name.endswith("huge pages"))
    for _ in range(n_fill):
        ring.add(fill)
    return ring


def _filled_torchrl(capacity: int, device: torch.device):
    """TorchRL's ``ReplayBuffer(LazyTensorStorage)``, filled to ``capacity``."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    fill, n_fill = fill_plan(capacity, device)
    rb = ReplayBuffer(storage=LazyTensorStorage(capacity, device=device), batch_size=BATCH)
    td_fill = fb.to_tensordict(fill)
    for _ in range(n_fill):
        rb.extend(td_fill)
    return rb


def _sample_call(
    name: str, capacity: int, device: torch.device, funrl_states: dict
) -> tuple[Callable[[], None], int, list]:
    """(call, samples per call, things to keep alive) for one scaling contestant at ``capacity``.
    The funrl contestants only sample, so they share one filled state per capacity
    (``funrl_states``), each with its own keys."""
    if name.startswith("plain ring"):
        ring = _filled_ring(name, capacity, device)
        return (lambda: ring.sample(BATCH)), 1, [ring]
    if name == "torchrl ReplayBuffer":
        rb = _filled_torchrl(capacity, device)
        return (lambda: rb.sample()), 1, [rb]
    fill, n_fill = fill_plan(capacity, device)
    buf = fb.flat(capacity)
    if capacity not in funrl_states:
        state = buf.init(example_item(device))
        for _ in range(n_fill):
            state = buf.add(state, fill)
        funrl_states[capacity] = state
    state = funrl_states[capacity]
    if name in ("funrl eager", "funrl compiled"):
        sample = buf.sample if name == "funrl eager" else fcompile(buf.sample, dynamic=False)
        next_key = key_pool(device)
        return (lambda: sample(state, next_key(), BATCH)), 1, [state]
    several = fcompile(torch.func.vmap(buf.sample, in_dims=(None, 0, None)), dynamic=False)
    next_keys = key_pool(device, PER_CALL)
    return (lambda: several(state, next_keys(), BATCH)), PER_CALL, [state]


def _add_call(name: str, capacity: int, device: torch.device) -> tuple[Callable[[], None], int, list]:
    """(call, adds per call, things to keep alive) for one add contestant at ``capacity``, filled
    first so that adds wrap. Each funrl contestant has its own storage: ``add`` donates it."""
    batch = make_batch(BATCH, device, seed=1)
    if name.startswith("plain ring"):
        ring = _filled_ring(name, capacity, device)
        return (lambda: ring.add(batch)), 1, [ring]
    if name == "torchrl ReplayBuffer":
        rb, td_batch = _filled_torchrl(capacity, device), fb.to_tensordict(batch)
        return (lambda: rb.extend(td_batch)), 1, [rb]
    fill, n_fill = fill_plan(capacity, device)
    do_add, _, per_call, _ = _prepare_funrl_flat(
        fb.flat(capacity), MODE_OF[name], fill, n_fill, batch, device, warm_sample=False
    )
    return do_add, per_call, []


SCALING_NAMES = [*FUNRL_MODES.values(), "plain ring", "plain ring, huge pages"]


def bench_scaling(
    small: int, large: int, device: torch.device, args: argparse.Namespace, what: str = "sample"
) -> list:
    """Time of one ``what`` ("sample" or "add") of 256 at ``large`` and ``small`` capacity, every
    contestant's storages alive and all timed in turn repeat by repeat, so that load drifting
    over a long run falls on every contestant and capacity alike: the table to read for the
    1e7/1e4 ratios and for the ratios to the plain ring and to TorchRL."""
    names = SCALING_NAMES + ([] if args.no_torchrl else ["torchrl ReplayBuffer"])
    funrl_states: dict = {}
    calls = {}
    for name in names:
        for capacity in (small, large):
            if what == "sample":
                calls[name, capacity] = _sample_call(name, capacity, device, funrl_states)
            else:
                calls[name, capacity] = _add_call(name, capacity, device)
            calls[name, capacity][0]()  # compile before timing
    times: dict[tuple[str, int], list[tuple[float, float]]] = {k: [] for k in calls}
    for _ in range(args.repeats):
        for k, (call, _, _) in calls.items():
            times[k].append(time_call(call, device, args.iters, 1))
    out = []
    for name in names:
        medians = {
            c: tuple(statistics.median(t[i] for t in times[name, c]) / calls[name, c][1] for i in (0, 1))
            for c in (small, large)
        }
        out.append((name, medians[small], medians[large]))
    calls = funrl_states = None
    gc.collect()
    return out


GATHER_SETS = 64


def cache_lines_per_row(row_bytes: int) -> float:
    """Mean 64-byte cache lines one row of ``row_bytes`` spans, over the row offsets a
    contiguous ``[N, row_bytes]`` storage (64-byte aligned) gives its rows."""
    lines = [(off + row_bytes - 1) // 64 - off // 64 + 1 for off in (i * row_bytes % 64 for i in range(64))]
    return sum(lines) / len(lines)


def bench_gather(capacities: list[int], device: torch.device, args: argparse.Namespace) -> list:
    """Where the sample's time goes: 256 stored rows gathered from a filled funrl storage (packed:
    one ``[capacity, width]`` tensor per dtype), with the indices given (no random draw), and from
    the same items stored leaf by leaf (one tensor per leaf, funrl's layout before packing).
    ``GATHER_SETS`` index sets per compiled call, so the fixed cost of a call is shared; per 256
    rows. The ``sorted`` cases read the same rows in address order: given sorted (the memory side
    alone), sorted in the call, and sorted then put back in the drawn order (what a sample, which
    must keep that order, would pay): the ordering experiment for the large-capacity sample."""
    out = []
    g = torch.Generator().manual_seed(5)
    for capacity in capacities:
        buf = fb.flat(capacity)
        state = buf.init(example_item(device))
        fill, n_fill = fill_plan(capacity, device)
        for _ in range(n_fill):
            state = buf.add(state, fill)
        packed = {f"{t.dtype} rows".removeprefix("torch."): t for t in state.experience}
        leafwise = {
            k: storage_zeros(v.shape, v.dtype, device) for k, v in fb.storage_items(state.experience).items()
        }
        for k, v in fb.storage_items(state.experience).items():
            leafwise[k].copy_(v)
        idx = torch.randint(capacity, (GATHER_SETS, BATCH), generator=g).to(device)

        def gather_all(ex, idx):
            return {k: v[idx] for k, v in ex.items()}

        def one_tensor(t, idx):
            return t[idx]

        def sorted_in_call(ex, idx):
            rows = idx.sort(dim=-1).values
            return {k: v[rows] for k, v in ex.items()}

        def sorted_restored(ex, idx):
            rows, perm = idx.sort(dim=-1)
            back = perm.argsort(dim=-1)
            return {
                k: torch.take_along_dim(v[rows], back.view(*back.shape, *[1] * (v.dim() - 1)), dim=1)
                for k, v in ex.items()
            }

        # name: (function, first argument, indices, storage tensors read). One tensor alone passes
        # that tensor, so that each case is its own graph (guards on a key would recompile).
        presorted = idx.sort(dim=-1).values
        cases = {"packed: all groups": (gather_all, packed, idx, list(packed.values()))}
        cases.update({f"packed: {k}": (one_tensor, v, idx, [v]) for k, v in packed.items()})
        for what, fn, rows in (
            ("rows given sorted (sort not timed, drawn order lost)", gather_all, presorted),
            ("sorted in the call (drawn order lost)", sorted_in_call, idx),
            ("sorted in the call, drawn order restored", sorted_restored, idx),
        ):
            cases[f"packed: all groups, {what}"] = (fn, packed, rows, list(packed.values()))
        cases["leaf by leaf (one tensor per leaf): all leaves"] = (
            gather_all,
            leafwise,
            idx,
            list(leafwise.values()),
        )
        cases["indices only (idx + 1)"] = (lambda ex, idx: idx + 1, packed, idx, [])
        torch._dynamo.reset()  # a fresh compile cache per capacity
        compiled = {f: fcompile(f, dynamic=False) for f, _, _, _ in cases.values()}
        calls = {
            name: (lambda f=compiled[f], arg=arg, rows=rows: f(arg, rows))
            for name, (f, arg, rows, _) in cases.items()
        }
        for call in calls.values():
            call()
        times: dict[str, list] = {name: [] for name in calls}
        for _ in range(args.repeats):  # in turn, so that load drift falls on every case alike
            for name, call in calls.items():
                times[name].append(time_call(call, device, max(1, args.iters // 4), 1))
        for name, (_, _, _, read) in cases.items():
            wall, cpu = (statistics.median(t[i] for t in times[name]) / GATHER_SETS for i in (0, 1))
            lines = sum(cache_lines_per_row(t[0].numel() * t.dtype.itemsize) for t in read)
            out.append((capacity, name, lines, wall, cpu))
        state = packed = leafwise = cases = calls = compiled = None  # free this capacity's storage
        gc.collect()
    return out


def bench_prioritised(capacity: int, device: torch.device, args: argparse.Namespace) -> list:
    out = []
    fill, n_fill = fill_plan(capacity, device)
    buf = fb.prioritised(capacity, alpha=0.6, beta=0.4)
    new_priorities = torch.rand(BATCH, generator=torch.Generator().manual_seed(3)).to(device) + 0.01
    next_key = key_pool(device)

    def step(state, key):
        sample = buf.sample(state, key, BATCH)
        return buf.update_priorities(state, sample.indices, new_priorities), sample

    for mode in ("eager", "compiled"):
        state = buf.init(example_item(device))
        for _ in range(n_fill):
            state = buf.add(state, fill)
        fn = fcompile(step, dynamic=False) if mode == "compiled" else step
        holder = [state]

        def call(fn=fn, holder=holder) -> None:
            holder[0], _ = fn(holder[0], next_key())

        compile_s = 0.0
        if mode == "compiled":
            start = time.perf_counter()
            call()
            sync(device)
            compile_s = time.perf_counter() - start
        out.append(
            (
                capacity,
                f"funrl prioritised {mode}",
                *time_call(call, device, args.iters, args.repeats),
                compile_s,
            )
        )
        holder.clear()
        gc.collect()

    if not args.no_torchrl:
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        try:
            rb = TensorDictPrioritizedReplayBuffer(
                alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity, device=device), batch_size=BATCH
            )
        except RuntimeError as err:  # its segment trees are a C++ extension some builds lack
            print(f"# torchrl TensorDictPrioritizedReplayBuffer unavailable: {err}")
            return out
        td_fill = fb.to_tensordict(fill)
        for _ in range(n_fill):
            rb.extend(td_fill)

        def torchrl_step() -> None:
            sample = rb.sample()
            rb.update_priority(sample["index"], new_priorities)

        t_step = time_call(torchrl_step, device, args.iters, args.repeats)
        out.append((capacity, "torchrl TensorDictPrioritizedReplayBuffer", *t_step, 0.0))
        rb.empty()
        gc.collect()
    return out


def print_rows(rows: list) -> None:
    print(
        "| capacity | buffer | add 256 (µs) | add CPU (µs) | add (M transitions/s) "
        "| sample 256 (µs) | sample CPU (µs) | sample (M transitions/s) | compile (s) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for capacity, name, t_add, c_add, t_sample, c_sample, compile_s in rows:
        print(
            f"| {capacity:.0e} | {name} | {t_add * 1e6:.1f} | {c_add * 1e6:.1f} | {BATCH / t_add / 1e6:.2f} | "
            f"{t_sample * 1e6:.1f} | {c_sample * 1e6:.1f} | {BATCH / t_sample / 1e6:.2f} | {compile_s:.1f} |"
        )


def print_peer_ratios(table: list, what: str, small: int, large: int) -> None:
    """funrl eager's time against the plain ring's (the floor) and TorchRL's against funrl eager's
    (its throughput over TorchRL's), at each capacity, from one round-robin table."""
    wall = {name: (w_s, w_l) for name, (w_s, _), (w_l, _) in table}
    ours, floor = wall["funrl eager"], wall["plain ring"]
    line = f"\n{what}: funrl eager / plain ring {ours[0] / floor[0]:.2f} at {small:.0e}, {ours[1] / floor[1]:.2f} at {large:.0e}"
    if "torchrl ReplayBuffer" in wall:
        peer = wall["torchrl ReplayBuffer"]
        line += f"; torchrl / funrl eager {peer[0] / ours[0]:.2f}x at {small:.0e}, {peer[1] / ours[1]:.2f}x at {large:.0e}"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--capacities", default="10000,1000000,10000000")
    parser.add_argument("--prioritised-capacity", type=int, default=1_000_000)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared box)")
    parser.add_argument("--no-torchrl", action="store_true")
    parser.add_argument(
        "--flashbax-python", default=None, help="a Python with jax + flashbax: adds flashbax rows"
    )
    parser.add_argument(
        "--no-scaling", action="store_true", help="skip the round-robin 1e4-vs-1e7 sample and add tables"
    )
    parser.add_argument(
        "--only-scaling", action="store_true", help="only the round-robin sample and add tables"
    )
    parser.add_argument(
        "--only-gather",
        action="store_true",
        help="only the per-leaf gather table (where a sample's time goes), at the smallest and largest capacity",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    machine = platform.processor() or platform.machine()
    print(f"# torch {torch.__version__}, {machine}, device {device}, threads {args.threads}")
    capacities = [int(c) for c in args.capacities.split(",")]
    if args.only_gather:
        ends = sorted({min(capacities), max(capacities)})
        print("\ngather of 256 stored rows, indices given (no draw), per 256 rows:\n")
        print("| capacity | storage read | cache lines per row | time (µs) | CPU (µs) |")
        print("|---:|---|---:|---:|---:|")
        for capacity, name, lines, wall, cpu in bench_gather(ends, device, args):
            print(f"| {capacity:.0e} | {name} | {lines:.2f} | {wall * 1e6:.2f} | {cpu * 1e6:.2f} |")
        return
    rows: list = []
    for capacity in capacities:
        if not args.only_scaling:
            bench_capacity(capacity, device, args, rows)
            if args.flashbax_python:
                # Right after funrl's rows at this capacity (so that load drifting over the run
                # falls on both alike), once this process has freed those storages: at 1e7 each
                # side holds about 1.6 GB.
                peer = time_flashbax(args.flashbax_python, [capacity], args)
                shapes = {r["kind"]: r["storage_shape"] for r in peer["rows"]}
                print(
                    f"# flashbax {peer['flashbax']}, jax {peer['jax']} ({peer['backend']}); storage {shapes}"
                )
                rows.extend(flashbax_rows(peer, capacity))
    if rows:
        print_rows(rows)
    if args.flashbax_python and not args.only_scaling:
        print("\nfunrl against flashbax, timed in turn repeat by repeat (per add / sample of 256):\n")
        h2h = []
        for capacity in capacities:
            h2h.extend(bench_head_to_head(capacity, device, args))
        print_rows(h2h)
    if not args.no_scaling:
        caps = sorted(int(c) for c in args.capacities.split(","))
        small, large = caps[0], caps[-1]
        for what in ("sample", "add"):
            print(f"\n{what} 256 at {large:.0e} against {small:.0e}, all alive, all timed in turn:\n")
            print(f"| buffer | {small:.0e} (µs) | CPU | {large:.0e} (µs) | CPU | ratio wall | ratio CPU |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            table = bench_scaling(small, large, device, args, what)
            for name, (w_s, c_s), (w_l, c_l) in table:
                print(
                    f"| {name} | {w_s * 1e6:.1f} | {c_s * 1e6:.1f} | {w_l * 1e6:.1f} | {c_l * 1e6:.1f} "
                    f"| {w_l / w_s:.2f} | {c_l / c_s:.2f} |"
                )
            print_peer_ratios(table, what, small, large)
    # What any compiled call costs here before doing work: guards, wrappers, launching one kernel.
    count = torch.zeros((), dtype=torch.int64, device=device)
    one_op = fcompile(lambda c: c + BATCH, dynamic=False)
    t_one, c_one = time_call(lambda: one_op(count), device, args.iters, args.repeats)
    print(
        f"\nfixed cost of one compiled call (one scalar add): {t_one * 1e6:.1f} µs, CPU {c_one * 1e6:.1f} µs"
    )
    prio = bench_prioritised(args.prioritised_capacity, device, args)
    print()
    print("| capacity | buffer | sample 256 + update 256 (µs) | CPU (µs) | compile (s) |")
    print("|---:|---|---:|---:|---:|")
    for capacity, name, t, c, compile_s in prio:
        print(f"| {capacity:.0e} | {name} | {t * 1e6:.1f} | {c * 1e6:.1f} | {compile_s:.1f} |")


if __name__ == "__main__":
    main()
