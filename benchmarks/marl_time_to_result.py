"""MAPPO on simple_spread, time to result: funrl against TorchRL's MAPPO, same budget.

Each side runs in its own process, one after another, with the same env-step budget and the same
hyper-parameters (funrl's ``MAPPOConfig`` defaults, handed to the peer script's options): funrl
through ``benchmarks/marl_agents.py`` (one seed, compiled; with ``--warm`` compiled again, loading
the step the first run saved; with ``--eager``, eager too), and
TorchRL through ``benchmarks/torchrl_mappo.py`` under ``--peer-python``, an interpreter with
torchrl, vmas and mpe2 installed (keep them out of funrl's environment), on ``--peer-env``: VMAS's
simple_spread (TorchRL's example) or mpe2's through TorchRL's PettingZoo wrapper (funrl's task
itself: same rules, reward scale and truncation). For each side: wall-clock
seconds of the whole process (imports, building, compiling, training, evaluation), CPU seconds
(the process and the children it waited for, e.g. compile workers), and the team return (the sum
over agents of an episode's rewards) of the last 10 updates and of a greedy evaluation against a
uniformly random policy on the same env. VMAS's simple_spread scores on another scale (it hands
every agent the whole team's reward), so compare each to its own random policy.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/marl_time_to_result.py --total-steps 100000 \\
        --peer-python /tmp/trl/bin/python [--peer-env vmas mpe2] [--eager] [--warm] [--peer-reward-scale 0.1667]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from time_to_result import timed

from funrl.agents import mappo

HERE = Path(__file__).resolve().parent


def timed_result(command: list[str]) -> dict:
    """Run ``command``; its last stdout line (JSON) with the wall and CPU seconds it took."""
    try:
        stdout, wall, cpu = timed(command)
    except RuntimeError as failure:
        return {"not_run": (str(failure).strip().splitlines() or ["no output"])[-1]}
    return {**json.loads(stdout.strip().splitlines()[-1]), "wall_s": wall, "cpu_s": cpu}


def peer_options(config: mappo.MAPPOConfig) -> list[str]:
    """funrl's hyper-parameters as the peer script's options."""
    (hidden, *rest) = config.hidden_sizes
    if (
        rest != [hidden]
        or config.activation != "tanh"
        or not (config.share_params and config.centralised_critic)
    ):
        raise ValueError(f"config: the peer mirrors two equal tanh layers and shared MAPPO, got {config}")
    values = {
        "num-envs": config.num_envs,
        "update-epochs": config.update_epochs,
        "num-minibatches": config.num_minibatches,
        "gamma": config.gamma,
        "gae-lambda": config.gae_lambda,
        "lr": config.learning_rate,
        "clip-eps": config.clip_eps,
        "ent-coef": config.ent_coef,
        "vf-coef": config.vf_coef,
        "max-grad-norm": config.max_grad_norm,
        "hidden": hidden,
    }
    return [part for name, value in values.items() for part in (f"--{name}", str(value))]


def row(name: str, result: dict) -> str:
    if "not_run" in result:
        return f"| {name} | not run: {result['not_run']} |||||"
    last = result.get("last_10_updates_return", result.get("last_10_updates_return_per_seed"))
    if isinstance(last, dict):  # funrl's: per metric, per seed
        last = last["episode_return"][0]
    greedy = result.get("greedy_return", (result.get("greedy_return_per_seed") or [None])[0])
    uniform = result.get("random_policy_return")
    if uniform is None:
        uniform = sum(result["random_policy_team_returns"].values())
    return f"| {name} | {result['wall_s']:.0f} | {result['cpu_s']:.0f} | {last:.1f} | {greedy:.1f} | {uniform:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--total-steps", type=int, default=100_000, help="env steps, each side")
    parser.add_argument(
        "--peer-python", help="an interpreter with torchrl, vmas and mpe2; no peer row without it"
    )
    parser.add_argument(
        "--peer-env",
        nargs="+",
        choices=("vmas", "mpe2"),
        default=["vmas"],
        help="the peer's simple_spread: VMAS's (TorchRL's example) and/or mpe2's (funrl's task)",
    )
    parser.add_argument("--eager", action="store_true", help="also time funrl eager")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also time funrl compiled again, after the first run saved its step",
    )
    parser.add_argument(
        "--peer-reward-scale",
        type=float,
        default=1.0,
        help="the peer's --reward-scale on VMAS (its simple_spread pays about 6x mpe2's per agent)",
    )
    args = parser.parse_args()
    config = mappo.MAPPOConfig(total_steps=args.total_steps)
    funrl_side = [sys.executable, str(HERE / "marl_agents.py"), "--seeds", "1"]
    funrl_side += ["--total-steps", str(args.total_steps), "--lr", str(config.learning_rate)]
    results = {"funrl MAPPO, compiled (mpe2 simple_spread)": timed_result(funrl_side)}
    if args.warm:
        results["funrl MAPPO, compiled, warm (mpe2 simple_spread)"] = timed_result(funrl_side)
    if args.eager:
        results["funrl MAPPO, eager (mpe2 simple_spread)"] = timed_result([*funrl_side, "--no-compile"])
    for env in args.peer_env:
        name = f"TorchRL MAPPO ({'VMAS' if env == 'vmas' else 'mpe2'} simple_spread)"
        if not args.peer_python:
            results[name] = {"not_run": "no --peer-python given"}
            continue
        peer = [args.peer_python, str(HERE / "torchrl_mappo.py"), "--total-steps", str(args.total_steps)]
        peer += ["--env", env, "--reward-scale", str(args.peer_reward_scale if env == "vmas" else 1.0)]
        results[name] = timed_result([*peer, *peer_options(config)])
    for name, result in results.items():
        print(json.dumps({"side": name, **result}))
    print(f"\n{args.total_steps} env steps each; team return = sum over agents of an episode's rewards")
    print("| run | wall s | CPU s | return, last 10 updates | greedy return | random policy |")
    print("|---|---|---|---|---|---|")
    for name, result in results.items():
        print(row(name, result))


if __name__ == "__main__":
    main()
