"""SB3 ``VecEnv`` throughput on CartPole-v1 with random actions: funrl's ``to_sb3_vec_env`` (eager
and ``compile=True``) against SB3's ``DummyVecEnv`` over gymnasium's CartPole and over funrl's
single-env adapter ``to_gymnasium_env``. Repeats are interleaved, so a change of load hits every
contestant alike; medians are printed.

    python benchmarks/sb3_vec_env.py --device cpu --num-envs 8 64 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

import funrl.envs as E


def steps_per_second(vec_env, steps: int) -> float:
    vec_env.reset()
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, vec_env.num_envs))
    for action in actions[:10]:  # warm-up
        vec_env.step(action)
    start = time.perf_counter()
    for action in actions:
        vec_env.step(action)
    return steps * vec_env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per repeat")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for n in args.num_envs:
        bench_num_envs(n, args.device, args.repeats, args.steps)


def bench_num_envs(n: int, device: str, repeats: int, steps: int) -> None:
    start = time.perf_counter()
    compiled = E.to_sb3_vec_env("CartPole-v1", n, device=device, compile=True)
    compiled.reset()
    compiled.step(np.zeros(n, dtype=np.int64))
    print(f"num_envs={n}: first compiled steps (the compile) {time.perf_counter() - start:.1f} s")
    contestants = {
        "funrl to_sb3_vec_env(compile=True)": lambda: compiled,
        "funrl to_sb3_vec_env, eager": lambda: E.to_sb3_vec_env("CartPole-v1", n, device=device),
        "DummyVecEnv(gymnasium CartPole-v1)": lambda: DummyVecEnv([lambda: gym.make("CartPole-v1")] * n),
        "DummyVecEnv(funrl to_gymnasium_env)": lambda: DummyVecEnv(
            [lambda: E.to_gymnasium_env("CartPole-v1", device=device)] * n
        ),
    }
    results: dict[str, list[float]] = {name: [] for name in contestants}
    for _ in range(repeats):
        for name, make in contestants.items():
            results[name].append(steps_per_second(make(), steps))
    for name, values in results.items():
        print(f"num_envs={n:5d}  {name:38s} median {statistics.median(values):>12,.0f} env-steps/s")

if __name__ == "__main__":
    main()
