"""Losses and value estimators: funrl against TorchRL, measured in the same run.

GAE section (``--section gae``): ``funrl.losses.gae`` (a reverse ``funrl.control.scan``) eager
and compiled with ``funrl.control.compile`` (what funrl's agents use, with γ and λ as tensors),
against TorchRL's ``generalized_advantage_estimate`` (a reverse Python loop) and
``vec_generalized_advantage_estimate`` (a discount-filter product), at T=128 x N=4096 and
T=1024 x N=64. A "memory floor" row times ``torch.clone`` of as many bytes as ``gae`` reads and
writes (a lower bound for any implementation that touches its inputs and outputs once).

Each figure is the median of ``--repeats`` timings, each the mean over enough calls to last
~50 ms; compile time is the wall time of the first call of the compiled function. On a shared,
oversubscribed CPU use ``--clock cpu --threads 1`` (thread CPU time: waiting for a core is not
counted, so the ratios stay meaningful when other jobs run). Inputs are float32 with ~1%
terminations and ~1% truncations; TorchRL gets its native layout (``[N, T, 1]``, time at -2),
funrl its own (``[T, N]``); layout conversion is not timed.

Before timing, the process allocates and frees one 16 MB buffer. glibc then serves the
few-MB output tensors of every variant from its heap instead of fresh ``mmap`` pages, whose first
touch is slow: without the warm-up whichever variant happens to run first pays for its outputs'
pages on top of its compute. Compile seconds are measured after
one throw-away compile (inductor's one-time start-up is not charged to the first variant); run
with an empty ``TORCHINDUCTOR_CACHE_DIR`` to get cold compile times.

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python benchmarks/losses.py --device cpu --section gae
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python benchmarks/losses.py --device cpu --threads 1 --clock cpu --section gae
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from funrl.control import compile as funrl_compile
from funrl.losses import gae

SHAPES = ((128, 4096), (1024, 64))
GAMMA, LMBDA = 0.99, 0.95


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ``wall``: perf_counter. ``cpu``: CPU seconds of the calling thread, for an oversubscribed CPU
# machine (with ``--threads 1`` all of torch's work runs on that thread, and time spent waiting
# for a core is not counted).
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


def time_call(
    fn: Callable[[], object], device: torch.device, repeats: int, min_seconds: float = 0.05
) -> float:
    """Median over ``repeats`` of the mean seconds per call (each repeat lasts >= ``min_seconds``)."""
    fn()
    _sync(device)
    start = clock()
    fn()
    _sync(device)
    single = max(clock() - start, 1e-7)
    calls = max(1, int(min_seconds / single))
    samples = []
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            fn()
        _sync(device)
        samples.append((clock() - start) / calls)
    return statistics.median(samples)


def compile_seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of the first call (compilation runs partly in worker processes)."""
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def gae_inputs(length: int, envs: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shape = (length, envs)
    terminated = torch.rand(shape, generator=g) < 0.01
    truncated = (torch.rand(shape, generator=g) < 0.01) & ~terminated
    data = {
        "rewards": torch.randn(shape, generator=g),
        "values": torch.randn(shape, generator=g),
        "next_values": torch.randn(shape, generator=g),
        "terminated": terminated,
        "truncated": truncated,
    }
    return {k: v.to(device) for k, v in data.items()}


def memory_floor(data: dict[str, torch.Tensor], outputs: int) -> Callable[[], torch.Tensor]:
    """``torch.clone`` of half the bytes ``gae`` moves: it reads and writes that many, so it moves
    ``inputs + outputs`` bytes in all, at this machine's copy bandwidth."""
    moved = sum(x.numel() * x.element_size() for x in data.values())
    moved += outputs * data["rewards"].numel() * data["rewards"].element_size()
    source = torch.empty(moved // 2, dtype=torch.uint8, device=data["rewards"].device)
    return source.clone


def _gae_rows(length: int, envs: int, device: torch.device, repeats: int) -> list[tuple[str, ...]]:
    from torchrl.objectives.value.functional import (
        generalized_advantage_estimate,
        vec_generalized_advantage_estimate,
    )

    shape = f"T={length}, N={envs}"
    d = gae_inputs(length, envs, device)
    args = (d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], GAMMA, LMBDA)
    expected = gae(*args)[0]

    def layout(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).unsqueeze(-1).contiguous()

    trl_args = (layout(d["values"]), layout(d["next_values"]), layout(d["rewards"]))
    trl_kwargs = {"done": layout(d["terminated"] | d["truncated"]), "terminated": layout(d["terminated"])}

    def torchrl_loop() -> tuple[torch.Tensor, torch.Tensor]:
        return generalized_advantage_estimate(GAMMA, LMBDA, *trl_args, **trl_kwargs)

    def torchrl_vec() -> tuple[torch.Tensor, torch.Tensor]:
        return vec_generalized_advantage_estimate(GAMMA, LMBDA, *trl_args, **trl_kwargs)

    for fn in (torchrl_loop, torchrl_vec):  # same numbers before timing anything
        torch.testing.assert_close(fn()[0].squeeze(-1).transpose(0, 1), expected, rtol=1e-4, atol=1e-4)

    compiled = funrl_compile(gae)
    rates = (torch.tensor(GAMMA, device=device), torch.tensor(LMBDA, device=device))
    seconds = compile_seconds(lambda: compiled(*args[:5], *rates), device)
    for got, want in zip(compiled(*args[:5], *rates), gae(*args), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    rows = {
        "funrl gae, compiled": (
            time_call(lambda: compiled(*args[:5], *rates), device, repeats),
            f"{seconds:.1f}",
        ),
        "funrl gae, eager": (time_call(lambda: gae(*args), device, repeats), "-"),
    }
    rows["TorchRL generalized_advantage_estimate"] = (time_call(torchrl_loop, device, repeats), "-")
    rows["TorchRL vec_generalized_advantage_estimate"] = (time_call(torchrl_vec, device, repeats), "-")
    rows["memory floor: torch.clone of the bytes gae reads + writes"] = (
        time_call(memory_floor(d, outputs=2), device, repeats),
        "-",
    )
    peer = min(
        rows["TorchRL generalized_advantage_estimate"][0],
        rows["TorchRL vec_generalized_advantage_estimate"][0],
    )
    return [
        (shape, name, f"{sec * 1e3:.3f}", comp, f"{peer / sec:.1f}x") for name, (sec, comp) in rows.items()
    ]


def warm_up(device: torch.device) -> None:
    """Put glibc's allocator and inductor in the state a long-running process has (module doc)."""
    torch.empty(16 << 20, dtype=torch.uint8).fill_(0)
    x = torch.ones(8, device=device)
    funrl_compile(lambda x: x * 2 + 1)(x)


def bench_gae(device: torch.device, repeats: int) -> list[tuple[str, ...]]:
    warm_up(device)
    rows = []
    for length, envs in SHAPES:
        rows += _gae_rows(length, envs, device, repeats)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--section", choices=["gae"], default="gae")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: thread CPU time")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.clock == "cpu" and (device.type != "cpu" or args.threads != 1):
        parser.error("--clock cpu needs --device cpu --threads 1 (it reads the calling thread's CPU time)")
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, device {device}, clock {args.clock}"
    )
    if args.section == "gae":
        rows = bench_gae(device, args.repeats)
        print("| shape | variant | ms per call (median) | compile s | speed-up vs faster TorchRL |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
