"""Off-policy agents: gradient (update) steps per second of funrl's DQN, SAC and TD3 against
Stable-Baselines3's, with the same hyper-parameters, in one run.

    python benchmarks/agents_offpolicy.py --device cpu [--algos dqn sac td3] [--steps 2000]
        [--repeats 3] [--compile] [--threads 1] [--profile 50]

Each measurement trains from a warm state (the buffer already holds ``learning_starts``
transitions, so every step trains) for ``--steps`` environment transitions, and counts gradient
steps per second of wall-clock *including* the environment steps and replay (what a training run
pays). funrl runs eager, and with ``--compile`` also ``torch.compile``d as ``funrl train`` does
(compile time reported apart). SB3 runs ``model.learn`` on its gymnasium environment with
``learning_starts`` already passed. Medians of ``--repeats`` timings; rows of one algorithm alternate (load drift hits all).

``--profile STEPS`` adds a table from one ``torch.profiler`` pass of STEPS transitions per row:
milliseconds per gradient step in matrix products (``aten::mm/bmm/addmm/baddbmm``, the work both
libraries must do), in TorchDynamo's guard check, and the rest (Python, autograd, optimiser, env,
generated kernels).
The profiler slows every row; compare the matmul column across rows, not the totals with the
timings above.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

# Run as a script, this directory is on sys.path: the on-policy benchmark names the machine alike.
from agents import machine  # benchmarks/agents.py

from funrl import random
from funrl.agents import common, dqn, sac, td3

CONFIGS: dict[str, Any] = {
    # learning_starts=0: every update takes its gradient steps (the steady state of a run).
    "dqn": (dqn.make_train, dqn.DQNConfig(learning_starts=0)),
    "sac": (sac.make_train, sac.SACConfig(learning_starts=0)),
    "td3": (td3.make_train, td3.TD3Config(learning_starts=0)),
}


class FunrlRunner:
    def __init__(self, algo: str, device: str, compile: bool, warm_updates: int) -> None:
        make, config = CONFIGS[algo]
        self.agent = make(config, device=device)
        self.config = config
        self.state, self.run_key = common.init_state(self.agent, random.key(0))
        self.step = common.make_step(self.agent, batched=False, compile=compile)
        t0 = time.perf_counter()
        for _ in range(warm_updates):  # fills the buffer past batch_size; the first call compiles
            self.state, metrics = self.step(self.state, self.run_key)
        float(next(iter(metrics.values())))
        self.warm_s = time.perf_counter() - t0

    def time_steps(self, env_steps: int) -> tuple[float, int]:
        updates = max(env_steps // self.agent.steps_per_update, 1)
        t0 = time.perf_counter()
        for _ in range(updates):
            self.state, metrics = self.step(self.state, self.run_key)
        float(next(iter(metrics.values())))
        return time.perf_counter() - t0, updates * self.config.gradient_steps


MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm")


def profile_breakdown(runner: Any, env_steps: int) -> dict[str, float]:
    """Milliseconds per gradient step under ``torch.profiler``: total, matmul, guard check, rest."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        seconds, grad_steps = runner.time_steps(env_steps)
    events = prof.key_averages()

    def self_ms(names: tuple[str, ...]) -> float:
        return sum(e.self_cpu_time_total for e in events if e.key in names) / 1e3 / grad_steps

    total = seconds * 1e3 / grad_steps
    matmul = self_ms(MATMUL_OPS)
    guard = self_ms(("TorchDynamo Cache Lookup",))
    return {"total": total, "matmul": matmul, "guard": guard, "rest": total - matmul - guard}


