"""Agents on MuJoCo: funrl's SAC on HalfCheetah-v5 and PPO on Hopper-v5 next to Stable-Baselines3's
on gymnasium's envs, with the same hyper-parameters, in one run: return curves and wall-clock.

    python benchmarks/mujoco_agents.py --device cpu --seeds 3 --out mujoco_agents.json
    python benchmarks/mujoco_agents.py --quick          # a tiny budget, eager: checks every contestant runs

- SAC, HalfCheetah-v5, 100k steps: 256-256 ReLU actor and twin critics, Adam 3e-4 for actor,
  critics and temperature (SB3's single rate; funrl's ``policy_lr`` and ``q_lr`` set to it),
  batch 256, gamma 0.99, tau 0.005, learned temperature starting at 0.2 with target entropy
  ``-dim(A)`` (SB3's ``ent_coef="auto_0.2"``), one gradient step per transition after 5k random
  transitions, a buffer holding the whole run. SB3 clamps the actor's log-std to [-20, 2], funrl
  (CleanRL) to [-5, 2].
- PPO, Hopper-v5, 1M steps, CleanRL's ``ppo_continuous_action.py``: 1 env x 2048 steps, 10 epochs
  of 32 minibatches, Adam 3e-4 annealed linearly to 0, gamma 0.99, lambda 0.95, clip 0.2 (policy
  and value), entropy 0, value 0.5, global-norm clip 0.5, tanh 64-64 separate actor and critic,
  state-independent log-std, orthogonal init, observation and reward normalisation. SB3 gets
  ``VecNormalize`` with CleanRL's clipping of normalised observations and rewards to +-10; funrl's
  normalisation wrappers do not clip.

Both sides record every finished training episode (funrl: the per-update mean of the episodes
that ended in it, weighted by their count; SB3: its ``Monitor``). The table gives the mean return
of the last ``--final-episodes`` episodes per seed, and the wall-clock of ``train`` / ``learn``
(funrl's includes its compile, which is also given apart as its first update). ``--out`` writes
the curves (return against environment steps per contestant and seed) as JSON, and a PNG next to
it when matplotlib is installed.

``--quick`` runs a few thousand steps, eagerly: it proves the script works; the returns mean
nothing and the wall-clock ratio is eager funrl's against SB3 on a tiny budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from funrl import random
from funrl.agents import ppo, sac

FULL = {
    "sac": sac.SACConfig(
        env_id="HalfCheetah-v5",
        total_steps=100_000,
        learning_starts=5_000,
        buffer_size=100_000,
        batch_size=256,
        policy_lr=3e-4,
        q_lr=3e-4,
        alpha=0.2,
        hidden_sizes=(256, 256),
    ),
    "ppo": ppo.PPOConfig(
        env_id="Hopper-v5",
        total_steps=1_000_000,
        num_envs=1,
        num_steps=2048,
        update_epochs=10,
        num_minibatches=32,
        learning_rate=3e-4,
        anneal_lr=True,
        clip_eps=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        hidden_sizes=(64, 64),
        activation="tanh",
        normalize_obs=True,
        normalize_reward=True,
    ),
}
QUICK = {
    "sac": dict(total_steps=1_500, learning_starts=500, buffer_size=1_500),
    "ppo": dict(total_steps=4_096),
}


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} usable cores, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )


def episode_curve(history: dict[str, torch.Tensor], steps_per_update: int) -> tuple[list[int], list[float]]:
    """(environment step, mean return) of every update in which episodes ended."""
    returns, counts = history["episode_return"], history["episodes"]
    steps = (torch.arange(1, len(returns) + 1) * steps_per_update).tolist()
    ended = (counts > 0).tolist()
    return [s for s, e in zip(steps, ended, strict=True) if e], [
        float(r) for r, e in zip(returns.tolist(), ended, strict=True) if e
    ]


def final_return(history: dict[str, torch.Tensor], episodes: int) -> float:
    """Mean return of the last ``episodes`` finished episodes (per-update means weighted by count)."""
    returns, counts = history["episode_return"], history["episodes"]
    ended = counts > 0
    returns, counts = returns[ended].double().flip(0), counts[ended].double().flip(0)
    weights = (episodes - (counts.cumsum(0) - counts)).clamp(min=0).minimum(counts)
    return float((returns * weights).sum() / weights.sum())


def run_funrl(algo: str, config: Any, seed: int, compile: bool, device: str, episodes: int) -> dict:
    torch.compiler.reset()
    agent = (sac if algo == "sac" else ppo).make_train(config, device=device)
    start = time.perf_counter()
    _, history = agent(random.key(seed), compile=compile)
    wall = time.perf_counter() - start
    steps, curve = episode_curve(history, agent.steps_per_update)
    return {"wall_s": wall, "final": final_return(history, episodes), "steps": steps, "returns": curve}


def make_sb3(algo: str, config: Any, seed: int) -> Any:
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(config.env_id, n_envs=config.num_envs, seed=seed)
    if algo == "sac":
        return SAC(
            "MlpPolicy", env, learning_rate=config.policy_lr, buffer_size=config.buffer_size,
            learning_starts=config.learning_starts, batch_size=config.batch_size, tau=config.tau,
            gamma=config.gamma, train_freq=1, gradient_steps=1, ent_coef=f"auto_{config.alpha}",
            target_entropy="auto", policy_kwargs={"net_arch": list(config.hidden_sizes)},
            device="cpu", seed=seed, verbose=0,
        )  # fmt: skip
    env = VecNormalize(
        env, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0, gamma=config.gamma
    )
    batch = config.num_envs * config.num_steps // config.num_minibatches
    return PPO(
        "MlpPolicy", env, learning_rate=lambda progress: config.learning_rate * progress,
        n_steps=config.num_steps, batch_size=batch, n_epochs=config.update_epochs, gamma=config.gamma,
        gae_lambda=config.gae_lambda, clip_range=config.clip_eps, clip_range_vf=config.clip_eps,
        ent_coef=config.ent_coef, vf_coef=config.vf_coef, max_grad_norm=config.max_grad_norm,
        policy_kwargs={"net_arch": {"pi": list(config.hidden_sizes), "vf": list(config.hidden_sizes)},
                       "activation_fn": torch.nn.Tanh},
        device="cpu", seed=seed, verbose=0,
    )  # fmt: skip


def run_sb3(algo: str, config: Any, seed: int, episodes: int) -> dict:
    model = make_sb3(algo, config, seed)
    start = time.perf_counter()
    model.learn(total_timesteps=config.total_steps)
    wall = time.perf_counter() - start
    rewards = model.get_env().env_method("get_episode_rewards")[0]
    lengths = model.get_env().env_method("get_episode_lengths")[0]
    steps = np.cumsum(lengths).tolist()
    final = float(np.mean(rewards[-episodes:])) if rewards else float("nan")
    return {"wall_s": wall, "final": final, "steps": steps, "returns": [float(r) for r in rewards]}


def save_plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (algo, contestants) in zip(axes[0], results.items(), strict=True):
        for name, runs in contestants.items():
            for i, run in enumerate(runs):
                ax.plot(run["steps"], run["returns"], label=name if i == 0 else None, alpha=0.7, marker=".",
                        color="C0" if name.startswith("funrl") else "C1")  # fmt: skip
        ax.set_title(f"{algo} on {FULL[algo].env_id}")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episode return")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="funrl's device (SB3 runs on cpu)")
    parser.add_argument("--algos", nargs="+", default=["sac", "ppo"], choices=["sac", "ppo"])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tiny budget, funrl eager")
    parser.add_argument("--no-compile", action="store_true", help="funrl eager (--quick implies it)")
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument(
        "--final-episodes", type=int, default=10, help="episodes averaged into the final return"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both libraries)")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the curves (and a PNG beside it)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    compile = not (args.quick or args.no_compile)
    print(f"# {machine()}; funrl {'compiled' if compile else 'eager'}; seeds {args.seeds}")
    print("| agent | env | steps | contestant | final return (per seed) | wall-clock s (per seed) | vs SB3 |")
    print("|---|---|---|---|---|---|---|")
    results: dict[str, dict[str, list[dict]]] = {}
    for algo in args.algos:
        config = dataclasses.replace(FULL[algo], **QUICK[algo]) if args.quick else FULL[algo]
        runs: dict[str, list[dict]] = {f"funrl {'compiled' if compile else 'eager'}": []}
        if not args.skip_sb3:
            runs["SB3"] = []
        for seed in range(args.seeds):  # contestants alternate, so load drift hits both
            runs[next(iter(runs))].append(
                run_funrl(algo, config, seed, compile, args.device, args.final_episodes)
            )
            if not args.skip_sb3:
                runs["SB3"].append(run_sb3(algo, config, seed, args.final_episodes))
        sb3_wall = statistics.median(r["wall_s"] for r in runs["SB3"]) if "SB3" in runs else None
        for name, seeds in runs.items():
            wall = statistics.median(r["wall_s"] for r in seeds)
            versus = f"{wall / sb3_wall:.2f}x" if sb3_wall else "-"
            finals = ", ".join(f"{r['final']:.0f}" for r in seeds)
            walls = ", ".join(f"{r['wall_s']:.0f}" for r in seeds)
            print(
                f"| {algo} | {config.env_id} | {config.total_steps} | {name} | {finals} | {walls} | {versus} |"
            )
        results[algo] = runs
    if args.out:
        args.out.write_text(json.dumps(results))
        save_plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
