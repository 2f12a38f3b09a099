"""Time to a trained agent, as a user's clock sees it: whole processes, cold and warm, against SB3.

    python benchmarks/time_to_result.py --device cpu [--algos ppo dqn sac] [--repeats 3]
        [--total-steps ppo=500000,dqn=100000,sac=20000] [--seeds 8]
    python benchmarks/time_to_result.py --quick     # tiny budgets, one round: checks it runs
    python benchmarks/time_to_result.py --algos sac --parts eager   # only the eager comparison

Each round runs, one after another, every contestant of an algorithm as its own process:

- ``sb3``: Stable-Baselines3 with funrl's default hyper-parameters for that algorithm (this file
  run with ``--sb3 ALGO``), import and evaluation-free training included;
- ``cold``: ``python -m funrl train ALGO`` with empty compile caches (a fresh cache folder);
- ``warm``: the same command again, on the caches the cold run left;
- ``warm, new lr``: the same with another ``--lr`` (a float hyper-parameter only);
- ``cold, S seeds``: ``--seeds S`` with empty caches (PPO only);
- ``eager``: ``--no-compile`` on ``--eager-steps`` (a tenth of the budget by default), against SB3
  on the same budget (``sb3, eager budget``).

Prints one markdown table per algorithm: the median wall-clock and CPU time (user + system) of
each contestant and their ratios to SB3's on the same budget, pair by pair within a round (the
machine's speed drifts; ratios in one round do not). Each contestant's figures of each round go
to stderr as it finishes, a funrl run's with the split of its ``timing.json``: the first update's
call (which holds the compile, or the load from the caches) and the rest of training.

SB3 runs each algorithm with funrl's default hyper-parameters and as many environments; what SB3
cannot express stays SB3's: DQN's Huber loss without double Q-learning (funrl: squared error,
double Q), and one learning rate for SAC's actor, critics and temperature (funrl's actor rate).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

DEFAULT_STEPS = {"ppo": 500_000, "dqn": 100_000, "sac": 20_000, "td3": 20_000}
QUICK_STEPS = {"ppo": 20_480, "dqn": 5_000, "sac": 2_000, "td3": 2_000}
NEW_LR = {"ppo": "1e-3", "dqn": "5e-4", "sac": "5e-4", "td3": "5e-4"}  # each unlike the default
PARTS = ("compiled", "eager")
ENVS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1", "td3": "Pendulum-v1"}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def train_sb3(algo: str, total_steps: int) -> None:
    """Train SB3's ``algo`` with the hyper-parameters of funrl's default config for it."""
    from stable_baselines3 import DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    from funrl.agents import dqn, ppo, sac, td3

    if algo == "ppo":
        c = ppo.PPOConfig()
        model = PPO(
            "MlpPolicy", make_vec_env(ENVS[algo], n_envs=c.num_envs, seed=0), n_steps=c.num_steps,
            batch_size=c.num_envs * c.num_steps // c.num_minibatches, n_epochs=c.update_epochs,
            gamma=c.gamma, gae_lambda=c.gae_lambda, clip_range=c.clip_eps, ent_coef=c.ent_coef,
            vf_coef=c.vf_coef, max_grad_norm=c.max_grad_norm,
            learning_rate=lambda remaining: c.learning_rate * remaining,
            policy_kwargs={"net_arch": list(c.hidden_sizes), "activation_fn": torch.nn.Tanh},
            device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    elif algo == "dqn":
        c = dqn.DQNConfig()
        # funrl steps num_envs envs num_steps times per update, then takes one gradient step per
        # train_frequency transitions; SB3 counts train_freq in vector steps. SB3 clips gradients
        # by default; funrl's DQN does not.
        model = DQN(
            "MlpPolicy", make_vec_env(ENVS[algo], n_envs=c.num_envs, seed=0),
            learning_rate=c.learning_rate, buffer_size=c.buffer_size,
            learning_starts=c.learning_starts, batch_size=c.batch_size, tau=c.tau, gamma=c.gamma,
            train_freq=c.num_steps, gradient_steps=c.gradient_steps, max_grad_norm=math.inf,
            target_update_interval=c.target_network_frequency,
            exploration_fraction=c.exploration_fraction, exploration_initial_eps=c.start_e,
            exploration_final_eps=c.end_e, policy_kwargs={"net_arch": list(c.hidden_sizes)},
            device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    elif algo == "sac":
        c = sac.SACConfig()
        model = SAC(
            "MlpPolicy", make_vec_env(ENVS[algo], n_envs=1, seed=0), learning_rate=c.policy_lr,
            buffer_size=c.buffer_size, learning_starts=c.learning_starts, batch_size=c.batch_size,
            tau=c.tau, gamma=c.gamma, train_freq=1, gradient_steps=1, ent_coef="auto",
            policy_kwargs={"net_arch": list(c.hidden_sizes)}, device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    else:
        c = td3.TD3Config()
        env = make_vec_env(ENVS[algo], n_envs=1, seed=0)
        dim = env.action_space.shape[0]
        noise = NormalActionNoise(torch.zeros(dim).numpy(), c.exploration_noise * torch.ones(dim).numpy())
        model = TD3(
            "MlpPolicy", env, learning_rate=c.learning_rate, buffer_size=c.buffer_size,
            learning_starts=c.learning_starts, batch_size=c.batch_size, tau=c.tau, gamma=c.gamma,
            train_freq=1, gradient_steps=1, action_noise=noise, policy_delay=c.policy_frequency,
            target_policy_noise=c.policy_noise, target_noise_clip=c.noise_clip,
            policy_kwargs={"net_arch": list(c.hidden_sizes)}, device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    model.learn(total_timesteps=total_steps)


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[str, float, float]:
    """``(stdout, wall-clock s, CPU s)`` of ``command`` as a child process (``RuntimeError`` with
    its stderr's end if it fails); CPU is user + system time, which other jobs on a shared machine
    change less than they change the wall-clock."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result.stdout, elapsed, cpu


def contestants(
    algo: str, steps: int, eager_steps: int, seeds: int, device: str, parts: tuple[str, ...] = PARTS
) -> list[tuple[str, list[str], bool, str]]:
    """``(name, command, fresh_cache, sb3 row to compare with)`` in the order a round runs them:
    the ``compiled`` part (SB3 and funrl on the whole budget), then the ``eager`` part."""

    def funrl(budget: int) -> list[str]:
        return [sys.executable, "-m", "funrl", "train", algo, "--env", ENVS[algo], "--total-steps",
                str(budget), "--device", device, "--no-progress"]  # fmt: skip

    def sb3(budget: int) -> list[str]:
        return [sys.executable, __file__, "--sb3", algo, "--sb3-steps", str(budget)]

    rows = []
    if "compiled" in parts:
        rows += [
            ("sb3", sb3(steps), False, "sb3"),
            ("funrl cold", funrl(steps), False, "sb3"),  # the round's shared cache is empty until here
            ("funrl warm", funrl(steps), False, "sb3"),
            ("funrl warm, new lr", funrl(steps) + ["--lr", NEW_LR[algo]], False, "sb3"),
        ]
        if algo == "ppo" and seeds > 1:
            rows.append((f"funrl cold, {seeds} seeds", funrl(steps) + ["--seeds", str(seeds)], True, "sb3"))
    if "eager" in parts:
        rows.append((f"sb3, {eager_steps} steps", sb3(eager_steps), False, f"sb3, {eager_steps} steps"))
        rows.append((f"funrl eager, {eager_steps} steps", funrl(eager_steps) + ["--no-compile"], False,
                     f"sb3, {eager_steps} steps"))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--algos", nargs="+", default=["ppo", "dqn", "sac"], choices=sorted(DEFAULT_STEPS))
    parser.add_argument("--total-steps", default="", help="ALGO=N,... (default: ppo 500k, dqn 100k, sac 20k)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--eager-fraction", type=float, default=0.1, help="eager budget / total steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--parts", nargs="+", default=list(PARTS), choices=PARTS,
        help="compiled: SB3, cold and warm on the whole budget; eager: --no-compile against SB3 on the eager budget",
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true",
        help="tiny budgets (ppo 20480, dqn 5000, sac 2000 steps), half of them eager, one round, "
        "2 seeds: checks that every contestant runs; not for the table",
    )  # fmt: skip
    parser.add_argument("--sb3", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sb3-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3:
        train_sb3(args.sb3, args.sb3_steps)
        return
    steps = dict(QUICK_STEPS if args.quick else DEFAULT_STEPS)
    if args.quick:
        args.repeats, args.seeds, args.eager_fraction = 1, 2, 0.5
    for item in filter(None, args.total_steps.split(",")):
        name, value = item.split("=")
        steps[name] = int(value)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, device {args.device}")
    for algo in args.algos:
        eager_steps = int(steps[algo] * args.eager_fraction)
        rows = contestants(algo, steps[algo], eager_steps, args.seeds, args.device, tuple(args.parts))
        times: dict[str, list[float]] = {row[0]: [] for row in rows}
        cpu_times: dict[str, list[float]] = {row[0]: [] for row in rows}
        ratios: dict[str, list[float]] = {row[0]: [] for row in rows}
        cpu_ratios: dict[str, list[float]] = {row[0]: [] for row in rows}
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as outs:
                round_times, round_cpu = {}, {}
                for i, (name, command, fresh, _) in enumerate(rows):
                    env = dict(os.environ)
                    cache_dir = Path(cache) / (f"fresh-{i}" if fresh else "shared")
                    env["FUNRL_CACHE_DIR"] = str(cache_dir)
                    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir / "inductor")
                    out = ["--out", str(Path(outs) / f"run-{i}")] if command[1] == "-m" else []
                    _, round_times[name], round_cpu[name] = timed(command + out, env)
                    timing = Path(out[1]) / "timing.json" if out else None
                    split = ""
                    if timing is not None and timing.is_file():
                        t = json.loads(timing.read_text())
                        split = f" (first update, compile included: {t['first_update_s']:.1f} s; rest {t['train_s']:.1f} s)"
                    print(
                        f"  {name}: {round_times[name]:.1f} s, CPU {round_cpu[name]:.1f} s{split}",
                        file=sys.stderr,
                    )
                for name, _command, _fresh, peer in rows:
                    times[name].append(round_times[name])
                    cpu_times[name].append(round_cpu[name])
                    ratios[name].append(round_times[name] / round_times[peer])
                    cpu_ratios[name].append(round_cpu[name] / round_cpu[peer])
        print(f"\n{algo.upper()} on {ENVS[algo]}, {steps[algo]} steps, {args.repeats} rounds")
        print("| contestant | wall-clock s | / SB3 on its budget | CPU s | CPU / SB3's |")
        print("|---|---|---|---|---|")
        for name in times:
            print(
                f"| {name} | {statistics.median(times[name]):.1f} | {statistics.median(ratios[name]):.2f} "
                f"| {statistics.median(cpu_times[name]):.1f} | {statistics.median(cpu_ratios[name]):.2f} |"
            )


if __name__ == "__main__":
    main()
