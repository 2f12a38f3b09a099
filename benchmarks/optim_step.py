"""Adam step time: funrl.optim.adam (functional) vs torch.optim.Adam on a ~1M-parameter MLP
(``--sizes`` picks another MLP, e.g. an RL-sized 4,64,64,2).

Times one optimiser step from fixed gradients (no forward/backward), eager and compiled:

- funrl, eager: ``update`` + ``apply_updates``, plain torch ops leaf by leaf (the one code path
  that eager, vmap and compile share); returns new params and state (out of place);
- torch.optim.Adam eager: ``foreach=False`` (the per-tensor loop), ``foreach=True`` and
  ``fused=True``; all update in place;
- compiled: ``torch.compile`` of the functional step, and of ``torch.optim.Adam.step`` (torch's
  recommended way to compile an optimiser; the float learning rate is constant here, so it
  compiles once).

Each figure is the median over ``--repeats`` timings of ``--steps`` consecutive steps.

    python benchmarks/optim_step.py --device cpu
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from funrl import optim, tree

LR = 1e-3


def make_params(sizes: list[int], device: torch.device) -> dict[str, torch.Tensor]:
    """A tanh MLP with layer widths ``sizes``; the default 64-1024-768-256-8 has 1,052,680 params."""
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.Tanh()]
    torch.manual_seed(0)
    module = torch.nn.Sequential(*layers[:-1])
    return {k: v.detach().to(device) for k, v in module.named_parameters()}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_round_robin(
    runs: dict[str, Callable[[], None]], device: torch.device, steps: int, repeats: int
) -> dict[str, float]:
    """Median seconds per step of each run over ``repeats`` timings of ``steps`` steps.

    Repeats go round-robin over the variants, so load from other processes on a shared machine
    falls on all of them alike.
    """
    per_step: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats + 1):  # repeat 0 warms up
        for name, run in runs.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                run()
            sync(device)
            if repeat:
                per_step[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(times) for name, times in per_step.items()}


def functional_runner(params, grads, compiled: bool) -> tuple[Callable[[], None], float]:
    opt = optim.adam(LR)

    def step(p, s, g):
        updates, s = opt.update(g, s, p)
        return optim.apply_updates(p, updates), s

    if compiled:
        step = torch.compile(step, fullgraph=True)
    carry = [params, opt.init(params)]
    start = time.perf_counter()
    carry[:] = step(carry[0], carry[1], grads)  # first call: compilation when compiled
    first_call = time.perf_counter() - start

    def run() -> None:
        carry[:] = step(carry[0], carry[1], grads)

    return run, first_call


def torch_runner(params, grads, compiled: bool, **adam_kwargs) -> tuple[Callable[[], None], float]:
    torch_params = [torch.nn.Parameter(p.clone()) for p in params.values()]
    for p, g in zip(torch_params, grads.values(), strict=True):
        p.grad = g.clone()
    opt = torch.optim.Adam(torch_params, lr=LR, **adam_kwargs)
    step = torch.compile(opt.step) if compiled else opt.step
    start = time.perf_counter()
    step()
    first_call = time.perf_counter() - start
    return step, first_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--steps", type=int, default=50, help="steps per timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings per figure (median reported)")
    parser.add_argument("--sizes", default="64,1024,768,256,8", help="MLP layer widths, comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled variants")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    sizes = [int(width) for width in args.sizes.split(",")]
    params = make_params(sizes, device)
    gen = torch.Generator().manual_seed(1)
    grads = {k: torch.randn(v.shape, generator=gen).to(device) for k, v in params.items()}
    n_params = tree.num_elements(params)

    variants: list[tuple[str, Callable[[], tuple[Callable[[], None], float]]]] = [
        ("funrl adam, eager", lambda: functional_runner(params, grads, False)),
        ("torch.optim.Adam, foreach=False", lambda: torch_runner(params, grads, False, foreach=False)),
        ("torch.optim.Adam, foreach=True", lambda: torch_runner(params, grads, False, foreach=True)),
        ("torch.optim.Adam, fused=True", lambda: torch_runner(params, grads, False, fused=True)),
    ]
    if not args.no_compile:
        variants += [
            ("funrl adam, torch.compile", lambda: functional_runner(params, grads, True)),
            (
                "torch.optim.Adam, torch.compile(step)",
                lambda: torch_runner(params, grads, True, foreach=True),
            ),
        ]

    print(
        f"Adam step, MLP {'-'.join(map(str, sizes))} ({n_params:,} params, float32), device {device}, "
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"threads {torch.get_num_threads()}; median of {args.repeats} x {args.steps} steps"
    )
    print()
    runs, first_calls = {}, {}
    for name, build in variants:
        runs[name], first_calls[name] = build()
    medians = time_round_robin(runs, device, args.steps, args.repeats)
    print("| variant | step time (ms) | first call (s) |")
    print("|---|---|---|")
    for name, per_step in medians.items():
        print(f"| {name} | {per_step * 1e3:.3f} | {first_calls[name]:.2f} |")


if __name__ == "__main__":
    main()
