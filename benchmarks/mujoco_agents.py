"""Agents on MuJoCo: funrl's SAC on HalfCheetah-v5 and PPO on Hopper-v5 next to Stable-Baselines3's
on gymnasium's envs, with the same hyper-parameters, in one run: returns and wall-clock.

    python benchmarks/mujoco_agents.py --seeds 4 --sb3-seeds 2 --out mujoco_agents.json
    python benchmarks/mujoco_agents.py --algos sac --contestants sb3 --sb3-seeds 1 --out sac_sb3.json
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

funrl trains its ``--seeds`` seeds vmapped in one compiled step (as ``funrl train --seeds``
does); SB3 trains its ``--sb3-seeds`` seeds one after the other. Per seed the table gives

- the final training return: the mean return of the last ``--final-episodes`` finished training
  episodes (funrl: the per-update mean of the episodes that ended in it, weighted by their count;
  SB3: its ``Monitor``);
- the greedy evaluation return: the mean over ``--eval-episodes`` fresh episodes of the
  deterministic policy (funrl: ``greedy_action``; SB3: ``deterministic=True``), observations
  normalised with the statistics training ended with, frozen (SB3's ``VecNormalize`` with
  ``training=False``);

as mean [min, max] over seeds, and the wall-clock and CPU seconds of training (this process's
CPU time; compile workers in other processes are not counted): funrl's for all its seeds at once
(compile included, and given apart as its first update), SB3's summed over its seeds. A side
stopped by ``--max-minutes`` reaches fewer steps, so "vs SB3" is the ratio of CPU seconds per
environment step (on a shared machine CPU seconds are the fairer figure). ``--contestants`` runs
one side only (two processes can then share a machine's cores, or run one after the other);
``--out`` writes every number and the return curves as JSON, and a PNG next to it when
matplotlib is installed; ``--merge a.json b.json`` prints the table of such files together.
``--at-steps`` adds every seed's training return by those steps (:func:`return_by`).

``--quick`` runs a few thousand steps, eagerly: it proves the script works; the returns mean
nothing and the wall-clock ratio is eager funrl's against SB3 on a tiny budget.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from funrl import envs, random
from funrl import tree as ftree
from funrl.agents import common, ppo, sac
from funrl.envs import wrappers

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


def sized(algo: str, total_steps: int) -> dict[str, int]:
    """The budget's fields: SAC's buffer holds the whole run."""
    return {"total_steps": total_steps, **({"buffer_size": total_steps} if algo == "sac" else {})}


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} usable cores, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )


def episode_curve(returns: torch.Tensor, counts: torch.Tensor, steps_per_update: int) -> tuple[list, list]:
    """(environment step, mean return) of every update in which episodes ended."""
    steps = (torch.arange(1, len(returns) + 1) * steps_per_update).tolist()
    ended = (counts > 0).tolist()
    return [s for s, e in zip(steps, ended, strict=True) if e], [
        float(r) for r, e in zip(returns.tolist(), ended, strict=True) if e
    ]


def final_return(returns: torch.Tensor, counts: torch.Tensor, episodes: int) -> float:
    """Mean return of the last ``episodes`` finished episodes (per-update means weighted by count)."""
    ended = counts > 0
    returns, counts = returns[ended].double().flip(0), counts[ended].double().flip(0)
    weights = (episodes - (counts.cumsum(0) - counts)).clamp(min=0).minimum(counts)
    return float((returns * weights).sum() / weights.sum())


def observation_stats(benv: Any, env_state: Any) -> wrappers.RunningMeanStd | None:
    """The running observation statistics a training env's state holds, if it normalises them."""
    while isinstance(benv, wrappers.Wrapper):
        if isinstance(benv, wrappers.NormalizeObservation):
            return env_state.obs_rms
        benv, env_state = benv.env, env_state.env_state
    return None


