"""MAPPO (or IPPO) on an MPE scenario: training time and the return it reaches.

It trains ``--seeds`` seeds at once (vmapped) for ``--total-steps`` env steps per seed and
reports the whole-process times (building the agent, the first update with its compile, the
rest of training), env steps per second and the return (the sum over every agent) of the last
updates and of a greedy evaluation, with each team's share, against a uniformly random policy's
on the same evaluation keys. ``--env`` takes any multi-agent id (``mpe:simple_tag``,
``mpe:simple_spread_continuous``, ...). The comparison with TorchRL's MAPPO on VMAS at the same
budget is ``benchmarks/marl_time_to_result.py``, which runs this script as funrl's side.

    python benchmarks/marl_agents.py --total-steps 1000000 --seeds 4 --algo mappo [--env mpe:simple_tag] [--no-compile]

``--set name=value ...`` overrides other config fields (``--set num_envs=128 update_epochs=10``,
``--set 'env_kwargs={"landmark_range": 0.8}'``).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from funrl import random, tree
from funrl.agents import common, mappo, run


def mean_team_returns(agent: common.Agent, policy, key: torch.Tensor, episodes: int) -> dict[str, float]:  # noqa: ANN001
    """Each team's mean return over ``episodes`` fresh envs from ``key`` under ``policy``."""
    return {team: float(r.mean()) for team, r in mappo.evaluate_teams(agent, policy, key, episodes).items()}


def funrl_run(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    config_type = mappo.MAPPOConfig if args.algo == "mappo" else mappo.IPPOConfig
    config = config_type(
        env_id=args.env,
        total_steps=args.total_steps,
        learning_rate=args.lr,
        **run.config_overrides(config_type, args.set),
    )
    agent = mappo.make_train(config)
    keys = common.seed_keys(0, args.seeds)
    state, run_key = common.init_state(agent, keys)
    t1 = time.perf_counter()
    state, first = common.train(
        agent, keys, compile=not args.no_compile, state=state, run_key=run_key, num_updates=1
    )
    t2 = time.perf_counter()
    state, rest = common.train(agent, keys, compile=not args.no_compile, state=state, run_key=run_key)
    t3 = time.perf_counter()
    last = {name: rest[name][-10:].nanmean(0).tolist() for name in rest if name.startswith("episode_return")}
    key = random.key(1_000_003)
    params = tree.unstack(state.params)
    greedy = [float(common.evaluate(agent, p, key, args.eval_episodes).mean()) for p in params]
    greedy_teams = [
        mean_team_returns(agent, mappo.greedy_policy(agent, p), key, args.eval_episodes) for p in params
    ]
    return {
        "peer": f"funrl {args.algo} on {args.env}" + (" (eager)" if args.no_compile else ""),
        "set": args.set,
        "setup_s": t1 - t0,
        "first_update_s": t2 - t1,
        "train_s": t3 - t2,
        "total_s": t3 - t0,
        "env_steps_per_s": args.seeds * args.total_steps / (t3 - t1),
        "last_10_updates_return_per_seed": last,
        "greedy_return_per_seed": greedy,
        "greedy_team_returns_per_seed": greedy_teams,
        "random_policy_team_returns": mean_team_returns(
            agent, mappo.uniform_policy(agent), key, args.eval_episodes
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=("mappo", "ippo"), default="mappo")
    parser.add_argument("--env", default="mpe:simple_spread", help="a multi-agent id (funrl.envs.marl)")
    parser.add_argument("--total-steps", type=int, default=1_000_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--lr", type=float, default=mappo.MAPPOConfig.learning_rate)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other config fields")
    args = parser.parse_args()
    print(json.dumps(funrl_run(args)))


if __name__ == "__main__":
    main()
