"""IPPO and MAPPO: PPO for teams of agents, with the agents as one more ``vmap`` axis.

Both train one policy per agent on that agent's own observation and act independently
(decentralised execution); they differ in the critic:

- **IPPO** (independent PPO, de Witt et al. 2020, "Is Independent Learning All You Need in the
  StarCraft Multi-Agent Challenge?"): each agent's critic sees its own observation;
- **MAPPO** (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
  Games"): a centralised critic sees the global state (with a one-hot id of the agent within its
  team, the paper's agent-specific input) during training only.

**Teams.** Every team of the env (``funrl.envs.marl``: agents that share spaces and a role, such
as simple_tag's ``adversary`` and ``agent``) gets its own actor and critic, and every team learns
in the same update: one rollout of all agents, one GAE over every agent's reward, then each
minibatch step takes the gradient of the sum of the teams' PPO losses (their params are
disjoint, so each team's gradient is its own loss's). Competing teams are simply independent
learners. Each team's actor and critic has an optimiser of its own (Adam under a gradient-norm
clip, as JaxMARL's MAPPO clips actor and critic apart), so the clip never mixes teams.

**Parameter sharing** is a vmap option, not a second implementation. Every network call is
``torch.func.vmap`` over the agent axis of its team's data; ``share_params=True`` maps it with
``in_dims=None`` on the params (one set of weights per team, JaxMARL's baselines and the MAPPO
paper's default), ``share_params=False`` with ``in_dims=0`` on a params pytree stacked over the
team's agents (leaves ``[A_team, ...]``: each agent its own actor and critic).

**Actions.** Discrete actions get a categorical actor (logits); continuous ones (the MPE
``*_continuous`` variants) a diagonal Gaussian with a state-independent log-std, as PPO's
continuous actor (CleanRL's ``ppo_continuous_action.py``); the action space decides. Sampled
actions are not squashed: the env clips them to its bounds (MPE: ``[0, 1]``), and the log-prob is
the unclipped sample's, as in CleanRL.

Shapes (``N`` envs, ``A`` agents of all teams, ``T`` steps): the agent trains on
:class:`TeamsEnvironment`, which packs every team's observations into one vector ``[N, O]`` and
every team's actions into one ``[N, P]`` (:class:`Team` unpacks a team's ``[N, A_team, ...]``);
rewards, values, log-probs and flags are ``[N, A]`` in agent order, a rollout ``[T, N, ...]``.
Advantages are per agent (GAE on each agent's own reward), normalised over each team's samples of
the minibatch; minibatches are drawn from the ``T * N`` env steps, each with every agent's
sample, so that unshared params meet their own agent's data on the agent axis (a minibatch holds
as many samples as JaxMARL's).

**Metrics.** ``episode_return`` is the sum over every agent of its undiscounted return, per
finished episode (JaxMARL's ``MPELogWrapper`` logs the same number, as the mean over agents times
their count); for one team it is the team return. ``episode_return/<team>`` is each team's share
(``episode_return/adversary`` and ``episode_return/agent`` on simple_tag). Loss metrics are means
over the teams. An env step moves every agent once: ``total_steps`` counts env steps.

Defaults follow JaxMARL's ``baselines/IPPO/config/ippo_ff_mpe.yaml`` (16 envs, γ 0.99, λ 0.95,
clip 0.2, entropy 0.01, value 0.5, gradient clip 0.5, tanh 64x64 MLPs, orthogonal init, linear
learning-rate annealing) with the MAPPO paper's rollouts of one 25-step MPE episode, more epochs
on each (5 of 2 minibatches) and a larger learning rate (2e-3), which learn faster per sample.
The float hyper-parameters (:data:`SWEEPABLE`) ride in the train state as in
:mod:`funrl.agents.ppo`: configs differing only in them share one compiled step.

    agent = make_train(MAPPOConfig(env_id="mpe:simple_spread", total_steps=200_000))
    state, metrics = agent(funrl.agents.common.seed_keys(0, 4))   # 4 seeds, vmapped
    funrl train mappo --env mpe:simple_spread --seeds 4
    funrl train ippo --env mpe:simple_tag_continuous             # two teams, Gaussian actors
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from funrl import envs, nets, optim, random
from funrl import losses as L
from funrl import tree as ftree
from funrl.agents.common import (
    Agent,
    episode_metrics,
    float32_tensors,
    static_key,
    sweepable_values,
    update_keys,
    with_num_envs,
)
from funrl.agents.registry import register_agent
from funrl.control import scan
from funrl.envs import marl
from funrl.envs.core import Box, Discrete, Environment, Space, check_action_static
from funrl.envs.marl import MultiAgentEnv
from funrl.envs.marl.registry import PREFIX
from funrl.nets import distributions
from funrl.nets.initializers import orthogonal

__all__ = [
    "SWEEPABLE",
    "IPPOConfig",
    "MAPPOConfig",
    "MAPPOHyperParams",
    "MAPPOTrainState",
    "Team",
    "TeamsEnvironment",
    "evaluate_teams",
    "greedy_policy",
    "learning_rate",
    "make_teams_env",
    "make_train",
    "uniform_policy",
]


@dataclasses.dataclass(frozen=True)
class MAPPOConfig:
    """Static MAPPO configuration (compile specialises on it); ``centralised_critic=False`` is IPPO."""

    env_id: str = "mpe:simple_spread"
    total_steps: int = 2_000_000  # env steps; each moves every agent once
    num_envs: int = 16
    num_steps: int = 25  # one MPE episode
    update_epochs: int = 5
    num_minibatches: int = 2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 2e-3
    anneal_lr: bool = True
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    share_params: bool = True
    centralised_critic: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    env_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for name in ("total_steps", "num_envs", "num_steps", "update_epochs", "num_minibatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        if self.steps_per_update % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: expected a divisor of num_envs * num_steps = {self.steps_per_update}, "
                f"got {self.num_minibatches}"
            )
        if self.total_steps < self.steps_per_update:
            raise ValueError(
                f"total_steps: expected at least num_envs * num_steps = {self.steps_per_update}, "
                f"got {self.total_steps}"
            )
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}: expected a value in [0, 1], got {getattr(self, name)}")
        for name in ("learning_rate", "clip_eps", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a value > 0, got {getattr(self, name)}")
        for name in ("share_params", "centralised_critic", "anneal_lr", "normalize_advantages"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.steps_per_update

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps


@dataclasses.dataclass(frozen=True)
class IPPOConfig(MAPPOConfig):
    """IPPO: :class:`MAPPOConfig` whose critics see each agent's own observation."""

    centralised_critic: bool = False


