"""IPPO and MAPPO: PPO for teams of agents, with the agents as one more ``vmap`` axis.

Both train one policy per agent on that agent's own observation and act independently
(decentralised execution); they differ in the critic:

- **IPPO** (independent PPO, de Witt et al. 2020, "Is Independent Learning All You Need in the
  StarCraft Multi-Agent Challenge?"): each agent's critic sees its own observation;
- **MAPPO** (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
  Games"): a centralised critic sees the global state (with a one-hot agent id, the paper's
  agent-specific input) during training only.

Parameter sharing is a vmap option, not a second implementation. Every network call is
``torch.func.vmap`` over the agent axis of the data; ``share_params=True`` maps it with
``in_dims=None`` on the params (one set of weights for the team, JaxMARL's baselines and the
MAPPO paper's default), ``share_params=False`` with ``in_dims=0`` on a params pytree stacked over
agents (leaves ``[A, ...]``: each agent its own actor and critic). Actor and critic have an
optimiser each (Adam under a gradient-norm clip, as JaxMARL's MAPPO); each sees the team's
parameters of its network as one pytree, so the clip is taken over the whole team.

Shapes (``N`` envs, ``A`` agents, ``T`` steps): observations ``[N, A, D]``, actions, rewards,
values and flags ``[N, A]``, a rollout ``[T, N, A, ...]``. Advantages are per agent (GAE on each
agent's own reward), normalised over the minibatch of all agents' samples; minibatches are drawn
from the ``T * N`` env steps, each with every agent's sample, so that unshared params meet their
own agent's data on the agent axis (a minibatch holds as many samples as JaxMARL's).

``episode_return`` is the team return: the sum over agents of each agent's undiscounted return,
per finished episode (JaxMARL's ``MPELogWrapper`` logs the same number, as the mean over agents
times their count). An env step moves every agent once: ``total_steps`` counts env steps.

Defaults follow JaxMARL's ``baselines/IPPO/config/ippo_ff_mpe.yaml`` (16 envs, γ 0.99, λ 0.95,
clip 0.2, entropy 0.01, value 0.5, gradient clip 0.5, tanh 64x64 MLPs, orthogonal init, linear
learning-rate annealing) with the MAPPO paper's rollouts of one 25-step MPE episode, more epochs
on each (5 of 2 minibatches) and a larger learning rate (2e-3), which learn faster per sample.
The float hyper-parameters (:data:`SWEEPABLE`) ride in the train state as in
:mod:`funrl.agents.ppo`: configs differing only in them share one compiled step.

    agent = make_train(MAPPOConfig(env_id="mpe:simple_spread", total_steps=200_000))
    state, metrics = agent(funrl.agents.common.seed_keys(0, 4))   # 4 seeds, vmapped
    funrl train mappo --env mpe:simple_spread --seeds 4
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl import envs, nets, optim, random
from funrl import losses as L
from funrl import tree as ftree
from funrl.agents.common import Agent, episode_metrics, float32_tensors, static_key, sweepable_values
from funrl.agents.registry import register_agent
from funrl.control import scan
from funrl.envs import marl
from funrl.envs.core import Discrete, Environment, Space
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
    "learning_rate",
    "make_train",
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


class TeamState(NamedTuple):
    """The multi-agent env's state and the team's episode statistics (all ``[]`` per environment)."""

    env_state: Any
    episode_return: torch.Tensor  # team return of the running episode so far
    episode_length: torch.Tensor
    returned_episode_return: torch.Tensor  # team return of the last finished episode
    returned_episode_length: torch.Tensor


class TeamEnvironment(Environment):
    """One team of a :class:`funrl.envs.marl.MultiAgentEnv` behind the single-agent contract.

    Observations are the team's ``[A, D]``, actions ``[A]``, rewards and flags ``[A]``;
    ``info["final_obs"]`` is the pre-reset observation. For a centralised critic ``info`` holds
    ``global_state``, the global state the actions were taken in, and ``final_global_state``, the
    one they led to (before any reset). It also carries the team's episode statistics with the
    meaning of :class:`funrl.envs.wrappers.EpisodeStatistics` (``returned_episode``,
    ``returned_episode_return``, ``returned_episode_length``), where an episode ends when every
    agent is done and its return is the sum of every agent's rewards. So ``funrl.envs.vmap``,
    :func:`funrl.envs.rollout` and :func:`funrl.agents.common.evaluate` take it as they take a
    single-agent env. Auto-reset is the multi-agent env's own.
    """

    def __init__(self, env: MultiAgentEnv, env_id: str = "env"):
        if not isinstance(env, MultiAgentEnv):
            raise TypeError(
                f"env: expected a multi-agent env (funrl.envs.marl.MultiAgentEnv), got {type(env).__name__}"
            )
        teams = env.teams
        if len(teams) != 1:
            raise ValueError(
                f"env_id: expected an env with one team of agents (shared observation and action "
                f"spaces), got {env_id!r} with teams {list(teams)}"
            )
        (self.team,) = teams
        self.env = env
        self.num_agents = len(teams[self.team])

    @property
    def name(self) -> str:
        return f"TeamEnvironment({self.env.name})"

    @property
    def default_params(self) -> Any:
        return self.env.default_params

    def observation_space(self, params: Any = None) -> Space:
        """ONE agent's observation space (the team's observations add ``[A]`` in front)."""
        return self.env.observation_spaces(params)[self.team]

    def action_space(self, params: Any = None) -> Space:
        """ONE agent's action space (the team's actions add ``[A]`` in front)."""
        return self.env.action_spaces(params)[self.team]

    def global_state_space(self, params: Any = None) -> Space:
        return self.env.global_state_space(params)

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, TeamState]:
        obs, env_state = self.env.reset_env(key, params)
        zero_f = torch.zeros((), dtype=torch.float32, device=key.device)
        zero_i = torch.zeros((), dtype=torch.int64, device=key.device)
        return obs[self.team], TeamState(env_state, zero_f, zero_i, zero_f, zero_i)

    def step(self, key: torch.Tensor, state: TeamState, action: torch.Tensor, params: Any = None) -> Any:
        params = self.default_params if params is None else params
        obs, env_state, rewards, terminated, truncated, info = self.env.step(
            key, state.env_state, {self.team: action}, params
        )
        return self._finish(obs, env_state, state, rewards, terminated, truncated, info, params)

    def step_env(self, key: torch.Tensor, state: TeamState, action: torch.Tensor, params: Any) -> Any:
        obs, env_state, rewards, terminated, truncated, info = self.env.step_env(
            key, state.env_state, {self.team: action}, params
        )
        info = {**info, "final_obs": obs, "final_global_state": self.env.global_state(env_state, params)}
        return self._finish(obs, env_state, state, rewards, terminated, truncated, info, params)

    def _finish(self, obs, env_state, state, rewards, terminated, truncated, info, params):  # noqa: ANN001, ANN202
        team = self.team
        reward, terminated, truncated = rewards[team], terminated[team], truncated[team]
        done = (terminated | truncated).all()
        episode_return = state.episode_return + reward.sum()
        episode_length = state.episode_length + 1
        new_state = TeamState(
            env_state=env_state,
            episode_return=torch.where(done, 0.0, episode_return),
            episode_length=torch.where(done, 0, episode_length),
            returned_episode_return=torch.where(done, episode_return, state.returned_episode_return),
            returned_episode_length=torch.where(done, episode_length, state.returned_episode_length),
        )
        info = dict(info)
        info.update(
            final_obs=info["final_obs"][team],
            global_state=self.env.global_state(state.env_state, params),
            returned_episode=done,
            returned_episode_return=new_state.returned_episode_return,
            returned_episode_length=new_state.returned_episode_length,
        )
        return obs[team], new_state, reward, terminated, truncated, info


def make_team_env(
    env_id: str, env_kwargs: dict[str, Any], env: Any | None = None
) -> tuple[TeamEnvironment, Any]:
    """``(TeamEnvironment, env_params)`` for a multi-agent id or a given multi-agent env.

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
    return TeamEnvironment(env, env_id), params


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
    params: dict[str, dict[str, torch.Tensor]]  # {"actor": ..., "critic": ...}; leaves [A, ...] unshared
    opt_state: dict[str, Any]  # per network: (clip, inject_hyperparams(adam) with the rate[, annealing])
    env_state: Any
    obs: torch.Tensor  # [N, A, D]
    update_count: torch.Tensor
    hparams: MAPPOHyperParams


