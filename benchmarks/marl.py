"""simple_spread random-policy throughput: funrl (eager, compiled) vs VMAS, JaxMARL and mpe2.

Every row steps N simple_spread environments (3 agents, discrete actions, 25-step episodes) with
a fresh random action per agent per step and resets every environment whose episode ended, and
reports environment steps per second and agent steps per second (3 per env step).

- funrl: ``funrl.envs.marl.vmap(env, N)``; "compiled" runs ``--chunk`` steps per call as one graph
  (``funrl.control.scan`` under ``funrl.control.compile``); the first call (the compile) is
  reported apart and not counted. Every step computes the auto-reset branch-free for all envs.
- VMAS (``vmas.make_env("simple_spread", num_envs=N)``, torch, vectorised): its own MPE port
  (different observation layout and 9 discrete actions); envs end together at 25 steps and are
  reset with one vectorised ``reset()``.
- JaxMARL (``MPE_simple_spread_v3``, jit + vmap + scan) in the Python given by
  ``--jaxmarl-python`` (a venv with jax[cpu] and jaxmarl), single-threaded XLA, as a subprocess.
- mpe2 (``simple_spread_v3.parallel_env``): a Python loop over N envs (N up to
  ``--mpe2-max-envs``).

    python benchmarks/marl.py --device cpu --num-envs 1 64 1024 16384 --jaxmarl-python /tmp/jaxv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from funrl import control, random
from funrl.envs import marl

NUM_AGENTS = 3
MAX_CYCLES = 25


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(run: Callable[[int], None], calls: int, repeats: int, steps_per_call: int, n: int) -> float:
    """Median env steps/s over ``repeats`` timed blocks of ``calls`` calls of ``run``."""
    rates = []
    offset = 1
    for _ in range(repeats):
        t0 = time.perf_counter()
        for c in range(calls):
            run(offset + c)
        rates.append(n * steps_per_call * calls / (time.perf_counter() - t0))
        offset += calls
    return statistics.median(rates)


def time_funrl(
    n: int, compiled: bool, steps: int, chunk: int, repeats: int, device: torch.device
) -> tuple[float, float]:
    torch.compiler.reset()  # one compile per N: the code object is the same for every N
    env, params = marl.make("simple_spread", N=NUM_AGENTS, max_cycles=MAX_CYCLES)
    batched = marl.vmap(env, n)
    num_actions = env.action_spaces(params)["agent"].n
    key = random.key(0).to(device)
    _, state = batched.reset(key, params)

    def run_chunk(key: torch.Tensor, state: marl.MPEState) -> tuple[marl.MPEState, torch.Tensor]:
        def one(carry, t):  # noqa: ANN001, ANN202
            state, total = carry
            k_act, k_env = random.split(random.fold_in(key, t))
            actions = {"agent": random.randint(k_act, (n, NUM_AGENTS), 0, num_actions)}
            _, state, rewards, _, _, _ = batched.step(k_env, state, actions, params)
            return (state, total + rewards["agent"].sum()), t

        (state, total), _ = control.scan(one, (state, torch.zeros((), device=device)), length=chunk)
        return state, total

    step = control.compile(run_chunk, dynamic=False, device=device) if compiled else run_chunk
    carry = {"state": state}

    def run(i: int) -> None:
        carry["state"], total = step(random.fold_in(key, i), carry["state"])
        sync(device)

    t0 = time.perf_counter()
    run(0)  # warm-up (the compile)
    first = time.perf_counter() - t0
    rate = measure(run, max(1, steps // chunk), repeats, chunk, n)
    return rate, first


def time_vmas(n: int, steps: int, repeats: int, device: torch.device) -> float:
    import vmas

    env = vmas.make_env(
        "simple_spread",
        num_envs=n,
        device=device,
        continuous_actions=False,
        seed=0,
        max_steps=MAX_CYCLES,
        n_agents=NUM_AGENTS,
    )
    env.reset()
    generator = torch.Generator(device=device).manual_seed(0)
    num_actions = env.action_space[0].n

    def run(_: int) -> None:
        actions = [
            torch.randint(0, num_actions, (n,), generator=generator, device=device) for _ in env.agents
        ]
        _, _, done, _ = env.step(actions)
        if bool(done.any()):
            env.reset()
        sync(device)

    run(0)
    return measure(run, steps, repeats, 1, n)


def time_mpe2(n: int, steps: int, repeats: int) -> float:
    from mpe2 import simple_spread_v3

    envs = [simple_spread_v3.parallel_env(N=NUM_AGENTS, max_cycles=MAX_CYCLES) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    rng = np.random.default_rng(0)

    def run(_: int) -> None:
        for i, env in enumerate(envs):
            env.step(
                {agent: int(a) for agent, a in zip(env.agents, rng.integers(0, 5, NUM_AGENTS), strict=True)}
            )
            if not env.agents:
                env.reset(seed=i)

    return measure(run, steps, repeats, 1, n)


JAXMARL_SCRIPT = r"""
import json, statistics, sys, time
import jax, jax.numpy as jnp, jaxmarl
num_envs, steps, chunk, repeats = (int(a) for a in sys.argv[1:5])
env = jaxmarl.make("MPE_simple_spread_v3")
results = {}
for n in [int(x) for x in sys.argv[5:]]:
    def run_chunk(key, state):
        def one(carry, t):
            state, total = carry
            k_act, k_env = jax.random.split(jax.random.fold_in(key, t))
            acts = jax.random.randint(k_act, (env.num_agents, n), 0, 5)
            actions = {a: acts[i] for i, a in enumerate(env.agents)}
            _, state, rewards, _, _ = jax.vmap(env.step)(jax.random.split(k_env, n), state, actions)
            return (state, total + sum(r.sum() for r in rewards.values())), t
        (state, total), _ = jax.lax.scan(one, (state, jnp.zeros(())), jnp.arange(chunk))
        return state, total
    run_chunk = jax.jit(run_chunk)
    key = jax.random.PRNGKey(0)
    _, state = jax.vmap(env.reset)(jax.random.split(key, n))
    t0 = time.perf_counter()
    state, total = run_chunk(key, state); total.block_until_ready()
    first = time.perf_counter() - t0
    calls = max(1, steps // chunk)
    rates = []
    for r in range(repeats):
        t0 = time.perf_counter()
        for c in range(calls):
            state, total = run_chunk(jax.random.fold_in(key, 1 + r * calls + c), state)
        total.block_until_ready()
        rates.append(n * chunk * calls / (time.perf_counter() - t0))
    results[n] = {"env_steps_per_s": statistics.median(rates), "first_call_s": first}
print(json.dumps({"jax": jax.__version__, "results": results}))
"""


def time_jaxmarl(python: str, num_envs: list[int], steps: int, chunk: int, repeats: int) -> dict:
    """JaxMARL's simple_spread in ``python``, single-threaded XLA (as funrl runs with one thread)."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    args = [str(a) for a in (0, steps, chunk, repeats, *num_envs)]
    out = subprocess.run(
        [python, "-c", JAXMARL_SCRIPT, *args], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[1, 64, 1024, 16384])
    parser.add_argument("--peers", nargs="+", default=["eager", "compiled", "vmas", "mpe2"])
    parser.add_argument("--compiled-num-envs", nargs="+", type=int, default=None, help="default: all N")
    parser.add_argument("--steps", type=int, default=100, help="env steps per timed block")
    parser.add_argument("--chunk", type=int, default=25, help="steps per call of the scan (funrl, JaxMARL)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mpe2-max-envs", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--jaxmarl-python", default=None, help="a Python with jax + jaxmarl: adds JaxMARL rows"
    )
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"# torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, {platform.processor()}"
    )
    print("| impl | N | env steps/s | agent steps/s | first call (s) |")
    print("|---|---|---|---|---|")
    rows = []

    def report(impl: str, n: int, rate: float, first: float = float("nan")) -> None:
        rows.append({"impl": impl, "num_envs": n, "env_steps_per_s": rate, "first_call_s": first})
        print(f"| {impl} | {n} | {rate:,.0f} | {rate * NUM_AGENTS:,.0f} | {first:.1f} |", flush=True)

    for n in args.num_envs:
        steps = max(args.chunk, min(args.steps, 2_000_000 // n))
        for peer in args.peers:
            if peer == "eager":
                report("funrl eager", n, *time_funrl(n, False, steps, args.chunk, args.repeats, device))
            elif peer == "compiled" and (not args.compiled_num_envs or n in args.compiled_num_envs):
                report("funrl compiled", n, *time_funrl(n, True, steps, args.chunk, args.repeats, device))
            elif peer == "vmas":
                report("VMAS", n, time_vmas(n, steps, args.repeats, device))
            elif peer == "mpe2" and n <= args.mpe2_max_envs and device.type == "cpu":
                report("mpe2 (Python loop)", n, time_mpe2(n, max(1, min(steps, 20_000 // n)), args.repeats))
    if args.jaxmarl_python:
        peer = time_jaxmarl(args.jaxmarl_python, args.num_envs, args.steps, args.chunk, args.repeats)
        for n, row in peer["results"].items():
            report(f"JaxMARL (jax {peer['jax']}, CPU)", int(n), row["env_steps_per_s"], row["first_call_s"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
