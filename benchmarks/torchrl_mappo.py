"""The peer of ``benchmarks/marl_time_to_result.py``: TorchRL's MAPPO on ``simple_spread``.

It is TorchRL's multi-agent example (``sota-implementations/multiagent/mappo_ippo.py``, a hydra
script whose config file the torchrl wheel does not ship) rebuilt from torchrl's public modules
with funrl's MAPPO hyper-parameters instead of the example's: a ``Collector`` over a batched env,
``MultiAgentMLP`` actor and centralised critic with shared parameters, a categorical actor over
the discrete actions (discrete is funrl's simple_spread default), ``ClipPPOLoss`` with GAE,
minibatches drawn without replacement, Adam with a linear learning-rate decay and a gradient norm
clip on the actor and on the critic, as funrl's per-network optimisers clip.

Two envs (``--env``):

- ``vmas`` (the example's): VMAS's ``simple_spread``, batched in torch (``VmasEnv``). Its discrete
  agents have nine moves (each axis -1, 0 or +1, force 1) where mpe2 has five (force 5), every
  agent is paid the whole team's reward, and VMAS reports its step limit as ``terminated``.
- ``mpe2``: funrl's own task, mpe2's ``simple_spread_v3`` (the PettingZoo MPE, the rules funrl's
  ``mpe:simple_spread`` is conformance-tested against) through TorchRL's ``PettingZooWrapper``,
  the wrapper TorchRL's own MPE tutorial uses, ``--num-envs`` copies stepped one after another in
  this process (``SerialEnv``; ``--env-workers N``: a ``ParallelEnv`` of N processes instead). Same
  scale, same truncation, same hyper-parameters as funrl.

Run it with an interpreter that has torchrl, vmas and mpe2 (kept out of funrl's environment):

    python3 -m venv /tmp/trl && /tmp/trl/bin/pip install torch torchrl vmas mpe2
    OMP_NUM_THREADS=1 /tmp/trl/bin/python benchmarks/torchrl_mappo.py --total-steps 200000 [--env mpe2]

It prints one JSON line: the times, env steps per second, the team return (the sum over every
agent of an episode's rewards) of the last updates' episodes and of a greedy evaluation, a
uniformly random policy's and a hand-written one's (each agent to its own landmark) on the same
kind of evaluation episodes, and the last update's critic explained variance and policy entropy.
VMAS's simple_spread gives every agent the whole team's reward (landmark coverage counted once
per agent), so its returns are on another scale than mpe2's: compare each to its own random
policy.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.data.replay_buffers.storages import LazyTensorStorage
from torchrl.envs import (
    Compose,
    EnvBase,
    ParallelEnv,
    RewardScaling,
    RewardSum,
    SerialEnv,
    TransformedEnv,
)
from torchrl.envs.libs.vmas import VmasEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.modules.models.multiagent import MultiAgentMLP
from torchrl.objectives import ClipPPOLoss, ValueEstimators

EPISODE_STEPS = 25  # one MPE episode; VMAS's max_steps truncates there


def mpe2_env(n_agents: int) -> EnvBase:
    """One mpe2 ``simple_spread_v3`` through TorchRL's ``PettingZooWrapper`` (module level, so a
    ``ParallelEnv`` worker can build it)."""
    from mpe2 import simple_spread_v3
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    return PettingZooWrapper(
        simple_spread_v3.parallel_env(N=n_agents, max_cycles=EPISODE_STEPS, continuous_actions=False),
        group_map={"agents": [f"agent_{i}" for i in range(n_agents)]},  # VmasEnv's group name
        categorical_actions=True,
        use_mask=False,
    )


def make_env(kind: str, num_envs: int, seed: int, n_agents: int, workers: int = 1) -> EnvBase:
    """``num_envs`` simple_spread envs of ``kind`` (vmas or mpe2) as one batched TorchRL env; mpe2's
    copies in one ``SerialEnv``, or with ``workers`` > 1 in a ``ParallelEnv`` of that many
    processes, each a ``SerialEnv`` of its share."""
    if kind == "vmas":
        return VmasEnv(
            scenario="simple_spread",
            num_envs=num_envs,
            continuous_actions=False,
            max_steps=EPISODE_STEPS,
            device="cpu",
            seed=seed,
            n_agents=n_agents,
        )
    one_env = functools.partial(mpe2_env, n_agents)
    if workers == 1:
        env = SerialEnv(num_envs, one_env)
    else:
        env = ParallelEnv(workers, functools.partial(SerialEnv, num_envs // workers, one_env))
    env.set_seed(seed)
    return env


def agents_done(
    reward_key: tuple[str, str], done_keys: list, bootstrap_at_limit: bool
) -> Callable[[TensorDictBase], TensorDictBase]:
    """Copy the env-level done flags under the agents' group, shaped like their reward, where GAE
    and the loss read them (what the example's ``DoneTransform`` does). VMAS reports its step
    limit as ``terminated``; ``bootstrap_at_limit`` clears the agents' copy, so GAE bootstraps
    there as funrl's MAPPO does at mpe2's truncation."""

    def postproc(batch: TensorDictBase) -> TensorDictBase:
        reward_shape = batch.get(("next", *reward_key)).shape
        for key in done_keys:
            name = key if isinstance(key, str) else key[-1]
            flags = batch.get(("next", key)).unsqueeze(-1).expand(reward_shape)
            if bootstrap_at_limit and name == "terminated":
                flags = torch.zeros_like(flags)
            batch.set(("next", reward_key[0], name), flags)
        return batch

    return postproc


def team_returns(env: EnvBase, policy: ProbabilisticActor | None) -> torch.Tensor:
    """One episode in each of ``env``'s parallel envs; each env's sum over agents and steps."""
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        rollout = env.rollout(max_steps=EPISODE_STEPS, policy=policy, break_when_any_done=False)
    return rollout.get(("next", *env.reward_key)).sum(dim=(1, 2, 3))


def own_landmark_policy(kind: str) -> Callable[[TensorDictBase], TensorDictBase]:
    """A hand-written policy: agent ``i`` moves towards landmark ``i`` (its observation holds
    velocity, position, then each landmark's position relative to it). VMAS's nine discrete moves
    are ``3 * x + y`` with per-axis 0 stay, 1 negative, 2 positive, so it moves along both axes;
    mpe2's five are stay, -x, +x, -y, +y, so it moves along the axis with the larger offset."""

    def policy(td: TensorDictBase) -> TensorDictBase:
        obs = td.get(("agents", "observation"))
        agents = obs.shape[-2]
        to_own = torch.stack([obs[..., i, 4 + 2 * i : 6 + 2 * i] for i in range(agents)], dim=-2)
        axis = torch.where(to_own > 0.05, 2, torch.where(to_own < -0.05, 1, 0))
        if kind == "vmas":
            action = axis[..., 0] * 3 + axis[..., 1]
        else:
            along_y = to_own[..., 1].abs() > to_own[..., 0].abs()
            direction = torch.where(along_y, axis[..., 1], axis[..., 0])
            action = torch.where(direction == 0, 0, direction + 2 * along_y.long())
        td.set(("agents", "action"), action)
        return td

    return policy


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--total-steps", type=int, default=200_000, help="env steps (each moves every agent)")
    parser.add_argument(
        "--env", choices=("vmas", "mpe2"), default="vmas", help="whose simple_spread (see above)"
    )
    parser.add_argument(
        "--env-workers",
        type=int,
        default=1,
        help="mpe2 only: step the copies in a ParallelEnv of this many processes (default: SerialEnv)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--update-epochs", type=int, default=5)
    parser.add_argument("--num-minibatches", type=int, default=2)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument(
        "--reward-scale",
        type=float,
        default=1.0,
        help="multiply the reward the learner sees (VMAS's simple_spread pays about 6x mpe2's); "
        "returns are reported unscaled",
    )
    parser.add_argument(
        "--no-value-clip", action="store_true", help="an unclipped critic loss (funrl clips it at --clip-eps)"
    )
    parser.add_argument(
        "--bootstrap-at-limit",
        action="store_true",
        help="GAE bootstraps at VMAS's step limit (not terminal; mpe2 reports it as truncated)",
    )
    parser.add_argument("--eval-episodes", type=int, default=32)
    args = parser.parse_args()
    if args.env_workers > 1 and (args.env != "mpe2" or args.num_envs % args.env_workers):
        parser.error(
            f"--env-workers: only for --env mpe2, dividing --num-envs={args.num_envs}; got {args.env_workers}"
        )
    if args.bootstrap_at_limit and args.env != "vmas":
        parser.error(
            "--bootstrap-at-limit: only for --env vmas (mpe2 already reports its limit as truncated)"
        )

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    torch.manual_seed(args.seed)
    frames_per_batch = args.num_envs * EPISODE_STEPS
    num_updates = args.total_steps // frames_per_batch
    env = make_env(args.env, args.num_envs, args.seed, args.agents, args.env_workers)
    env = TransformedEnv(
        env,
        Compose(
            RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")]),
            RewardScaling(loc=0.0, scale=args.reward_scale, in_keys=[env.reward_key]),
        ),
    )
    obs_dim = env.observation_spec["agents", "observation"].shape[-1]
    num_actions = env.full_action_spec_unbatched[env.action_key].space.n

    def mlp(outputs: int, centralised: bool) -> MultiAgentMLP:
        return MultiAgentMLP(
            n_agent_inputs=obs_dim,
            n_agent_outputs=outputs,
            n_agents=args.agents,
            centralised=centralised,
            share_params=True,
            depth=2,
            num_cells=args.hidden,
            activation_class=nn.Tanh,
        )

    policy = ProbabilisticActor(
        TensorDictModule(
            mlp(num_actions, False), in_keys=[("agents", "observation")], out_keys=[("agents", "logits")]
        ),
        spec=env.full_action_spec_unbatched,
        in_keys={"logits": ("agents", "logits")},
        out_keys=[env.action_key],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(1, True), in_keys=[("agents", "observation")])

    collector = Collector(
        env,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=frames_per_batch * num_updates,
        # PettingZoo's wrapper already gives every agent its done flags; VMAS's are env-level.
        postproc=agents_done(env.reward_key, env.done_keys, args.bootstrap_at_limit)
        if args.env == "vmas"
        else None,
        auto_register_policy_transforms=False,  # a feed-forward policy needs no InitTracker
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=frames_per_batch // args.num_minibatches,
    )
    # funrl's critic loss is 0.5 * squared error (clipped), torchrl's "l2" the squared error.
    loss_module = ClipPPOLoss(
        actor_network=policy,
        critic_network=critic,
        clip_epsilon=args.clip_eps,
        entropy_coeff=args.ent_coef,
        critic_coeff=args.vf_coef / 2,
        loss_critic_type="l2",
        clip_value=None if args.no_value_clip else args.clip_eps,
        normalize_advantage=True,
    )
    loss_module.set_keys(
        reward=env.reward_key,
        action=env.action_key,
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=args.gamma, lmbda=args.gae_lambda)
    optimizer = torch.optim.Adam(loss_module.parameters(), args.lr, eps=1e-5)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - i / num_updates)
    t1 = time.perf_counter()

    episode_returns = []  # per update: the mean team return of the episodes that ended
    for batch in collector:
        with torch.no_grad():
            loss_module.value_estimator(
                batch,
                params=loss_module.critic_network_params,
                target_params=loss_module.target_critic_network_params,
            )
        buffer.extend(batch.reshape(-1))
        for _ in range(args.update_epochs * args.num_minibatches):
            losses = loss_module(buffer.sample())
            (losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]).backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
            torch.nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
        explained_variance = float(losses["explained_variance"].mean())
        schedule.step()
        collector.update_policy_weights_()
        done = batch.get(("next", "done")).squeeze(-1)
        ended = batch.get(("next", "agents", "episode_reward"))[done]  # [episodes, agents, 1]
        episode_returns.append(float(ended.sum(dim=(1, 2)).mean()))
    collector.shutdown()
    t2 = time.perf_counter()
    cpu2 = time.process_time()

    def eval_env() -> EnvBase:
        return make_env(args.env, args.eval_episodes, args.seed + 1, args.agents)

    greedy = team_returns(eval_env(), policy)
    uniform = team_returns(eval_env(), None)
    own_landmark = team_returns(eval_env(), own_landmark_policy(args.env))
    print(
        json.dumps(
            {
                "peer": f"torchrl MAPPO on {args.env} simple_spread",
                "torch": torch.__version__,
                "setup_s": t1 - t0,
                "train_s": t2 - t1,
                "total_s": t2 - t0,
                "process_cpu_s": cpu2 - cpu0,
                "env_steps_per_s": frames_per_batch * num_updates / (t2 - t1),
                "updates": num_updates,
                "last_10_updates_return": sum(episode_returns[-10:]) / len(episode_returns[-10:]),
                "first_10_updates_return": sum(episode_returns[:10]) / len(episode_returns[:10]),
                "return_every_25_updates": episode_returns[::25],
                "last_update_critic_explained_variance": explained_variance,
                "last_update_policy_entropy": float(losses["entropy"]),
                "greedy_return": float(greedy.mean()),
                "random_policy_return": float(uniform.mean()),
                "own_landmark_policy_return": float(own_landmark.mean()),
            }
        )
    )


if __name__ == "__main__":
    main()