def make_sb3(algo: str) -> Any:
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    if algo == "dqn":
        c = CONFIGS["dqn"][1]
        env = make_vec_env(c.env_id, n_envs=1, seed=0)
        return DQN(
            "MlpPolicy", env, learning_rate=c.learning_rate, buffer_size=c.buffer_size,
            learning_starts=c.batch_size, batch_size=c.batch_size, tau=c.tau, gamma=c.gamma,
            train_freq=c.train_frequency, gradient_steps=1,
            target_update_interval=c.target_network_frequency,
            exploration_fraction=c.exploration_fraction, exploration_initial_eps=c.start_e,
            exploration_final_eps=c.end_e, policy_kwargs={"net_arch": list(c.hidden_sizes)},
            device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    env = make_vec_env(CONFIGS[algo][1].env_id, n_envs=1, seed=0)
    if algo == "sac":
        c = CONFIGS["sac"][1]
        return SAC(
            "MlpPolicy", env, learning_rate=c.policy_lr, buffer_size=c.buffer_size,
            learning_starts=c.batch_size, batch_size=c.batch_size, tau=c.tau, gamma=c.gamma,
            train_freq=1, gradient_steps=1, ent_coef="auto",
            policy_kwargs={"net_arch": list(c.hidden_sizes)}, device="cpu", seed=0, verbose=0,
        )  # fmt: skip
    c = CONFIGS["td3"][1]
    action_dim = env.action_space.shape[0]
    noise = NormalActionNoise(
        torch.zeros(action_dim).numpy(), c.exploration_noise * torch.ones(action_dim).numpy()
    )
    return TD3(
        "MlpPolicy", env, learning_rate=c.learning_rate, buffer_size=c.buffer_size,
        learning_starts=c.batch_size, batch_size=c.batch_size, tau=c.tau, gamma=c.gamma,
        train_freq=1, gradient_steps=1, action_noise=noise, policy_delay=c.policy_frequency,
        target_policy_noise=c.policy_noise, target_noise_clip=c.noise_clip,
        policy_kwargs={"net_arch": list(c.hidden_sizes)}, device="cpu", seed=0, verbose=0,
    )  # fmt: skip


class SB3Runner:
    def __init__(self, algo: str) -> None:
        self.model = make_sb3(algo)
        self.algo = algo
        c = CONFIGS[algo][1]
        self.model.learn(total_timesteps=c.batch_size + c.train_frequency * 2)  # past learning_starts

    def time_steps(self, env_steps: int) -> tuple[float, int]:
        before = self.model._n_updates
        t0 = time.perf_counter()
        self.model.learn(total_timesteps=env_steps, reset_num_timesteps=False)
        elapsed = time.perf_counter() - t0
        return elapsed, self.model._n_updates - before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="torch device for funrl (SB3 runs on cpu)")
    parser.add_argument("--algos", nargs="+", default=["dqn", "sac", "td3"], choices=sorted(CONFIGS))
    parser.add_argument("--steps", type=int, default=2000, help="env transitions per timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="also time the torch.compile'd update")
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="STEPS",
        help="also a per-step breakdown (matmul, guard check, rest) over STEPS env transitions per row "
        "(keep it small: the profiler holds every op event in memory)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine()}")
    print("\n| agent | run | gradient steps/s (median) | timings (steps/s) | vs SB3 | compile/warm-up (s) |")
    print("|---|---|---|---|---|---|")
    breakdown: list[str] = []
    for algo in args.algos:
        warm = max(CONFIGS[algo][1].batch_size // CONFIGS[algo][0](CONFIGS[algo][1]).steps_per_update, 1) + 1
        runners: dict[str, Any] = {"funrl eager": FunrlRunner(algo, args.device, False, warm)}
        if args.compile:
            runners["funrl compiled"] = FunrlRunner(algo, args.device, True, warm)
        if not args.skip_sb3:
            runners["SB3"] = SB3Runner(algo)
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.repeats):
            for name, runner in runners.items():
                seconds, grad_steps = runner.time_steps(args.steps)
                rates[name].append(grad_steps / seconds)
        sb3 = statistics.median(rates["SB3"]) if "SB3" in rates else None
        for name, values in rates.items():
            median = statistics.median(values)
            versus = f"{median / sb3:.2f}x" if sb3 else "-"
            warm_s = f"{runners[name].warm_s:.1f}" if hasattr(runners[name], "warm_s") else "-"
            timings = ", ".join(f"{v:.0f}" for v in values)
            print(
                f"| {algo} {CONFIGS[algo][1].env_id} | {name} | {median:.0f} | {timings} | {versus} | {warm_s} |"
            )
        if args.profile:
            for name, runner in runners.items():
                b = profile_breakdown(runner, args.profile)
                breakdown.append(
                    f"| {algo} {CONFIGS[algo][1].env_id} | {name} | {b['total']:.2f} | {b['matmul']:.2f} "
                    f"({100 * b['matmul'] / b['total']:.0f}%) | {b['guard']:.2f} | {b['rest']:.2f} |"
                )
            print("\n".join(["", *breakdown]), flush=True)
    if breakdown:
        print("\n| agent | run | ms / gradient step (profiled) | in matmul | in guard check | rest |")
        print("|---|---|---|---|---|---|")
        print("\n".join(breakdown))


if __name__ == "__main__":
    main()
