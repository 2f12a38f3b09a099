"""Throughput of funrl.random: split a key, then draw n float32 uniforms; eager and compiled.

The reference point, measured in the same run, is ``torch.rand(n)`` on torch's global generator
(stateful Philox/MT: what funrl replaces with explicit keys). Each figure is the median over
``--repeats`` timed repeats; every repeat runs the call enough times to last ``--min-time``
seconds. Prints two markdown tables for BENCHMARKS.md: samples per second by ``n``, and the eager
cost of single calls (``split``, ``fold_in``, a small ``uniform``), which an eager training loop
pays many times per update.

    python benchmarks/random_throughput.py --device cpu
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

import funrl.random as R


def split_and_uniform(key: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of a typical loop: derive the next key and a subkey, sample with the subkey."""
    next_key, subkey = R.split(key)
    return next_key, R.uniform(subkey, (n,))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call(fn: Callable[[], object], device: torch.device, repeats: int, min_time: float) -> float:
    """Median seconds per call over ``repeats`` repeats, each lasting at least ``min_time``."""
    for _ in range(3):  # warm-up (allocator, caches, autotuning)
        fn()
    _sync(device)
    calls = 1
    while True:  # find a call count that makes one repeat last min_time
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        if time.perf_counter() - start >= min_time:
            break
        calls *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def machine_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "unknown CPU"


def eager_call_table(key: torch.Tensor, device: torch.device, repeats: int, min_time: float) -> list[str]:
    """Markdown rows: microseconds per eager call of the key functions and a small draw."""
    calls = {
        "split(key)": lambda: R.split(key),
        "fold_in(key, 7)": lambda: R.fold_in(key, 7),
        "uniform(key, (256,))": lambda: R.uniform(key, (256,)),
        "torch.rand(256) (stateful reference)": lambda: torch.rand(256, device=device),
    }
    rows = ["| eager call | µs per call |", "|---|---:|"]
    for name, fn in calls.items():
        rows.append(f"| `{name}` | {time_per_call(fn, device, repeats, min_time) * 1e6:.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated n")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds per repeat")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled column")
    args = parser.parse_args()

    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    key = R.key(0).to(device)

    # One compiled graph for every size (dynamic n), so compile time is paid once.
    compiled = None
    compile_s = float("nan")
    if not args.no_compile:
        compiled = torch.compile(split_and_uniform, dynamic=True)
        start = time.perf_counter()
        compiled(key, sizes[0])
        _sync(device)
        compile_s = time.perf_counter() - start

    rows = []
    for n in sizes:
        eager = time_per_call(lambda n=n: split_and_uniform(key, n), device, args.repeats, args.min_time)
        if compiled is not None:
            # Same numbers as eager (checked here, not just timed).
            assert torch.equal(compiled(key, n)[1], split_and_uniform(key, n)[1])
            comp = time_per_call(lambda n=n: compiled(key, n), device, args.repeats, args.min_time)
        else:
            comp = float("nan")
        ref = time_per_call(lambda n=n: torch.rand(n, device=device), device, args.repeats, args.min_time)
        rows.append((n, n / eager, n / comp, n / ref, ref / comp))

    print(
        f"device: {device} ({machine_name(device)}), torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}, median of {args.repeats} repeats"
    )
    if compiled is not None:
        print(f"compile (first call, dynamic n): {compile_s:.1f} s")
    print()
    print(
        "| n | funrl eager (samples/s) | funrl compiled (samples/s) | torch.rand (samples/s) | compiled / torch.rand |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n, e, c, r, ratio in rows:
        comp_cell = "—" if compiled is None else f"{c / 1e6:.2f} M"
        ratio_cell = "—" if compiled is None else f"{ratio:.2f}"
        print(f"| {n:,} | {e / 1e6:.2f} M | {comp_cell} | {r / 1e6:.2f} M | {ratio_cell} |")
    print()
    print("\n".join(eager_call_table(key, device, args.repeats, args.min_time)))


if __name__ == "__main__":
    main()