def greedy_return(agent: common.Agent, params: dict, rms: Any, key: torch.Tensor, episodes: int) -> float:
    """Mean undiscounted return of ``episodes`` fresh greedy episodes, observations normalised with
    the frozen training statistics ``rms`` (none: raw observations)."""
    single, env_params = envs.make(agent.config.env_id)
    env = envs.vmap(wrappers.EpisodeStatistics(wrappers.ClipAction(single)), episodes)
    obs, state = env.reset(key, env_params)
    returns = torch.zeros(episodes, dtype=torch.float64)
    finished = torch.zeros(episodes, dtype=torch.bool)
    for t in range(env_params.max_steps_in_episode + 1):
        seen = obs if rms is None else (obs - rms.mean) / torch.sqrt(rms.var + 1e-8)
        with torch.no_grad():
            action = agent.greedy_action(params, seen.to(torch.float32))
        obs, state, _, _, _, info = env.step(random.fold_in(key, t), state, action, env_params)
        ended = info["returned_episode"] & ~finished
        returns = torch.where(ended, info["returned_episode_return"].double(), returns)
        finished |= info["returned_episode"]
        if bool(finished.all()):
            break
    return float(returns.mean())


def train_seeds(agent: common.Agent, keys: torch.Tensor, deadline: float, args: argparse.Namespace) -> dict:
    """Train the seeds of ``keys`` (``[S, 2]``, vmapped) with ``funrl.agents.common.train`` in
    stretches of updates until done or ``deadline`` (``time.perf_counter()``; the first update
    always runs); per seed its results."""
    start, cpu_start = time.perf_counter(), time.process_time()
    state, run_key = common.init_state(agent, keys)
    stretch = max(1, agent.num_updates // 20)
    history: list[dict[str, torch.Tensor]] = []
    done = first_update_s = first_update_cpu_s = 0
    while done == 0 or (done < agent.num_updates and time.perf_counter() < deadline):
        todo = 1 if done == 0 else min(stretch, agent.num_updates - done)
        state, metrics = common.train(
            agent, keys, compile=args.compile, state=state, run_key=run_key, num_updates=todo
        )
        history.append(metrics)
        done += todo
        if done == 1:
            first_update_s = time.perf_counter() - start  # the compile included
            first_update_cpu_s = time.process_time() - cpu_start
        progress(f"funrl {agent.name} seeds {keys.shape[0]}", done / agent.num_updates, start)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    returns = torch.cat([h["episode_return"] for h in history])  # [U, S]
    counts = torch.cat([h["episodes"] for h in history])
    per_seed = []
    for i in range(keys.shape[0]):
        params, env_state = ftree.map(lambda x, i=i: x[i], (state.params, state.env_state))
        steps, curve = episode_curve(returns[:, i], counts[:, i], agent.steps_per_update)
        eval_key = random.fold_in(random.key(10_000), i)
        per_seed.append({
            "final": final_return(returns[:, i], counts[:, i], args.final_episodes),
            "greedy": greedy_return(
                agent, params, observation_stats(agent.env, env_state), eval_key, args.eval_episodes
            ),
            "steps_done": done * agent.steps_per_update, "steps": steps, "returns": curve, "seed": i,
        })  # fmt: skip
    return {
        "wall_s": wall, "cpu_s": cpu, "first_update_s": first_update_s,
        "first_update_cpu_s": first_update_cpu_s, "seeds": per_seed,
    }  # fmt: skip


def run_funrl(algo: str, config: Any, args: argparse.Namespace) -> dict:
    """``args.seeds`` seeds vmapped in one update step, as ``funrl train --seeds`` runs them, or
    with ``args.seeds_in_turn`` one after the other (the compiled step is shared; seeds not begun
    by the deadline are left out)."""
    torch.compiler.reset()
    agent = (sac if algo == "sac" else ppo).make_train(config, device=args.device)
    keys = common.seed_keys(0, args.seeds)
    deadline = time.perf_counter() + args.max_minutes * 60
    if not args.seeds_in_turn:
        return train_seeds(agent, keys, deadline, args)
    runs = [train_seeds(agent, keys[:1], deadline, args)]
    for i in range(1, args.seeds):
        if time.perf_counter() >= deadline:
            break
        runs.append(train_seeds(agent, keys[i : i + 1], deadline, args))
    return {
        "wall_s": sum(r["wall_s"] for r in runs),
        "cpu_s": sum(r["cpu_s"] for r in runs),
        "first_update_s": runs[0]["first_update_s"],
        "first_update_cpu_s": runs[0]["first_update_cpu_s"],
        "seeds": [{**r["seeds"][0], "seed": i} for i, r in enumerate(runs)],
    }


def progress(what: str, done: float, start: float) -> None:
    print(f"{what}: {done:.0%} after {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


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


def sb3_greedy_return(model: Any, config: Any, seed: int, episodes: int) -> float:
    """Mean return of ``episodes`` deterministic episodes on a fresh env, observations normalised with
    the frozen training statistics when the model trained on a ``VecNormalize``."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(config.env_id, n_envs=1, seed=10_000 + seed)
    trained = model.get_env()
    if isinstance(trained, VecNormalize):
        env = VecNormalize(env, training=False, norm_reward=False, clip_obs=trained.clip_obs)
        env.obs_rms = trained.obs_rms.copy()
    mean, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True)
    return float(mean)


def sb3_progress(what: str, start: float, deadline: float) -> Any:
    """Progress lines on stderr; learning stops at ``deadline`` (``time.perf_counter()``)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            total = self.locals["total_timesteps"]
            if self.num_timesteps % max(1, total // 20) == 0:
                progress(what, self.num_timesteps / total, start)
            return time.perf_counter() < deadline

    return Progress()


def run_sb3(algo: str, config: Any, seeds: int, args: argparse.Namespace) -> dict:
    """``seeds`` SB3 runs one after the other, from seed ``args.sb3_first_seed``; the wall-clock
    is their sum."""
    wall, cpu, per_seed = 0.0, 0.0, []
    deadline = time.perf_counter() + args.max_minutes * 60
    for seed in range(args.sb3_first_seed, args.sb3_first_seed + seeds):
        model = make_sb3(algo, config, seed)
        start, cpu_start = time.perf_counter(), time.process_time()
        if start >= deadline:
            break
        callback = sb3_progress(f"SB3 {algo} seed {seed}", start, deadline)
        model.learn(total_timesteps=config.total_steps, callback=callback)
        wall += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        rewards = model.get_env().env_method("get_episode_rewards")[0]
        lengths = model.get_env().env_method("get_episode_lengths")[0]
        per_seed.append({
            "final": float(np.mean(rewards[-args.final_episodes:])) if rewards else float("nan"),
            "greedy": sb3_greedy_return(model, config, seed, args.eval_episodes),
            "steps_done": model.num_timesteps,
            "steps": np.cumsum(lengths).tolist(), "returns": [float(r) for r in rewards], "seed": seed,
        })  # fmt: skip
    return {"wall_s": wall, "cpu_s": cpu, "seeds": per_seed}


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.0f} [{min(values):.0f}, {max(values):.0f}]"


def table(results: dict, steps: dict[str, int]) -> list[str]:
    rows = [
        "| agent | env | steps (reached) | contestant | seeds | final training return | greedy return "
        "| wall-clock s | CPU s | CPU s per 1k steps | vs SB3 (CPU per step) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for algo, contestants in results.items():
        # Sides may stop at different steps (--max-minutes): compare CPU seconds per step.
        per_step = {
            name: r["cpu_s"] / sum(s["steps_done"] for s in r["seeds"]) for name, r in contestants.items()
        }
        sb3 = per_step.get("SB3")
        for name, r in contestants.items():
            seeds = r["seeds"]
            versus = f"{per_step[name] / sb3:.2f}x" if sb3 else "-"
            reached = ", ".join(str(s["steps_done"]) for s in seeds)
            compile_s = f" (first update {r['first_update_s']:.0f})" if "first_update_s" in r else ""
            compile_cpu = (
                f" (first update {r['first_update_cpu_s']:.0f})" if "first_update_cpu_s" in r else ""
            )
            rows.append(
                f"| {algo} | {FULL[algo].env_id} | {steps[algo]} ({reached}) | {name} | {len(seeds)} "
                f"| {spread([s['final'] for s in seeds])} | {spread([s['greedy'] for s in seeds])} "
                f"| {r['wall_s']:.0f}{compile_s} | {r['cpu_s']:.0f}{compile_cpu} | {per_step[name] * 1000:.2f} | {versus} |"
            )
    return rows


def return_by(seed: dict, step: int, points: int = 10) -> float:
    """The mean of a seed's last ``points`` return-curve points at or before ``step``: an SB3 point
    is one episode, a funrl point the mean of the episodes that ended in one update."""
    end = bisect.bisect_right(seed["steps"], step)
    window = seed["returns"][max(0, end - points) : end]
    return statistics.mean(window) if window else math.nan


def returns_at(results: dict, steps: dict[str, int], marks: list[int]) -> list[str]:
    """One line per agent and step mark within its budget: every contestant's :func:`return_by`."""
    rows = []
    for algo, contestants in results.items():
        for mark in (m for m in marks if m <= steps[algo]):
            cells = [
                f"{name} " + ", ".join(f"{return_by(s, mark):.0f}" for s in r["seeds"])
                for name, r in contestants.items()
            ]
            rows.append(f"{algo}, training return by step {mark}: " + "; ".join(cells))
    return rows


def merged(paths: list[Path]) -> tuple[dict, dict[str, int]]:
    """The results and budgets of several ``--out`` files (one side or agent each, or some seeds
    of one side: their seeds are listed together, their seconds summed) as one run's."""
    results: dict[str, dict[str, dict]] = {}
    steps: dict[str, int] = {}
    for path in paths:
        run = json.loads(path.read_text())
        steps.update(run["steps"])
        for algo, contestants in run["results"].items():
            for name, result in contestants.items():
                earlier = results.setdefault(algo, {}).get(name)
                if earlier is None:
                    results[algo][name] = result
                    continue
                again = {r.get("seed") for r in earlier["seeds"]} & {r.get("seed") for r in result["seeds"]}
                if again - {None}:
                    raise ValueError(
                        f"--merge: {name}'s {algo} seed {sorted(again - {None})} is in two files ({path})"
                    )
                for field in ("wall_s", "cpu_s"):
                    earlier[field] += result[field]
                earlier["seeds"] = earlier["seeds"] + result["seeds"]
    return results, steps


def save_plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (algo, contestants) in zip(axes[0], results.items(), strict=True):
        for name, run in contestants.items():
            for i, seed in enumerate(run["seeds"]):
                ax.plot(seed["steps"], seed["returns"], label=name if i == 0 else None, alpha=0.7, marker=".",
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
    parser.add_argument("--contestants", nargs="+", default=["funrl", "sb3"], choices=["funrl", "sb3"])
    parser.add_argument("--seeds", type=int, default=4, help="funrl's seeds, vmapped in one run")
    parser.add_argument(
        "--seeds-in-turn", action="store_true", help="funrl's seeds one after the other, not vmapped"
    )
    parser.add_argument("--sb3-seeds", type=int, default=1, help="SB3's seeds, one run each")
    parser.add_argument(
        "--sb3-first-seed",
        type=int,
        default=0,
        help="SB3's first seed (seeds of one side in several processes)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny budget, funrl eager")
    parser.add_argument("--no-compile", action="store_true", help="funrl eager (--quick implies it)")
    parser.add_argument(
        "--final-episodes", type=int, default=10, help="training episodes averaged into the final return"
    )
    parser.add_argument("--eval-episodes", type=int, default=10, help="greedy evaluation episodes per seed")
    parser.add_argument("--sac-steps", type=int, default=FULL["sac"].total_steps, help="SAC's budget")
    parser.add_argument("--ppo-steps", type=int, default=FULL["ppo"].total_steps, help="PPO's budget")
    parser.add_argument(
        "--max-minutes", type=float, default=math.inf, help="each contestant stops training after this"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both libraries)")
    parser.add_argument(
        "--at-steps", type=int, nargs="*", default=[], help="also print the training returns by these steps"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON of the results (and a PNG beside it)")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=None,
        help="print the table of these --out files (e.g. one per side) instead of training",
    )  # fmt: skip
    args = parser.parse_args()
    if args.merge:
        results, steps = merged(args.merge)
        print("\n".join(table(results, steps) + returns_at(results, steps, args.at_steps)))
        return
    torch.set_num_threads(args.threads)
    args.compile = not (args.quick or args.no_compile)
    funrl_name = f"funrl {'compiled' if args.compile else 'eager'}"
    print(f"# {machine()}; {funrl_name}")
    results: dict[str, dict[str, dict]] = {}
    steps: dict[str, int] = {}
    for algo in args.algos:
        budget = {"sac": args.sac_steps, "ppo": args.ppo_steps}[algo]
        config = dataclasses.replace(FULL[algo], **(QUICK[algo] if args.quick else sized(algo, budget)))
        steps[algo] = config.total_steps
        results[algo] = {}
        if "funrl" in args.contestants:
            results[algo][funrl_name] = run_funrl(algo, config, args)
        if "sb3" in args.contestants:
            results[algo]["SB3"] = run_sb3(algo, config, args.sb3_seeds, args)
        if args.out:  # after every agent, so a long run leaves what it finished
            args.out.write_text(json.dumps({"machine": machine(), "steps": steps, "results": results}))
    print("\n".join(table(results, steps) + returns_at(results, steps, args.at_steps)))
    if args.out:
        save_plot(results, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