@dataclasses.dataclass(frozen=True)
class Team:
    """Where one team sits in :class:`TeamsEnvironment`'s packed tensors.

    ``agents`` are its rows of every per-agent vector (``[A]``, agent order), ``obs`` and
    ``actions`` its columns of the packed observation and action; ``obs_dim`` and
    ``action_space`` are ONE agent's.
    """

    name: str
    num_agents: int
    obs_dim: int
    action_space: Space
    agents: slice
    obs: slice
    actions: slice

    def split_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """``[..., A_team, obs_dim]``: the team's observations in a packed one ``[..., O]``."""
        return obs[..., self.obs].unflatten(-1, (self.num_agents, self.obs_dim))

    def split_actions(self, action: torch.Tensor) -> torch.Tensor:
        """``[..., A_team, *action_shape]``: the team's actions in a packed one ``[..., P]``."""
        return action[..., self.actions].unflatten(-1, (self.num_agents, *self.action_space.shape))


class TeamsState(NamedTuple):
    """The multi-agent env's state and every agent's episode returns (``[A]``, agent order)."""

    env_state: Any
    episode_return: torch.Tensor  # each agent's return of the running episode so far
    episode_length: torch.Tensor
    returned_episode_return: torch.Tensor  # each agent's return of the last finished episode
    returned_episode_length: torch.Tensor


