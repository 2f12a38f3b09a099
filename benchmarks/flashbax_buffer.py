"""flashbax add / sample throughput: the JAX peer for buffers.py.

Runs in a separate Python that has ``jax`` and ``flashbax`` (never a funrl dependency), e.g.
``python3 -m venv /tmp/fbxvenv && /tmp/fbxvenv/bin/pip install flashbax`` (a JAX CPU install);
buffers.py calls it with ``--flashbax-python /tmp/fbxvenv/bin/python`` so that both are measured
in the same run, and parses the JSON line it prints last.

Same item and sizes as buffers.py: obs f32[17], action f32[6], reward f32, done bool,
next_obs f32[17]; add batches of 256, sample batches of 256, the buffer filled to capacity first
(adds wrap, samples draw from the whole storage). flashbax's documented recipe: ``add`` under
``jax.jit(..., donate_argnums=0)`` (the state is donated, so XLA writes the storage in place),
``sample`` under ``jax.jit``. Buffers:

- ``flat``: ``fbx.make_flat_buffer(add_batch_size=256)``: storage ``[256, capacity // 256]``
  (a time axis per add slot); a sample draws 256 pairs of consecutive items (``first``,
  ``second``), which is how its flat buffer returns transitions;
- ``item``: ``fbx.make_item_buffer(add_batches=True)``: one time axis of ``capacity`` items, a
  sample draws 256 single items (the same reads as funrl's flat buffer);
- ``flat, 8 per call``: 8 adds (8 batches) or 8 samples (``jax.vmap`` over 8 keys) in one jitted
  call, reported per add / per sample, like buffers.py's "8 per call" rows.

Each figure is the median over ``--repeats`` timings of ``--iters`` calls after a warm-up, with
``jax.block_until_ready`` on the last result of each timing: wall clock and the CPU time of this
process (``time.process_time``: all its threads; XLA is asked for one intra-op thread).

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        /tmp/fbxvenv/bin/python benchmarks/flashbax_buffer.py --capacities 10000 1000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable

BATCH = 256
PER_CALL = 8
KEY_POOL = 4096  # distinct keys (or key batches) cycled through by the sample calls


def time_call(call: Callable[[], object], iters: int, repeats: int) -> tuple[float, float]:
    """Median (wall, process CPU) seconds per call over ``repeats`` runs of ``iters`` calls."""
    import jax

    out = None
    for _ in range(max(3, iters // 4)):
        out = call()
    jax.block_until_ready(out)
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(iters):
            out = call()
        jax.block_until_ready(out)
        wall.append((time.perf_counter() - start) / iters)
        cpu.append((time.process_time() - start_cpu) / iters)
    return statistics.median(wall), statistics.median(cpu)


def prepare(kind: str, capacity: int) -> tuple:
    """A filled, compiled buffer of ``kind``: ``(do_add, do_sample, per_call, compile_s, storage_shape)``."""
    import flashbax as fbx
    import jax
    import jax.numpy as jnp

    def batch(seed: int) -> dict:
        k = jax.random.split(jax.random.PRNGKey(seed), 4)
        return {
            "obs": jax.random.normal(k[0], (BATCH, 17), jnp.float32),
            "action": jax.random.normal(k[1], (BATCH, 6), jnp.float32),
            "reward": jax.random.normal(k[2], (BATCH,), jnp.float32),
            "done": jax.random.uniform(k[3], (BATCH,)) < 0.01,
            "next_obs": jax.random.normal(k[0], (BATCH, 17), jnp.float32) + 1.0,
        }

    example = jax.tree.map(lambda x: x[0], batch(0))
    if kind == "item":
        buffer = fbx.make_item_buffer(
            max_length=capacity, min_length=1, sample_batch_size=BATCH, add_batches=True
        )
    else:
        buffer = fbx.make_flat_buffer(
            max_length=capacity, min_length=1, sample_batch_size=BATCH, add_batch_size=BATCH
        )
    add = jax.jit(buffer.add, donate_argnums=0)
    sample = jax.jit(buffer.sample)
    state = buffer.init(example)
    fill = batch(2)
    # Fill to capacity (one more batch than it holds, so the write head has wrapped).
    for _ in range(-(-capacity // BATCH) + 1):
        state = add(state, fill)
    jax.block_until_ready(state)
    # A different key per sample call (see buffers.py: a fixed key re-reads cached rows).
    keys = jax.random.split(jax.random.PRNGKey(0), KEY_POOL * PER_CALL)
    key_pool = itertools.cycle([keys[i] for i in range(KEY_POOL)])
    per_call = 1
    if kind == "flat, 8 per call":
        per_call = PER_CALL
        batches = [batch(10 + i) for i in range(PER_CALL)]
        key_pool = itertools.cycle([keys[i * PER_CALL : (i + 1) * PER_CALL] for i in range(KEY_POOL)])

        def add_several(state, batches):
            for b in batches:
                state = buffer.add(state, b)
            return state

        several_add = jax.jit(add_several, donate_argnums=0)
        several_sample = jax.jit(jax.vmap(buffer.sample, in_axes=(None, 0)))

        def add(state, _):
            return several_add(state, batches)

        def sample(state, keys):
            return several_sample(state, keys)

    one = batch(1)
    holder = [state]

    def do_add():
        holder[0] = add(holder[0], one)
        return holder[0]

    def do_sample():
        return sample(holder[0], next(key_pool))

    start = time.perf_counter()
    jax.block_until_ready(do_add())
    jax.block_until_ready(do_sample())
    compile_s = time.perf_counter() - start
    stored = jax.tree.leaves(holder[0].experience)[0].shape
    return do_add, do_sample, per_call, compile_s, list(stored[:2])


def bench(kind: str, capacity: int, iters: int, repeats: int) -> dict:
    do_add, do_sample, per_call, compile_s, storage_shape = prepare(kind, capacity)
    t_add = time_call(do_add, iters, repeats)
    t_sample = time_call(do_sample, iters, repeats)
    return {
        "kind": kind,
        "capacity": capacity,
        "storage_shape": storage_shape,
        "add_wall": t_add[0] / per_call,
        "add_cpu": t_add[1] / per_call,
        "sample_wall": t_sample[0] / per_call,
        "sample_cpu": t_sample[1] / per_call,
        "compile_s": compile_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacities", nargs="+", type=int, default=[10_000, 1_000_000, 10_000_000])
    parser.add_argument("--kinds", nargs="+", default=["flat", "item", "flat, 8 per call"])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from importlib.metadata import version

    import jax

    rows = []
    for capacity in args.capacities:
        for kind in args.kinds:
            rows.append(bench(kind, capacity, args.iters, args.repeats))
            jax.clear_caches()
    versions = {"jax": jax.__version__, "flashbax": version("flashbax")}
    print(json.dumps({**versions, "backend": jax.default_backend(), "rows": rows}))


if __name__ == "__main__":
    main()
