"""PPO on CartPole-v1 with PureJaxRL's configuration: funrl (compiled, 1 seed and S seeds vmapped)
against Stable-Baselines3 PPO with the same hyper-parameters, in one run.

    python benchmarks/agents.py --device cpu [--total-steps 500000] [--seeds 8] [--skip-sb3]
        [--cpp-wrapper both|on|off] [--cpu-allocator caching|default]

Prints a markdown table: wall-clock of training excluding compilation (and the compile time
separately), speed-up against SB3, and the greedy evaluation return of every funrl seed. funrl's
rows run as ``funrl train`` runs them, on funrl's caching CPU allocator in a process restarted
with glibc's per-thread malloc cache raised (``funrl.allocator``), unless ``--cpu-allocator
default``. SB3 runs on torch's default allocator, in the same process (so with the same glibc
setting, which can only help it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from funrl import allocator, random, tree
from funrl.agents import common, ppo


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _vector_isa() -> str:
    # Inductor validates the CPU's vector ISA by loading a test library in a child Python that
    # inherits this process's sys.path; when that child fails (e.g. a file beside the script
    # shadows a standard module), every kernel compiles scalar, silently (a [128, 64] tanh in the
    # PPO step then took 141 µs a call).
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return str(isa) if isa else "none: inductor compiles scalar kernels (timings not comparable)"


def run_funrl(config: ppo.PPOConfig, num_seeds: int | None, device: str, cpp_wrapper: bool) -> dict:
    # A fresh dynamo state per row: each row's compile is timed from scratch (inductor's on-disk
    # cache is left alone; give the run a fresh TORCHINDUCTOR_CACHE_DIR for cold compiles).
    torch._dynamo.reset()
    agent = ppo.make_train(config, device=device)
    keys = common.seed_keys(0, num_seeds)
    state, run_key = common.init_state(agent, keys)
    options = {"cpp_wrapper": True} if cpp_wrapper else None
    step = common.make_step(agent, num_seeds is not None, compile=True, options=options)
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


def add_cpu_allocator_option(parser: argparse.ArgumentParser) -> None:
    """``--cpu-allocator caching|default``, shared with the off-policy benchmark."""
    parser.add_argument(
        "--cpu-allocator",
        choices=("caching", "default"),
        default="caching",
        help="CPU allocator of funrl's rows: funrl.allocator's caching one, in a process restarted "
        "with glibc's malloc cache raised, or torch's default as it is (default: caching); SB3's "
        "rows always use torch's default",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument(
        "--cpp-wrapper",
        choices=("both", "on", "off"),
        default="both",
        help="inductor's C++ wrapper for the compiled steps (one seed and vmapped seeds): rows with "
        "and without it (both), or only one (default: both)",
    )
    add_cpu_allocator_option(parser)
    args = parser.parse_args()
    if args.cpu_allocator == "caching":
        allocator.exec_with_malloc_tunables([__file__, *sys.argv[1:]])
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ppo.PPOConfig(total_steps=args.total_steps)
    print(f"machine: {_cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    if args.cpu_allocator == "caching":
        allocator.use_caching_cpu_allocator()
    print(f"funrl's CPU allocator: {args.cpu_allocator}; GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES')}")
    rows = []
    variants = {"both": (False, True), "on": (True,), "off": (False,)}[args.cpp_wrapper]
    # A vmapped row of one seed would repeat the one-seed row (and the C++ wrapper refuses it).
    for num_seeds in (None, args.seeds) if args.seeds > 1 else (None,):
        for cpp in variants:
            label = "compiled, C++ wrapper" if cpp else "compiled"
            what = f"{num_seeds} seeds vmapped" if num_seeds else "1 seed"
            rows.append((f"funrl PPO, {what} ({label})", run_funrl(config, num_seeds, args.device, cpp)))
    if not args.skip_sb3:
        allocator.use_default_cpu_allocator()
        rows.append(("Stable-Baselines3 PPO, 1 seed", run_sb3(config)))
    if args.device == "cpu":
        # Asked after the rows: the first row's compile includes inductor's ISA check, as a user's does.
        print(f"inductor vector ISA: {_vector_isa()}")
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