def learning_rate(state: MAPPOTrainState) -> torch.Tensor:
    """The base learning rate a train state holds (before annealing), a float32 scalar tensor."""
    return state.opt_state["actor"][1].hyperparams["learning_rate"]


def make_train(config: MAPPOConfig, env: MultiAgentEnv | None = None, device: str = "cpu") -> Agent:
    """Build IPPO or MAPPO for ``config``: an :class:`~funrl.agents.common.Agent`.

    Args:
        config: the static configuration (:class:`MAPPOConfig`, or :class:`IPPOConfig`).
        env: a multi-agent env (``funrl.envs.marl.make(...)[0]``) to train on instead of
            ``config.env_id``; it must have one team of agents with discrete actions.
        device: where params and env state live.

    Raises:
        ValueError: ``env_id`` is not a multi-agent id, the env has several teams or continuous
            actions.
    """
    if not isinstance(config, MAPPOConfig):
        raise TypeError(f"config: expected a MAPPOConfig or IPPOConfig, got {type(config).__name__}")
    device = torch.device(device)
    name = "mappo" if config.centralised_critic else "ippo"
    team_env, env_params = make_team_env(config.env_id, dict(config.env_kwargs), env)
    act_space = team_env.action_space(env_params)
    if not isinstance(act_space, Discrete):
        raise ValueError(
            f"env_id: {name} takes discrete actions, got {act_space} for {config.env_id!r} "
            "(drop continuous_actions from env_kwargs)"
        )
    benv = envs.vmap(team_env, config.num_envs)
    num_agents = team_env.num_agents
    obs_dim = math.prod(team_env.observation_space(env_params).shape)
    state_dim = math.prod(team_env.global_state_space(env_params).shape)
    critic_in = state_dim + num_agents if config.centralised_critic else obs_dim
    actor = nets.MLP(obs_dim, config.hidden_sizes, act_space.n, config.activation)
    critic = nets.MLP(critic_in, config.hidden_sizes, 1, config.activation)
    agent_ids = torch.eye(num_agents, device=device)

    # Shared: one params set for every agent (vmap in_dims=None); independent: leaves [A, ...].
    params_dim = None if config.share_params else 0
    num_updates = config.num_updates
    batch_size = config.steps_per_update  # env steps, each with every agent's sample
    minibatch_size = batch_size // config.num_minibatches
    gradient_steps = config.update_epochs * config.num_minibatches

    def per_agent(fn):  # noqa: ANN001, ANN202
        """``fn(params, x)`` on one agent, vmapped over the agent axis ``-2`` of ``x``."""
        return torch.func.vmap(fn, in_dims=(params_dim, -2), out_dims=-2)

    @per_agent
    def logits_fn(actor_params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return nets.apply(actor, actor_params, obs)

    @per_agent
    def value_fn(critic_params: dict[str, torch.Tensor], critic_input: torch.Tensor) -> torch.Tensor:
        return nets.apply(critic, critic_params, critic_input)

    def critic_input(obs: torch.Tensor, global_state: torch.Tensor) -> torch.Tensor:
        """MAPPO: the global state ``[..., S]`` and a one-hot agent id, per agent; IPPO: each
        agent's observation ``[..., A, D]``."""
        if not config.centralised_critic:
            return obs
        batch = global_state.shape[:-1]
        state = global_state.unsqueeze(-2).expand(*batch, num_agents, state_dim)
        return torch.cat([state, agent_ids.expand(*batch, num_agents, num_agents)], -1)

    def values(critic_params: dict[str, torch.Tensor], critic_in: torch.Tensor) -> torch.Tensor:
        return value_fn(critic_params, critic_in).squeeze(-1)

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

    def init_params(key: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
        key_actor, key_critic = random.split(key)
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
        if config.share_params:
            params = init_params(key_params)
        else:
            params = ftree.stack([init_params(k) for k in random.split(key_params, num_agents)])
        params = ftree.map(lambda p: p.to(device), params)
        obs, env_state = benv.reset(key_env.to(device), env_params)
        return MAPPOTrainState(
            params=params,
            opt_state={name: optimizer(values_["learning_rate"]).init(p) for name, p in params.items()},
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(MAPPOHyperParams, values_, device),
        )

    def act(key: torch.Tensor, actor_params: dict[str, torch.Tensor], obs: torch.Tensor):  # noqa: ANN202
        logits = logits_fn(actor_params, obs)
        action, log_prob = distributions.categorical.sample_and_log_prob(key, logits)
        return action, {"log_prob": log_prob}

    def loss_fn(params: dict[str, Any], hp: MAPPOHyperParams, minibatch: dict[str, torch.Tensor]):  # noqa: ANN202
        logits = logits_fn(params["actor"], minibatch["obs"])
        return L.ppo_loss(
            distributions.categorical.log_prob(logits, minibatch["action"]),
            minibatch["log_prob"],
            minibatch["advantages"],
            values(params["critic"], minibatch["critic_in"]),
            minibatch["value"],
            minibatch["returns"],
            distributions.categorical.entropy(logits),
            clip_eps=hp.clip_eps,
            vf_coef=hp.vf_coef,
            ent_coef=hp.ent_coef,
            value_clip_eps=hp.clip_eps,
            normalize=config.normalize_advantages,
        )

    grad_fn = torch.func.grad_and_value(loss_fn, has_aux=True)

    def update(state: MAPPOTrainState, key: torch.Tensor) -> tuple[MAPPOTrainState, dict[str, torch.Tensor]]:
        key_rollout, key_epochs = random.split(key)
        rollout_state, traj = envs.rollout(
            benv,
            env_params,
            lambda k, obs: act(k, state.params["actor"], obs),
            key_rollout,
            (state.obs, state.env_state),
            config.num_steps,
        )
        # The critic runs once on the whole rollout, after it: acting needs the actor only.
        critic_in = critic_input(traj.obs, traj.info["global_state"])
        old_values = values(state.params["critic"], critic_in)
        next_values = values(
            state.params["critic"], critic_input(traj.final_obs, traj.info["final_global_state"])
        )
        hp = state.hparams
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
            "critic_in": critic_in,
            "action": traj.action,
            "log_prob": traj.extras["log_prob"],
            "value": old_values,
            "advantages": advantages,
            "returns": returns,
        }
        # [T, N, A, ...] -> [T * N, A, ...]: minibatches of env steps keep every agent's sample,
        # so unshared params still meet their own agent's data on the agent axis.
        data = {k: v.reshape(batch_size, *v.shape[2:]) for k, v in data.items()}

        epoch_keys = random.split(key_epochs, config.update_epochs)
        orders = torch.func.vmap(lambda k: random.permutation(k, batch_size))(epoch_keys)
        orders = orders.reshape(gradient_steps, minibatch_size)

        def gradient_step(carry, idx):  # noqa: ANN001, ANN202
            params, opt_state = carry
            minibatch = {k: v[idx] for k, v in data.items()}
            grads, (loss, metrics) = grad_fn(params, hp, minibatch)
            # Actor and critic each clip their own gradient norm (JaxMARL's MAPPO): the value
            # loss's gradients, large while returns are, would otherwise crowd out the policy's.
            steps = {name: tx.update(grads[name], opt_state[name], params[name]) for name in params}
            updates = {name: update for name, (update, _) in steps.items()}
            opt_state = {name: state for name, (_, state) in steps.items()}
            metrics = {**metrics, "grad_norm": optim.global_norm(grads)}
            return (optim.apply_updates(params, updates), opt_state), metrics

        (params, opt_state), step_metrics = scan(gradient_step, (state.params, state.opt_state), orders)
        lr = learning_rate(state)
        if config.anneal_lr:
            lr = lr * annealing(state.update_count * gradient_steps)
        metrics = {k: v.mean() for k, v in step_metrics.items()}
        metrics.update(episode_metrics(traj.info), learning_rate=lr)
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
        """Every agent's most likely action ``[..., A]`` from its own observation ``[..., A, D]``."""
        return distributions.categorical.mode(logits_fn(params["actor"], obs))

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


register_agent(
    "mappo",
    MAPPOConfig,
    make_train,
    summary="MAPPO, a team of agents with a centralised critic (--env mpe:simple_spread)",
    action_spaces=("discrete",),
    learning_rates=("learning_rate",),
)
register_agent(
    "ippo",
    IPPOConfig,
    make_train,
    summary="IPPO, a team of independent PPO learners (--env mpe:simple_spread)",
    action_spaces=("discrete",),
    learning_rates=("learning_rate",),
)
