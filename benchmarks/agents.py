"""PPO on CartPole-v1 with PureJaxRL's configuration: funrl (compiled, 1 seed and S seeds vmapped)
against Stable-Baselines3 PPO with the same hyper-parameters, in one run.

    python benchmarks/agents.py --device cpu [--total-steps 500000] [--seeds 8] [--skip-sb3] [--threads N]

Prints a markdown table: wall-clock of training excluding compilation (and the compile time
separately), speed-up against SB3, and the greedy evaluation return of every funrl seed. funrl's
rows compile the update step as ``funrl train`` does (``funrl.agents.common.make_step``).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from funrl import random, tree
from funrl.agents import common, ppo


def machine() -> str:
    """The machine in one line, for the table's header (shared with agents_offpolicy.py)."""
    return (
        f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )


def run_funrl(config: ppo.PPOConfig, num_seeds: int | None, device: str) -> dict:
    # A fresh compiler state per row: each row's compile is timed from scratch (inductor's on-disk
    # cache is left alone; give the run a fresh TORCHINDUCTOR_CACHE_DIR for cold compiles).
    torch.compiler.reset()
    agent = ppo.make_train(config, device=device)
    keys = common.seed_keys(0, num_seeds)
    state, run_key = common.init_state(agent, keys)
    step = common.make_step(agent, num_seeds is not None, compile=True)
    t0 = time.perf_counter()
    state, metrics = step(state, run_key)
    metrics["loss"].sum().item()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = step(state, run_key)
    metrics["loss"].sum().item()
    one = time.perf_counter() - t0
    compile_s = first - one
    t0 = time.perf_counter()
    for _ in range(agent.num_updates - 2):
        state, metrics = step(state, run_key)
    metrics["loss"].sum().item()
    run_s = one + time.perf_counter() - t0
    params = state.params if num_seeds is not None else tree.stack([state.params])
    returns = [
        float(common.evaluate(agent, p, random.fold_in(random.key(12345), i), 20).mean())
        for i, p in enumerate(tree.unstack(params))
    ]
    return {"compile_s": compile_s, "run_s": run_s, "eval": returns}


def run_sb3(config: ppo.PPOConfig) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = make_vec_env(config.env_id, n_envs=config.num_envs, seed=0)
    lr = config.learning_rate
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=config.num_steps,
        batch_size=config.steps_per_update // config.num_minibatches,
        n_epochs=config.update_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip_range=config.clip_eps,
        ent_coef=config.ent_coef,
        vf_coef=config.vf_coef,
        max_grad_norm=config.max_grad_norm,
        learning_rate=lambda remaining: lr * remaining,
        policy_kwargs={"net_arch": list(config.hidden_sizes), "activation_fn": torch.nn.Tanh},
        device="cpu",
        seed=0,
        verbose=0,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=config.total_steps)
    run_s = time.perf_counter() - t0
    mean, _ = evaluate_policy(model, make_vec_env(config.env_id, n_envs=1, seed=1), n_eval_episodes=20)
    return {"run_s": run_s, "eval": [float(mean)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ppo.PPOConfig(total_steps=args.total_steps)
    print(f"machine: {machine()}")
    rows = []
    # A vmapped row of one seed would repeat the one-seed row.
    for num_seeds in (None, args.seeds) if args.seeds > 1 else (None,):
        what = f"{num_seeds} seeds vmapped" if num_seeds else "1 seed"
        rows.append((f"funrl PPO, {what} (compiled)", run_funrl(config, num_seeds, args.device)))
    if not args.skip_sb3:
        rows.append(("Stable-Baselines3 PPO, 1 seed", run_sb3(config)))
    sb3 = rows[-1][1]["run_s"] if not args.skip_sb3 else None
    print(f"\nPPO {config.env_id}, {config.total_steps} steps per seed, PureJaxRL config\n")
    print(
        "| run | train wall-clock (s) | compile (s) | vs SB3 | greedy eval return (20 episodes, per seed) |"
    )
    print("|---|---|---|---|---|")
    for name, r in rows:
        speed = f"{sb3 / r['run_s']:.1f}x" if sb3 else "-"
        comp = f"{r['compile_s']:.1f}" if "compile_s" in r else "-"
        evals = ", ".join(f"{e:.0f}" for e in r["eval"])
        print(f"| {name} | {r['run_s']:.1f} | {comp} | {speed} | {evals} |")


if __name__ == "__main__":
    main()
