"""Losses and value estimators: funrl against TorchRL, measured in the same run.

GAE section (``--section gae``): ``funrl.losses.gae`` eager and compiled with
``funrl.control.compile`` (what funrl's agents and docs use), against TorchRL's
``generalized_advantage_estimate`` (a reverse Python loop) and ``vec_generalized_advantage_estimate``
(a discount-filter product), at T=128 x N=4096 and T=1024 x N=64. A "memory floor" row times
``torch.clone`` of as many bytes as ``gae`` reads and writes (a lower bound for any
implementation that touches its inputs and outputs once). Two ablation rows show what funrl's
formulation buys: the previous one (TD errors and trace multipliers written to memory before the
chunked scan) and the current one with the bool flags read by the compiled kernels directly. The
formulation rows time the recurrence alone (``x_t = a_t + b_t x_{t+1}``): funrl's chunked scan,
a one-level Hillis-Steele scan, a reverse Python loop, and a reverse loop through
``funrl.control.scan`` compiled.

Each figure is the median of ``--repeats`` timings, each the mean over enough calls to last
~50 ms; compile time is the wall time of the first call of the compiled function. On a shared,
oversubscribed CPU use ``--clock cpu --threads 1`` (thread CPU time: waiting for a core is not
counted, so the ratios stay meaningful when other jobs run). Inputs are float32 with ~1%
terminations and ~1% truncations; TorchRL gets its native layout (``[N, T, 1]``, time at -2),
funrl its own (``[T, N]``); layout conversion is not timed.

Before timing, the process allocates and frees one 16 MB buffer. glibc then serves the
few-MB output tensors of every variant from its heap instead of fresh ``mmap`` pages: on this VM
a first touch costs ~1 µs per 4 KB page, and without the warm-up whichever variant happens to
run first pays ~0.5 ms per 2 MB output on top of its compute. Compile seconds are measured after
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
from functools import partial

import torch

from funrl.control import compile as funrl_compile
from funrl.control import scan
from funrl.losses import gae, returns
from funrl.losses.returns import DEFAULT_BLOCK, reverse_linear_recurrence, reverse_linear_recurrence_loop

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


def hillis_steele_recurrence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The recurrence as a one-level log-depth scan: ``ceil(log2 T)`` whole-tensor rounds."""
    length, offset = a.shape[0], 1
    while offset < length:
        head_a, head_b = a[:-offset], b[:-offset]
        a = torch.cat([torch.addcmul(head_a, head_b, a[offset:]), a[-offset:]])
        b = torch.cat([head_b * b[offset:], b[-offset:]])
        offset *= 2
    return a


def scan_recurrence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The recurrence as a reverse ``funrl.control.scan`` (a higher-order op under compile)."""

    def step(carry: torch.Tensor, ab: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x = ab[0] + ab[1] * carry
        return x, x

    _, xs = scan(step, torch.zeros_like(a[0]), (a, b), reverse=True)
    return xs


def bool_flag_gae_coefficients(gamma: float, lmbda: float, dtype: torch.dtype) -> returns.Coefficients:
    """GAE's ``(a_t, b_t)`` = (TD error, trace multiplier) from bool flags, shared by both ablations."""

    def coefficients(rewards, values, next_values, terminated, truncated):
        deltas = rewards + gamma * (~terminated).to(dtype) * next_values - values
        return deltas, gamma * lmbda * (~(terminated | truncated)).to(dtype)

    return coefficients


def gae_materialised(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ablation: funrl's previous GAE formulation, TD errors and trace multipliers written out as
    whole tensors (from the bool flags) and then handed to the chunked scan."""
    coefficients = bool_flag_gae_coefficients(gamma, lmbda, rewards.dtype)
    deltas, trace = coefficients(rewards, values, next_values, terminated, truncated)
    advantages = reverse_linear_recurrence(deltas, trace)
    return advantages, advantages + values


def gae_bool_flags(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ablation: ``funrl.losses.gae``'s fused chunked scan with the bool flags read by the
    compiled kernels directly (no ``uint8`` copy)."""

    def readout(advantages, rewards, values, *_):
        return advantages + values

    advantages, returns_ = returns._solve(
        bool_flag_gae_coefficients(gamma, lmbda, rewards.dtype),
        (rewards, values, next_values, terminated, truncated),
        readout,
    )
    return advantages, returns_


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

    rows = {}
    for name, fn in (
        ("funrl gae, compiled", gae),
        (
            "ablation: TD errors and trace written out before the scan (previous gae), compiled",
            gae_materialised,
        ),
        ("ablation: bool flags read in the kernels, compiled", gae_bool_flags),
    ):
        compiled = funrl_compile(fn)
        seconds = compile_seconds(lambda compiled=compiled: compiled(*args), device)
        for got, want in zip(compiled(*args), gae(*args), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        rows[name] = (time_call(lambda compiled=compiled: compiled(*args), device, repeats), f"{seconds:.1f}")
        if fn is gae:
            rows["funrl gae, eager"] = (time_call(lambda: gae(*args), device, repeats), "-")
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


def _formulation_rows(length: int, envs: int, device: torch.device, repeats: int) -> list[tuple[str, ...]]:
    shape = f"T={length}, N={envs}"
    d = gae_inputs(length, envs, device)
    a = d["rewards"] - d["values"]
    b = GAMMA * LMBDA * (~(d["terminated"] | d["truncated"])).float()
    ref = reverse_linear_recurrence_loop(a, b)
    variants: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        f"recurrence: chunked scan, blocks of {DEFAULT_BLOCK} (funrl)": reverse_linear_recurrence,
        "recurrence: one-level Hillis-Steele scan": hillis_steele_recurrence,
        "recurrence: funrl.control.scan reverse loop": scan_recurrence,
    }
    rows = []
    for name, fn in variants.items():
        compiled = funrl_compile(fn)
        seconds = compile_seconds(partial(compiled, a, b), device)
        torch.testing.assert_close(compiled(a, b), ref, rtol=1e-4, atol=1e-4)
        sec = time_call(partial(compiled, a, b), device, repeats)
        rows.append((shape, name + ", compiled", f"{sec * 1e3:.3f}", f"{seconds:.1f}", "-"))
        if "scan reverse loop" not in name:  # eagerly that is the Python loop below
            sec = time_call(partial(fn, a, b), device, repeats)
            rows.append((shape, name + ", eager", f"{sec * 1e3:.3f}", "-", "-"))
    sec = time_call(partial(reverse_linear_recurrence_loop, a, b), device, repeats)
    rows.append((shape, "recurrence: reverse Python loop, eager", f"{sec * 1e3:.3f}", "-", "-"))
    return rows


def warm_up(device: torch.device) -> None:
    """Put glibc's allocator and inductor in the state a long-running process has (module doc)."""
    torch.empty(16 << 20, dtype=torch.uint8).fill_(0)
    x = torch.ones(8, device=device)
    funrl_compile(lambda x: x * 2 + 1)(x)


def bench_gae(device: torch.device, repeats: int, formulations: bool) -> list[tuple[str, ...]]:
    warm_up(device)
    rows = []
    for length, envs in SHAPES:
        rows += _gae_rows(length, envs, device, repeats)
        if formulations:
            rows += _formulation_rows(length, envs, device, repeats)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--section", choices=["gae"], default="gae")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="cpu: thread CPU time")
    parser.add_argument("--no-formulations", action="store_true", help="skip the recurrence-only rows")
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
        rows = bench_gae(device, args.repeats, not args.no_formulations)
        print("| shape | variant | ms per call (median) | compile s | speed-up vs faster TorchRL |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
