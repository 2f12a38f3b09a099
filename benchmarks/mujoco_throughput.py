"""MuJoCo env steps per second: funrl (eager, compiled) against gymnasium's vector envs and EnvPool.

For each env and each N, every contestant steps N copies of the env with uniform random actions
(funrl draws them on ``--device`` with its keys; the peers with numpy), auto-resetting finished
episodes, in the same process and run:

- ``funrl eager`` / ``funrl compiled``: ``funrl.envs.vmap(env, N)`` stepped by ``funrl.envs.rollout``
  as agents step it -- one call of the batched physics op per step, every step's random values
  (actions, resets) drawn before the loop -- with the op's thread pool at 1 and at 2 threads
  (``funrl.envs.mujoco.set_num_threads``). Each call is a ``--chunk``-step rollout; "compiled"
  runs it as one graph (the rollout's scan under ``funrl.control.compile``); its compile is the
  first call and is not timed. The compiled graph does not depend on the thread count, so each (env, N) compiles once.
- ``gymnasium sync``: ``gymnasium.make_vec(env_id, N, vectorization_mode="sync")``, one process.
- ``gymnasium async``: ``vectorization_mode="async"``, one worker process per env (N up to
  ``--async-max-num-envs``: each worker is a Python process importing gymnasium and MuJoCo).
- ``envpool``: ``envpool.make(env_id, env_type="gymnasium", num_envs=N, num_threads=T)``, its C++
  thread pool at T = 1 and 2. EnvPool links its own MuJoCo build (printed on the machine line);
  skipped with the reason when ``import envpool`` fails.

Each rate is the median of ``--repeats`` timed runs of ``--steps`` steps after a warm-up.

"outside mj_step" is the share of a funrl step spent anywhere but in MuJoCo's ``mj_step``:
``mujoco.mj_step`` is wrapped by a timer for one extra run of each funrl row at 1 thread (the op
calls it through the module attribute, compiled or not), and the share is
``1 - time in mj_step / wall time`` of that run. It counts the op's state copies, the warm start,
``mj_rnePostConstraint``, rewards, observations, auto-reset and random actions: everything that is
not the physics itself.

    python benchmarks/mujoco_throughput.py --device cpu            # the full table (takes a while)
    python benchmarks/mujoco_throughput.py --device cpu --quick    # fewer N and steps, compiled at N=64 only
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import traceback
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np
import torch

import funrl.envs as E
from funrl import control, random
from funrl.envs import mujoco as funrl_mujoco

ENVS = ("HalfCheetah-v5", "Hopper-v5", "Ant-v5", "Humanoid-v5")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def machine_line(device: torch.device) -> str:
    cpu = "unknown CPU"
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next(
            line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")
        )
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    import gymnasium

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"# {cpu}, {cores} usable cores, torch {torch.__version__} ({torch.get_num_threads()} torch threads), "
        f"device {device}, mujoco {mujoco.__version__}, gymnasium {gymnasium.__version__}, {envpool_version()}"
    )


def envpool_version() -> str:
    try:
        import envpool
    except ImportError as err:
        return f"envpool not importable ({err})"
    return f"envpool {envpool.__version__} (its own MuJoCo build, statically linked)"


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:160]


class MjStepTimer:
    """Wraps ``mujoco.mj_step`` while active and sums the seconds spent inside it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = mujoco.mj_step

    def _timed(self, *args: Any) -> None:
        start = time.perf_counter()
        self._original(*args)
        self.seconds += time.perf_counter() - start

    def __enter__(self) -> MjStepTimer:
        mujoco.mj_step = self._timed
        return self

    def __exit__(self, *exc: object) -> None:
        mujoco.mj_step = self._original


def make_chunk(batched: E.BatchedEnv, params: Any, space: E.Box, n: int, chunk: int) -> Callable:
    """``chunk`` random-action steps of the batched env through ``funrl.envs.rollout``, as agents
    step it (every step's draws made before the loop): ``(key, obs, state) -> (obs, state, total)``."""

    def run(key: torch.Tensor, obs: torch.Tensor, state: Any):
        device = obs.device
        low, high = space.low_tensor(device), space.high_tensor(device)

        def draw_action(k: torch.Tensor) -> torch.Tensor:
            return random.uniform(k, (n, *space.shape), space.dtype, low, high)

        def policy(action: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, dict]:
            return action, {}

        after, trajectory = E.rollout(batched, params, policy, key, (obs, state), chunk, draw_action)
        return after.obs, after.env_state, trajectory.reward.sum()

    return run


