"""Random-policy environment steps per second: funrl (eager, compiled) vs gymnasium's numpy vector env.

Every funrl step here is honest: a fresh random action for every env, auto-reset with freshly
drawn reset noise wherever an episode ends (computed branch-free for all envs, as compiled code
does). "compiled" runs ``--chunk`` steps per call as ONE graph (``funrl.control.scan`` under
``torch.compile(fullgraph=True)``, one compile per N: ``dynamic=True`` makes the params' floats
symbolic, which the scan op refuses); the first call (compile) is reported separately, not counted
in steps/s. ``--compiled-num-envs`` limits the N that are compiled (each compile takes minutes on a
loaded 2-core CPU). gymnasium runs ``make_vec(..., "vector_entry_point")``
with ``action_space.sample()`` (CartPole only: it is the classic-control env with a vector entry
point).

    python benchmarks/env_throughput.py --device cpu --num-envs 1 256 4096 65536 --steps 200

With ``--gymnax-python PATH`` (a Python with jax and gymnax, see ``gymnax_cartpole.py``) the same
run also measures gymnax's CartPole, the JAX peer, in a subprocess after funrl's CartPole rows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import time

import torch

import funrl.envs as E
from funrl import control, random


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def random_actions(space: E.Space, key: torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    if isinstance(space, E.Discrete):
        return random.randint(key, (n,), 0, space.n)
    return random.uniform(
        key, (n, *space.shape), space.dtype, space.low_tensor(device), space.high_tensor(device)
    )


def make_chunk(
    batched: E.BatchedEnv, params, space: E.Space, n: int, chunk: int, device: torch.device, unroll: int = 1
):
    """``chunk`` random-policy steps; returns the carried (obs, state) and the summed reward."""

    def run(key, obs, state):
        def one(carry, t):
            obs, state, total = carry
            k = random.fold_in(key, t)
            k_act, k_env = random.split(k)
            action = random_actions(space, k_act, n, device)
            obs, state, reward, _, _, _ = batched.step(k_env, state, action, params)
            return (obs, state, total + reward.sum()), t

        (obs, state, total), _ = control.scan(
            one, (obs, state, torch.zeros((), device=device)), length=chunk, unroll=unroll
        )
        return obs, state, total

    return run


def time_funrl(
    env_id: str,
    n: int,
    mode: str,
    steps: int,
    chunk: int,
    repeats: int,
    device,
    unroll: int = 1,
    options: dict | None = None,
):
    # Every (env, N) compiles the same code object anew; without a reset dynamo's recompile limit
    # (8 per code object) ends the run at the ninth configuration.
    torch.compiler.reset()
    env, params = E.make(env_id)
    batched = E.vmap(env, n)
    space = env.action_space(params)
    key = random.key(0).to(device)
    obs, state = batched.reset(key, params)
    if mode == "eager":
        run = make_chunk(batched, params, space, n, chunk, device)
    else:
        run = control.compile(
            make_chunk(batched, params, space, n, chunk, device, unroll), dynamic=False, options=options
        )
    t0 = time.perf_counter()
    obs, state, total = run(random.fold_in(key, 1), obs, state)  # warm-up (compiles)
    sync(device)
    warmup = time.perf_counter() - t0
    calls = max(1, steps // chunk)
    rates = []
    for r in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        for c in range(calls):
            obs, state, total = run(random.fold_in(key, 2 + r * calls + c), obs, state)
        sync(device)
        rates.append(n * chunk * calls / (time.perf_counter() - t0))
    assert torch.isfinite(total)
    return statistics.median(rates), warmup


def time_gymnasium(n: int, steps: int, repeats: int) -> float:
    import gymnasium

    envs = gymnasium.make_vec("CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(10):
        envs.step(envs.action_space.sample())
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            envs.step(envs.action_space.sample())
        rates.append(n * steps / (time.perf_counter() - t0))
    envs.close()
    return statistics.median(rates)


def time_gymnax(python: str, num_envs: list[int], steps: int, chunk: int, repeats: int) -> dict:
    """gymnax's CartPole in ``python`` (single-threaded XLA, as funrl runs with ``--threads 1``)."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gymnax_cartpole.py")
    cmd = [python, script, "--steps", str(steps), "--chunk", str(chunk), "--repeats", str(repeats)]
    out = subprocess.run(
        [*cmd, "--num-envs", *map(str, num_envs)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[1, 256, 4096, 65536])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled", "gymnasium"])
    parser.add_argument("--compiled-num-envs", nargs="+", type=int, default=None, help="default: all N")
    parser.add_argument("--steps", type=int, default=200, help="env steps per repeat (per env)")
    parser.add_argument("--chunk", type=int, default=50, help="steps per call (one scan)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cpp-wrapper",
        action="store_true",
        help="compiled: also rows with inductor's C++ wrapper (no Python between the loop's kernels)",
    )
    parser.add_argument(
        "--unroll", nargs="+", type=int, default=[1], help="compiled: steps per scan iteration (one row each)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--gymnax-python", default=None, help="a Python with jax + gymnax: adds gymnax rows")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"# torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, {platform.processor()}"
    )
    print("| env | N | mode | steps/s | first call (s) |")
    print("|---|---|---|---|---|")
    for env_id in args.envs:
        if env_id not in E.registry():
            print(f"| {env_id} | - | - | not registered | |")
            continue
        for n in args.num_envs:
            for mode in args.modes:
                if mode == "gymnasium":
                    if env_id != "CartPole-v1" or device.type != "cpu":
                        continue
                    rate, first = time_gymnasium(n, args.steps, args.repeats), float("nan")
                    print(f"| {env_id} | {n} | {mode} | {rate / 1e6:.4f} M | {first:.1f} |", flush=True)
                elif mode == "eager":
                    rate, first = time_funrl(env_id, n, mode, args.steps, args.chunk, args.repeats, device)
                    print(f"| {env_id} | {n} | {mode} | {rate / 1e6:.4f} M | {first:.1f} |", flush=True)
                elif not args.compiled_num_envs or n in args.compiled_num_envs:
                    wrappers = [False, True] if args.cpp_wrapper else [False]
                    for unroll, cpp_wrapper in itertools.product(args.unroll, wrappers):
                        options = {"cpp_wrapper": True} if cpp_wrapper else None
                        rate, first = time_funrl(
                            env_id, n, mode, args.steps, args.chunk, args.repeats, device, unroll, options
                        )
                        label = mode + (f", unroll {unroll}" if unroll > 1 else "")
                        label += ", cpp_wrapper" if cpp_wrapper else ""
                        print(f"| {env_id} | {n} | {label} | {rate / 1e6:.4f} M | {first:.1f} |", flush=True)
        if env_id == "CartPole-v1" and args.gymnax_python:
            peer = time_gymnax(args.gymnax_python, args.num_envs, args.steps, args.chunk, args.repeats)
            for n, row in peer["results"].items():
                rate, first = row["steps_per_s"], row["first_call_s"]
                print(
                    f"| {env_id} | {n} | gymnax (jax {peer['jax']}) | {rate / 1e6:.4f} M | {first:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
