"""Forward cost of funrl.nets.apply against plain torch, for one network and for an ensemble.

Rows, each the median over ``--repeats`` timings of ``--calls`` consecutive calls, the rows of a
case timed round-robin (one timing of each in turn) so that drifts in machine load hit all alike:

- policy: CleanRL's PPO ``ActorCritic`` (64-64 tanh, 4 observations of CartPole size) — the
  per-step call in an eager rollout. Peers: the ``nn.Module`` itself, and
  ``torch.func.functional_call`` without funrl's name/shape checks; then ``torch.compile`` of the
  module and of ``funrl.nets.apply``.
- ensemble: 10 ``ContinuousQ`` critics (256-256 relu, HalfCheetah sizes 17 + 6, batch 256). Peers:
  a Python loop over 10 modules, and torch's own recipe ``torch.func.stack_module_state`` +
  ``vmap(functional_call)``; funrl: ``vmap(funrl.nets.apply)`` over ``init_ensemble`` params; then
  compiled.

    python benchmarks/nets_apply.py --device cpu
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch.func import functional_call, stack_module_state, vmap

from funrl import nets, random


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def medians_us(
    fns: list[Callable[[], object]], calls: int, repeats: int, device: torch.device
) -> list[float]:
    """Median time per call of each function, timed round-robin so that load drifts hit all alike."""
    times: list[list[float]] = [[] for _ in fns]
    with torch.no_grad():
        for fn in fns:
            for _ in range(3):  # warm-up (and compilation, for compiled functions)
                fn()
        sync(device)
        for _ in range(repeats):
            for fn, out in zip(fns, times, strict=True):
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                sync(device)
                out.append((time.perf_counter() - start) / calls)
    return [statistics.median(t) * 1e6 for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ensemble", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled rows")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    key = random.key(0).to(device)
    cases: list[tuple[str, str, Callable[[], object]]] = []

    def measure(case: str, what: str, fn: Callable[[], object]) -> None:
        cases.append((case, what, fn))

    # One policy network, the eager rollout's per-step call.
    skeleton = nets.ActorCritic(4, 2)
    params = nets.init(skeleton, key)
    module = nets.ActorCritic(4, 2, device=device)
    module.load_state_dict(params)
    obs = torch.randn(4, 4, device=device)
    measure("policy", "torch: nn.Module forward", lambda: module(obs))
    measure("policy", "torch: functional_call (no checks)", lambda: functional_call(skeleton, params, (obs,)))
    measure("policy", "funrl: nets.apply", lambda: nets.apply(skeleton, params, obs))
    if not args.no_compile:
        compiled_module = torch.compile(module, fullgraph=True)
        compiled_apply = torch.compile(lambda p, x: nets.apply(skeleton, p, x), fullgraph=True)
        measure("policy", "torch: torch.compile(module)", lambda: compiled_module(obs))
        measure("policy", "funrl: torch.compile(nets.apply)", lambda: compiled_apply(params, obs))

    # An ensemble of critics, SAC/REDQ-style.
    n = args.ensemble
    critic = nets.ContinuousQ(17, 6)
    ensemble = nets.init_ensemble(critic, key, n)
    members = []
    for i in range(n):
        member = nets.ContinuousQ(17, 6, device=device)
        member.load_state_dict({k: v[i] for k, v in ensemble.items()})
        members.append(member)
    stacked, _ = stack_module_state(members)
    base = copy.deepcopy(members[0]).to("meta")
    q_obs, q_act = torch.randn(256, 17, device=device), torch.randn(256, 6, device=device)

    def torch_vmap(p, o, a):
        return vmap(lambda q: functional_call(base, q, (o, a)))(p)

    def funrl_vmap(p, o, a):
        return vmap(nets.apply, in_dims=(None, 0, None, None))(critic, p, o, a)

    measure("ensemble", f"torch: Python loop over {n} modules", lambda: [m(q_obs, q_act) for m in members])
    measure(
        "ensemble",
        "torch: stack_module_state + vmap(functional_call)",
        lambda: torch_vmap(stacked, q_obs, q_act),
    )
    measure(
        "ensemble",
        "funrl: vmap(nets.apply) on init_ensemble params",
        lambda: funrl_vmap(ensemble, q_obs, q_act),
    )
    if not args.no_compile:
        compiled_torch = torch.compile(torch_vmap, fullgraph=True)
        compiled_funrl = torch.compile(funrl_vmap, fullgraph=True)
        measure(
            "ensemble",
            "torch: torch.compile(vmap(functional_call))",
            lambda: compiled_torch(stacked, q_obs, q_act),
        )
        measure(
            "ensemble",
            "funrl: torch.compile(vmap(nets.apply))",
            lambda: compiled_funrl(ensemble, q_obs, q_act),
        )

    rows = []
    for case in dict.fromkeys(c for c, _, _ in cases):
        group = [(what, fn) for c, what, fn in cases if c == case]
        medians = medians_us([fn for _, fn in group], args.calls, args.repeats, device)
        rows += [(case, what, us) for (what, _), us in zip(group, medians, strict=True)]
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, device {device}, "
        f"threads {torch.get_num_threads()}, load average at the end {os.getloadavg()[0]:.1f}"
    )
    print("| case | implementation | µs per call (median) |")
    print("|---|---|---|")
    for case, what, us in rows:
        print(f"| {case} | {what} | {us:.1f} |")


if __name__ == "__main__":
    main()