def time_funrl(
    env_id: str, n: int, compiled: bool, threads: list[int], args: argparse.Namespace, device: torch.device
) -> tuple[dict[int, float], float, float]:
    """Steps/s per thread count, the first call's seconds, and the share outside ``mj_step``."""
    env, params = E.make(env_id)
    batched = E.vmap(env, n)
    run = make_chunk(batched, params, env.action_space(params), n, args.chunk)
    if compiled:
        run = control.compile(run, dynamic=False, device=device)
    key = random.key(0).to(device)
    obs, state = batched.reset(key, params)
    calls = max(1, args.steps // args.chunk)
    counter = iter(range(1, 1_000_000))

    def timed_run() -> float:
        nonlocal obs, state
        sync(device)
        start = time.perf_counter()
        for _ in range(calls):
            obs, state, total = run(random.fold_in(key, next(counter)), obs, state)
        sync(device)
        assert torch.isfinite(total), f"{env_id}: non-finite rewards"
        return time.perf_counter() - start

    start = time.perf_counter()
    obs, state, _ = run(random.fold_in(key, 0), obs, state)  # compiles when compiled
    first_call = time.perf_counter() - start
    rates = {}
    for num_threads in threads:
        funrl_mujoco.set_num_threads(num_threads)
        timed_run()  # warm-up (and the new thread pool)
        rates[num_threads] = statistics.median(
            n * args.chunk * calls / timed_run() for _ in range(args.repeats)
        )
    funrl_mujoco.set_num_threads(1)
    with MjStepTimer() as timer:
        wall = timed_run()
    return rates, first_call, 1.0 - timer.seconds / wall


def time_steps(step: Callable[[], Any], n: int, steps: int, repeats: int) -> float:
    for _ in range(5):
        step()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(n * steps / (time.perf_counter() - start))
    return statistics.median(rates)


def time_gymnasium(env_id: str, n: int, mode: str, args: argparse.Namespace) -> float:
    import gymnasium

    envs = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    try:
        return time_steps(lambda: envs.step(envs.action_space.sample()), n, args.steps, args.repeats)
    finally:
        envs.close()


def time_envpool(env_id: str, n: int, num_threads: int, args: argparse.Namespace) -> float:
    import envpool

    envs = envpool.make(
        env_id, env_type="gymnasium", num_envs=n, batch_size=n, num_threads=num_threads, seed=0
    )
    envs.reset()
    space = envs.action_space
    rng = np.random.default_rng(0)
    try:
        return time_steps(
            lambda: envs.step(rng.uniform(space.low, space.high, (n, *space.shape))),
            n,
            args.steps,
            args.repeats,
        )
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="N 1, 16, 64; fewer steps and repeats; compiled at N=64 only; async up to N=16",
    )
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--num-envs", nargs="+", type=int, default=None, help="default 1 16 64 256")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["eager", "compiled", "sync", "async", "envpool"],
        choices=["eager", "compiled", "sync", "async", "envpool"],
    )
    parser.add_argument("--compiled-num-envs", nargs="+", type=int, default=None, help="default: every N")
    parser.add_argument(
        "--async-max-num-envs",
        type=int,
        default=None,
        help="async above this N is skipped: one process per env (default 64, quick 16)",
    )
    parser.add_argument("--steps", type=int, default=None, help="steps per timed run (default 200, quick 40)")
    parser.add_argument("--chunk", type=int, default=None, help="steps per funrl call (default 50, quick 20)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per row (default 5, quick 3)")
    args = parser.parse_args()
    if args.num_envs is None:
        args.num_envs = [1, 16, 64] if args.quick else [1, 16, 64, 256]
    if args.compiled_num_envs is None and args.quick:
        args.compiled_num_envs = [64]
    args.async_max_num_envs = args.async_max_num_envs or (16 if args.quick else 64)
    args.steps = args.steps or (40 if args.quick else 200)
    args.chunk = args.chunk or (20 if args.quick else 50)
    args.repeats = args.repeats or (3 if args.quick else 5)
    device = torch.device(args.device)
    torch.set_num_threads(1)  # the physics threads are what is measured; torch's arithmetic is tiny

    print(machine_line(device))
    print(f"# steps {args.steps} per run, chunk {args.chunk}, median of {args.repeats} runs")
    print("| env | N | contestant | threads | steps/s | first call (s) | outside mj_step |")
    print("|---|---|---|---|---|---|---|")

    def row(
        env_id: str, n: int, name: str, threads: Any, rate: float | str, first: str = "", outside: str = ""
    ):
        rate_text = f"{rate:,.0f}" if isinstance(rate, float) else rate
        print(f"| {env_id} | {n} | {name} | {threads} | {rate_text} | {first} | {outside} |", flush=True)

    for env_id in args.envs:
        for n in args.num_envs:
            for mode in args.modes:
                if mode in ("eager", "compiled"):
                    if mode == "compiled" and args.compiled_num_envs and n not in args.compiled_num_envs:
                        continue
                    try:
                        rates, first, outside = time_funrl(
                            env_id, n, mode == "compiled", args.threads, args, device
                        )
                    except Exception as err:  # one failing row is reported, the table goes on
                        traceback.print_exc()
                        row(
                            env_id,
                            n,
                            f"funrl {mode}",
                            "-",
                            f"failed: {type(err).__name__}: {first_line(err)}",
                        )
                        continue
                    for num_threads, rate in rates.items():
                        row(env_id, n, f"funrl {mode}", num_threads, rate, f"{first:.1f}", f"{outside:.0%}")
                elif mode in ("sync", "async"):
                    if mode == "async" and n > args.async_max_num_envs:
                        row(env_id, n, "gymnasium async", "-", f"skipped: {n} processes")
                        continue
                    row(
                        env_id,
                        n,
                        f"gymnasium {mode}",
                        1 if mode == "sync" else f"{n} proc",
                        time_gymnasium(env_id, n, mode, args),
                    )
                else:
                    try:
                        import envpool  # noqa: F401
                    except ImportError as err:
                        row(env_id, n, "envpool", "-", f"not importable: {err}")
                        continue
                    for num_threads in args.threads:
                        row(env_id, n, "envpool", num_threads, time_envpool(env_id, n, num_threads, args))


if __name__ == "__main__":
    main()