class TeamsEnvironment(Environment):
    """Every team of a :class:`funrl.envs.marl.MultiAgentEnv` behind the single-agent contract.

    Teams differ in observation and action shapes, so their tensors are packed into one:

    - the observation ``[O]`` is every team's ``[A_team, D_team]`` flattened and concatenated in
      team order (which is agent order); the action ``[P]`` likewise (discrete: one int64 per
      agent; continuous: ``D_team`` floats per agent); :attr:`teams` says where each team sits
      and unpacks (:meth:`Team.split_obs`, :meth:`Team.split_actions`);
    - rewards, ``terminated`` and ``truncated`` are ``[A]``, one per agent in agent order.

    ``info["final_obs"]`` is the packed pre-reset observation; ``info["global_state"]`` the
    global state the actions were taken in and ``info["final_global_state"]`` the one they led
    to (before any reset), for a centralised critic. The episode statistics have the meaning of
    :class:`funrl.envs.wrappers.EpisodeStatistics` (``returned_episode``,
    ``returned_episode_return``, ``returned_episode_length``): an episode ends when every agent
    is done and its return is the sum of every agent's rewards (JaxMARL's ``MPELogWrapper``
    logs the same number); ``returned_agent_returns`` holds each agent's share ``[A]``. So
    ``funrl.envs.vmap``, :func:`funrl.envs.rollout` and :func:`funrl.agents.common.evaluate`
    take it as they take a single-agent env. Auto-reset is the multi-agent env's own.

    Every team acts with discrete actions or every team with continuous ones (a ValueError
    says so otherwise); observations are flat vectors.
    """

    def __init__(self, env: MultiAgentEnv, env_id: str = "env"):
        if not isinstance(env, MultiAgentEnv):
            raise TypeError(
                f"env: expected a multi-agent env (funrl.envs.marl.MultiAgentEnv), got {type(env).__name__}"
            )
        self.env = env
        params = env.default_params
        obs_spaces, action_spaces = env.observation_spaces(params), env.action_spaces(params)
        kinds = {name: type(space).__name__ for name, space in action_spaces.items()}
        first_space = next(iter(action_spaces.values()))
        if len(set(kinds.values())) != 1 or not isinstance(first_space, (Discrete, Box)):
            raise ValueError(
                f"env_id: expected every team of {env_id!r} to act with Discrete or every team with Box "
                f"actions, got {kinds}"
            )
        self.continuous = isinstance(first_space, Box)
        teams, agent, obs, act = [], 0, 0, 0
        for name, ids in env.teams.items():
            obs_space, action_space = obs_spaces[name], action_spaces[name]
            if len(obs_space.shape) != 1:
                raise ValueError(
                    f"env_id: expected flat observations [D] for team {name!r} of {env_id!r}, "
                    f"got shape {list(obs_space.shape)}"
                )
            num, obs_dim, action_size = len(ids), obs_space.shape[0], math.prod(action_space.shape)
            teams.append(
                Team(
                    name=name,
                    num_agents=num,
                    obs_dim=obs_dim,
                    action_space=action_space,
                    agents=slice(agent, agent + num),
                    obs=slice(obs, obs + num * obs_dim),
                    actions=slice(act, act + num * action_size),
                )
            )
            agent, obs, act = agent + num, obs + num * obs_dim, act + num * action_size
        self.teams: tuple[Team, ...] = tuple(teams)
        self.num_agents = agent
        self._obs_size = obs
        # Built once, here: the bounds are read on the host, which a compiled step cannot do.
        low, high = [], []
        for team in self.teams:
            space = team.action_space
            if self.continuous:
                low += space.low_tensor().flatten().tolist() * team.num_agents
                high += space.high_tensor().flatten().tolist() * team.num_agents
            else:
                low += [0] * team.num_agents
                high += [space.n - 1] * team.num_agents
        dtype = torch.float32 if self.continuous else torch.int64
        self._action_space = Box(tuple(low), tuple(high), (act,), dtype)

    @property
    def name(self) -> str:
        return f"TeamsEnvironment({self.env.name})"

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def observation_space(self, params: Any = None) -> Space:
        """The packed observation: every agent's, flattened in agent order."""
        return Box(-math.inf, math.inf, (self._obs_size,), torch.float32)

    def action_space(self, params: Any = None) -> Space:
        """The packed action: every agent's, flattened in agent order, with each agent's bounds."""
        return self._action_space

    def global_state_space(self, params: Any = None) -> Space:
        return self.env.global_state_space(params)

    def pack_obs(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[..., O]`` from the teams' ``[..., A_team, D_team]``."""
        return torch.cat([obs[team.name].flatten(-2) for team in self.teams], -1)

    def pack_actions(self, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[..., P]`` from the teams' ``[..., A_team, *action_shape]``."""
        return torch.cat([actions[t.name].flatten(-1 - len(t.action_space.shape)) for t in self.teams], -1)

    def pack_agents(self, values: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[..., A]`` in agent order from the teams' ``[..., A_team]``."""
        return torch.cat([values[team.name] for team in self.teams], -1)

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, TeamsState]:
        obs, env_state = self.env.reset_env(key, params)
        returns = torch.zeros(self.num_agents, dtype=torch.float32, device=key.device)
        length = torch.zeros((), dtype=torch.int64, device=key.device)
        return self.pack_obs(obs), TeamsState(env_state, returns, length, returns, length)

    @property
    def batch_polymorphic(self) -> bool:  # type: ignore[override]
        """The multi-agent env's: the packing and the statistics work on any leading batch."""
        return self.env.batch_polymorphic

    def draw_step(self, key: torch.Tensor, params: Any = None) -> Any:
        """The multi-agent env's ``draw_step``: its step key and auto-reset."""
        params = self.default_params if params is None else params
        return self.env.draw_step(key, params)

    def step_with(self, draw: Any, state: TeamsState, action: torch.Tensor, params: Any = None) -> Any:
        params = self.default_params if params is None else params
        actions = self._unpack_actions(action, state.episode_length.shape)
        step = self.env.step_with(draw, state.env_state, actions, params)
        return self._finish(state, params, *step)

    def step_env(self, key: torch.Tensor, state: TeamsState, action: torch.Tensor, params: Any) -> Any:
        obs, env_state, rewards, terminated, truncated, info = self.env.step_env(
            key, state.env_state, self._unpack_actions(action, state.episode_length.shape), params
        )
        info = {**info, "final_obs": obs, "final_global_state": self.env.global_state(env_state, params)}
        return self._finish(state, params, obs, env_state, rewards, terminated, truncated, info)

    def _unpack_actions(self, action: torch.Tensor, batch_shape: torch.Size) -> dict[str, torch.Tensor]:
        check_action_static(action, self.action_space(), "action", batch_shape)
        return {team.name: team.split_actions(action) for team in self.teams}

    def _finish(self, state, params, obs, env_state, rewards, terminated, truncated, info):  # noqa: ANN001, ANN202
        reward = self.pack_agents(rewards)
        terminated, truncated = self.pack_agents(terminated), self.pack_agents(truncated)
        done = (terminated | truncated).all(-1)
        per_agent_done = done.unsqueeze(-1)
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        new_state = TeamsState(
            env_state=env_state,
            episode_return=torch.where(per_agent_done, 0.0, episode_return),
            episode_length=torch.where(done, 0, episode_length),
            returned_episode_return=torch.where(
                per_agent_done, episode_return, state.returned_episode_return
            ),
            returned_episode_length=torch.where(done, episode_length, state.returned_episode_length),
        )
        info = dict(info)
        info.update(
            final_obs=self.pack_obs(info["final_obs"]),
            global_state=self.env.global_state(state.env_state, params),
            returned_episode=done,
            returned_episode_return=new_state.returned_episode_return.sum(-1),
            returned_agent_returns=new_state.returned_episode_return,
            returned_episode_length=new_state.returned_episode_length,
        )
        return self.pack_obs(obs), new_state, reward, terminated, truncated, info


def make_teams_env(
    env_id: str, env_kwargs: dict[str, Any], env: Any | None = None
) -> tuple[TeamsEnvironment, Any]:
    """``(TeamsEnvironment, env_params)`` for a multi-agent id or a given multi-agent env.

    A clear ValueError names ``env_id`` when it is not a multi-agent id (a single-agent id such
    as ``CartPole-v1`` included), TypeError names ``env`` when that is not a multi-agent env.
    """
    if env is None:
        if env_id.removeprefix(PREFIX) not in marl.registry():
            raise ValueError(
                f"env_id: IPPO/MAPPO train multi-agent envs, one of {marl.registry()} "
                f"(also as 'mpe:<id>'), got {env_id!r}"
            )
        env, params = marl.make(env_id, **env_kwargs)
    else:
        params = env.default_params if isinstance(env, MultiAgentEnv) else None
    return TeamsEnvironment(env, env_id), params


class MAPPOHyperParams(NamedTuple):
    """The loss coefficients, γ and λ: float32 scalar tensors (the learning rate is in the optimiser state)."""

    ent_coef: torch.Tensor
    clip_eps: torch.Tensor
    vf_coef: torch.Tensor
    gamma: torch.Tensor
    gae_lambda: torch.Tensor


SWEEPABLE = ("learning_rate", *MAPPOHyperParams._fields)
"""The config fields that ride in the train state: the names ``init(key, **hparams)`` takes."""


class MAPPOTrainState(NamedTuple):
    params: dict[str, dict[str, dict[str, torch.Tensor]]]  # team -> network; unshared leaves [A_team, ...]
    opt_state: dict[str, dict[str, Any]]  # team -> network -> (clip, inject_hyperparams(adam)[, annealing])
    env_state: Any
    obs: torch.Tensor  # [N, O]: every agent's observation, packed (TeamsEnvironment)
    update_count: torch.Tensor
    hparams: MAPPOHyperParams


def learning_rate(state: MAPPOTrainState) -> torch.Tensor:
    """The base learning rate a train state holds (before annealing), a float32 scalar tensor."""
    first_team = next(iter(state.opt_state.values()))
    return first_team["actor"][1].hyperparams["learning_rate"]


def make_train(config: MAPPOConfig, env: MultiAgentEnv | None = None, device: str = "cpu") -> Agent:
    """Build IPPO or MAPPO for ``config``: an :class:`~funrl.agents.common.Agent`.

    Args:
        config: the static configuration (:class:`MAPPOConfig`, or :class:`IPPOConfig`).
        env: a multi-agent env (``funrl.envs.marl.make(...)[0]``) to train on instead of
            ``config.env_id``; every team acts with discrete actions or every team with
            continuous ones.
        device: where params and env state live.

    Raises:
        ValueError: ``env_id`` is not a multi-agent id, or its teams mix discrete and
            continuous actions.
    """
    if not isinstance(config, MAPPOConfig):
        raise TypeError(f"config: expected a MAPPOConfig or IPPOConfig, got {type(config).__name__}")
    device = torch.device(device)
    name = "mappo" if config.centralised_critic else "ippo"
    teams_env, env_params = make_teams_env(config.env_id, dict(config.env_kwargs), env)
    teams = teams_env.teams
    benv = envs.vmap(teams_env, config.num_envs)
    continuous = teams_env.continuous
    dist = distributions.normal if continuous else distributions.categorical
    state_dim = math.prod(teams_env.global_state_space(env_params).shape)

    def actor_module(team: Team) -> torch.nn.Module:
        """Logits over a discrete action, or a Gaussian with a state-independent log-std (PPO's)."""
        space = team.action_space
        if continuous:
            return nets.GaussianActor(team.obs_dim, space.shape[0], config.hidden_sizes, config.activation)
        return nets.DiscreteActor(team.obs_dim, space.n, config.hidden_sizes, config.activation)

    def critic_in_dim(team: Team) -> int:
        return state_dim + team.num_agents if config.centralised_critic else team.obs_dim

    actors = {team.name: actor_module(team) for team in teams}
    critics = {
        team.name: nets.MLP(critic_in_dim(team), config.hidden_sizes, 1, config.activation) for team in teams
    }
    agent_ids = {team.name: torch.eye(team.num_agents, device=device) for team in teams}

    # Shared: one params set for every agent of a team (vmap in_dims=None); independent: leaves [A_team, ...].
    params_dim = None if config.share_params else 0
    num_updates = config.num_updates
    batch_size = config.steps_per_update  # env steps, each with every agent's sample
    minibatch_size = batch_size // config.num_minibatches
    gradient_steps = config.update_epochs * config.num_minibatches

    def per_agent(module: torch.nn.Module):  # noqa: ANN202
        """``module`` applied to each agent's row of the agent axis ``-2`` of its input; its
        outputs carry the agent axis at ``-2`` too."""
        # Mapped to axis 0 and moved: torch 2.13's vmap crashes putting an output that does not
        # depend on the mapped input (a shared log-std's scale) at a negative out_dims.
        mapped = torch.func.vmap(
            lambda params, x: nets.apply(module, params, x), in_dims=(params_dim, -2), out_dims=0
        )
        return lambda params, x: ftree.map(lambda out: out.movedim(0, -2), mapped(params, x))

    policies = {team.name: per_agent(actors[team.name]) for team in teams}
    value_fns = {team.name: per_agent(critics[team.name]) for team in teams}

    def event_size(team: Team) -> int:
        """The last dim of the team's distribution: classes, or action dims."""
        return team.action_space.shape[0] if continuous else team.action_space.n

    def policy(params: dict[str, Any], team: Team, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The team's distribution params, each ``[..., A_team, ...]``, from the packed ``obs [..., O]``."""
        out = policies[team.name](params[team.name]["actor"], team.split_obs(obs))
        return out if continuous else (out,)

    def critic_input(team: Team, obs: torch.Tensor, global_state: torch.Tensor) -> torch.Tensor:
        """MAPPO: the global state ``[..., S]`` and a one-hot id within the team, per agent of the
        team; IPPO: each agent's own observation."""
        if not config.centralised_critic:
            return team.split_obs(obs)
        batch = global_state.shape[:-1]
        state = global_state.unsqueeze(-2).expand(*batch, team.num_agents, state_dim)
        ids = agent_ids[team.name].expand(*batch, team.num_agents, team.num_agents)
        return torch.cat([state, ids], -1)

    def values(params: dict[str, Any], obs: torch.Tensor, global_state: torch.Tensor) -> torch.Tensor:
        """``[..., A]``: every agent's value, in agent order."""
        per_team = {
            team.name: value_fns[team.name](
                params[team.name]["critic"], critic_input(team, obs, global_state)
            ).squeeze(-1)
            for team in teams
        }
        return teams_env.pack_agents(per_team)

    def annealing(count: torch.Tensor) -> torch.Tensor:
        """CleanRL's linear annealing: ``1 - i / num_updates`` through update ``i`` (from 0)."""
        return 1.0 - (count // gradient_steps).to(torch.float32) / num_updates

    def optimizer(lr: float | torch.Tensor) -> optim.Optimizer:
        adam = optim.inject_hyperparams(optim.adam, static_args=("eps",))(learning_rate=lr, eps=1e-5)
        parts = [optim.clip_by_global_norm(config.max_grad_norm), adam]
        if config.anneal_lr:
            parts.append(optim.scale_by_schedule(annealing))
        return optim.chain(*parts)

    tx = optimizer(config.learning_rate)  # its update reads the rate from the optimiser state

    def init_team(team: Team, key: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
        key_actor, key_critic = random.split(key)
        actor, critic = actors[team.name], critics[team.name]
        return {
            "actor": nets.init(
                actor, key_actor, orthogonal(math.sqrt(2.0)), {actor.output_layer: orthogonal(0.01)}
            ),
            "critic": nets.init(
                critic, key_critic, orthogonal(math.sqrt(2.0)), {critic.output_layer: orthogonal(1.0)}
            ),
        }

    def init(key: torch.Tensor, **hparam_overrides: Any) -> MAPPOTrainState:
        values_ = sweepable_values(config, hparam_overrides, SWEEPABLE)
        key_params, key_env = random.split(key)
        params = {}
        for team, team_key in zip(teams, random.split(key_params, len(teams)), strict=True):
            if config.share_params:
                params[team.name] = init_team(team, team_key)
            else:
                keys = random.split(team_key, team.num_agents)
                params[team.name] = ftree.stack([init_team(team, k) for k in keys])
        params = ftree.map(lambda p: p.to(device), params)
        obs, env_state = benv.reset(key_env.to(device), env_params)
        opt = optimizer(values_["learning_rate"])
        return MAPPOTrainState(
            params=params,
            opt_state={t: {net: opt.init(p) for net, p in nets_.items()} for t, nets_ in params.items()},
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(MAPPOHyperParams, values_, device),
        )

    def draw_noise(key: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step's sampling noise per team, ``[num_envs, A_team, K or D]``: drawn for every step
        before the rollout's loop (``sample_and_log_prob(team_key, ...)`` draws the same)."""
        return {
            team.name: dist.noise(team_key, (config.num_envs, team.num_agents, event_size(team)))
            for team, team_key in zip(teams, random.split(key, len(teams)), strict=True)
        }

    def act(noise: dict[str, torch.Tensor], params: dict[str, Any], obs: torch.Tensor):  # noqa: ANN202
        actions, log_probs = {}, {}
        for team in teams:
            actions[team.name], log_probs[team.name] = dist.sample_and_log_prob_from_noise(
                noise[team.name], *policy(params, team, obs)
            )
        return teams_env.pack_actions(actions), {"log_prob": teams_env.pack_agents(log_probs)}

    def loss_fn(params: dict[str, Any], hp: MAPPOHyperParams, minibatch: dict[str, torch.Tensor]):  # noqa: ANN202
        """The sum of every team's PPO loss (their params are disjoint, so each team's gradient is
        its own loss's); the metrics are means over the teams."""
        new_values = values(params, minibatch["obs"], minibatch["global_state"])
        total, per_team = 0.0, []
        for team in teams:
            dist_params = policy(params, team, minibatch["obs"])
            rows = team.agents
            loss, metrics = L.ppo_loss(
                dist.log_prob(*dist_params, team.split_actions(minibatch["action"])),
                minibatch["log_prob"][..., rows],
                minibatch["advantages"][..., rows],
                new_values[..., rows],
                minibatch["value"][..., rows],
                minibatch["returns"][..., rows],
                dist.entropy(*dist_params),
                clip_eps=hp.clip_eps,
                vf_coef=hp.vf_coef,
                ent_coef=hp.ent_coef,
                value_clip_eps=hp.clip_eps,
                normalize=config.normalize_advantages,
            )
            total = total + loss
            per_team.append(metrics)
        return total, {k: torch.stack([m[k] for m in per_team]).mean() for k in per_team[0]}

    grad_fn = torch.func.grad_and_value(loss_fn, has_aux=True)

    def team_episode_returns(info: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``episode_return/<team>``: the team's summed return, mean over the episodes that ended."""
        finished = info["returned_episode"]
        count = finished.sum()
        out = {}
        for team in teams:
            team_return = info["returned_agent_returns"][..., team.agents].sum(-1)
            out[f"episode_return/{team.name}"] = torch.where(finished, team_return, 0.0).sum() / count
        return out

    def update(state: MAPPOTrainState, key: torch.Tensor) -> tuple[MAPPOTrainState, dict[str, torch.Tensor]]:
        key_rollout, epoch_keys = update_keys(key, config.update_epochs)
        rollout_state, traj = envs.rollout(
            benv,
            env_params,
            lambda noise, obs: act(noise, state.params, obs),
            key_rollout,
            (state.obs, state.env_state),
            config.num_steps,
            policy_draw=draw_noise,
        )
        # The critic runs once on the whole rollout, after it: acting needs the actors only.
        global_state = traj.info["global_state"]
        old_values = values(state.params, traj.obs, global_state)
        next_values = values(state.params, traj.final_obs, traj.info["final_global_state"])
        hp = state.hparams
        # Per agent, every team at once: rewards, values and flags are [T, N, A] in agent order.
        advantages, returns = L.gae(
            traj.reward,
            old_values,
            next_values,
            traj.terminated,
            traj.truncated,
            hp.gamma,
            hp.gae_lambda,
        )
        data = {
            "obs": traj.obs,
            "global_state": global_state,
            "action": traj.action,
            "log_prob": traj.extras["log_prob"],
            "value": old_values,
            "advantages": advantages,
            "returns": returns,
        }
        # [T, N, ...] -> [T * N, ...]: minibatches of env steps keep every agent's sample, so
        # unshared params still meet their own agent's data on the agent axis.
        data = {k: v.reshape(batch_size, *v.shape[2:]) for k, v in data.items()}

        orders = torch.func.vmap(lambda k: random.permutation(k, batch_size))(epoch_keys)
        orders = orders.reshape(gradient_steps, minibatch_size)

        def gradient_step(carry, idx):  # noqa: ANN001, ANN202
            params, opt_state = carry
            minibatch = {k: v[idx] for k, v in data.items()}
            grads, (loss, metrics) = grad_fn(params, hp, minibatch)
            # Each team's actor and critic clip their own gradient norm (JaxMARL's MAPPO clips
            # actor and critic apart): the value loss's gradients, large while returns are,
            # would otherwise crowd out the policy's, and one team's out another's.
            new_params, new_opt_state = {}, {}
            for team, networks in params.items():
                new_params[team], new_opt_state[team] = {}, {}
                for net, p in networks.items():
                    updates, new_opt_state[team][net] = tx.update(grads[team][net], opt_state[team][net], p)
                    new_params[team][net] = optim.apply_updates(p, updates)
            metrics = {**metrics, "grad_norm": optim.global_norm(grads)}
            return (new_params, new_opt_state), metrics

        (params, opt_state), step_metrics = scan(gradient_step, (state.params, state.opt_state), orders)
        lr = learning_rate(state)
        if config.anneal_lr:
            lr = lr * annealing(state.update_count * gradient_steps)
        metrics = {k: v.mean() for k, v in step_metrics.items()}
        metrics.update(episode_metrics(traj.info), learning_rate=lr)
        metrics.update(team_episode_returns(traj.info))
        new_state = MAPPOTrainState(
            params=params,
            opt_state=opt_state,
            env_state=rollout_state.env_state,
            obs=rollout_state.obs,
            update_count=state.update_count + 1,
            hparams=hp,
        )
        return new_state, metrics

    def greedy_action(params: dict[str, Any], obs: torch.Tensor) -> torch.Tensor:
        """Every agent's most likely action, packed ``[..., P]``, from the packed ``obs [..., O]``."""
        return teams_env.pack_actions({team.name: dist.mode(*policy(params, team, obs)) for team in teams})

    return Agent(
        name=name,
        config=config,
        init=init,
        update=update,
        num_updates=num_updates,
        steps_per_update=batch_size,
        greedy_action=greedy_action,
        env=benv,
        env_params=env_params,
        device=device,
        static_key=static_key(name, config, SWEEPABLE, env, device),
    )


def evaluate_teams(
    agent: Agent,
    policy: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    key: torch.Tensor,
    episodes: int,
) -> dict[str, torch.Tensor]:
    """Each team's undiscounted return, ``team -> [episodes]``, of one episode on each of
    ``episodes`` fresh environments.

    ``policy(key, obs) -> action`` maps the packed observations ``[episodes, O]`` to packed
    actions ``[episodes, P]`` (:func:`greedy_policy`, :func:`uniform_policy`). The environments
    are reset and stepped with the keys :func:`funrl.agents.common.evaluate` uses, so the greedy
    policy's team returns sum to its returns.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes: expected a positive int, got {episodes!r}")
    env = with_num_envs(agent.env, episodes)
    teams_env = env.env
    key = key.to(agent.device)
    key_policy = random.split(key)[0]
    obs, env_state = env.reset(key, agent.env_params)
    returns = torch.zeros(episodes, teams_env.num_agents, device=agent.device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=agent.device)
    for t in range(agent.env_params.max_steps_in_episode + 1):
        with torch.no_grad():
            action = policy(random.fold_in(key_policy, t), obs)
        obs, env_state, _, _, _, info = env.step(random.fold_in(key, t), env_state, action, agent.env_params)
        ended = info["returned_episode"] & ~finished
        returns = torch.where(ended.unsqueeze(-1), info["returned_agent_returns"], returns)
        finished = finished | info["returned_episode"]
        if bool(finished.all()):
            break
    return {team.name: returns[:, team.agents].sum(-1) for team in teams_env.teams}


def greedy_policy(
    agent: Agent, params: dict[str, Any]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``policy(key, obs)``: every agent's most likely action under ``params`` (one seed's)."""
    return lambda key, obs: agent.greedy_action(params, obs)


def uniform_policy(agent: Agent) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``policy(key, obs)``: every agent's action uniform over its action space (the baseline a
    trained team must beat)."""
    space = agent.env.action_space(agent.env_params)
    return lambda key, obs: torch.func.vmap(space.sample)(random.split(key, obs.shape[0]))


# Per-team returns are NaN in an update where no episode ended, as episode_return is; the teams
# of the MPE scenarios.
TEAM_RETURNS = tuple(f"episode_return/{team}" for team in ("agent", "adversary", "speaker", "listener"))

register_agent(
    "mappo",
    MAPPOConfig,
    make_train,
    summary="MAPPO, teams of agents with centralised critics (--env mpe:simple_spread, mpe:simple_tag, ...)",
    action_spaces=("discrete", "continuous"),
    learning_rates=("learning_rate",),
    may_be_nan=TEAM_RETURNS,
)
register_agent(
    "ippo",
    IPPOConfig,
    make_train,
    summary="IPPO, teams of independent PPO learners (--env mpe:simple_spread, mpe:simple_tag, ...)",
    action_spaces=("discrete", "continuous"),
    learning_rates=("learning_rate",),
    may_be_nan=TEAM_RETURNS,
)
