"""PPO (Schulman et al. 2017) as one pure update step, PureJaxRL's shape.

``make_train(config)`` builds an :class:`Agent` whose ``update(train_state, key)`` does a whole PPO
iteration — a ``num_steps`` rollout of ``num_envs`` environments, GAE, ``update_epochs`` epochs of
``num_minibatches`` clipped-surrogate gradient steps — as one pure function; ``torch.compile``
turns it into one graph (the rollout and the minibatch loop are :func:`funrl.control.scan`).
``train(key)`` drives it from Python for ``config.num_updates`` iterations.

Defaults follow PureJaxRL's ``ppo.py`` / CleanRL's ``ppo.py`` for CartPole: 4 envs x 128 steps,
4 epochs of 4 minibatches, Adam (eps 1e-5) with a linearly annealed learning rate 2.5e-4,
global-norm clipping 0.5, γ 0.99, λ 0.95, clip ε 0.2, entropy 0.01, value 0.5, orthogonal init
with tanh 64x64 MLPs. Continuous actions use a state-independent log-std (CleanRL's
``ppo_continuous_action.py``) and, by default, observation and reward normalisation wrappers
whose running statistics the whole env batch shares (gymnasium's vector wrappers, as CleanRL).

Observations of shape ``[H, W, C]`` (MinAtar) get MinAtar's baseline CNN with one linear layer
per head instead of the MLPs (``network``, see :mod:`funrl.agents.networks`).

The float hyper-parameters (:data:`SWEEPABLE`) live as tensors in the train state -- the
learning rate in the optimiser's state (``funrl.optim.inject_hyperparams``), the loss
coefficients, γ and λ in ``hparams`` -- and ``update`` reads them from there only: configs that
differ in them share one compiled step, and ``vmap`` over train states runs a sweep in one call.
Truncated episodes bootstrap from ``V(final_obs)``; terminated ones do not.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl import envs, nets, optim, random
from funrl import losses as L
from funrl.agents.common import (
    Agent,
    BatchedEnvLike,
    episode_metrics,
    float32_tensors,
    make_batched_env,
    static_key,
    sweepable_values,
    update_keys,
)
from funrl.agents.networks import check_network, make_network
from funrl.agents.registry import register_agent
from funrl.control import scan
from funrl.distributed import DataParallel, shard_envs
from funrl.nets import distributions
from funrl.nets.initializers import orthogonal

__all__ = ["NAME", "SWEEPABLE", "PPOConfig", "PPOHyperParams", "PPOTrainState", "make_train", "learning_rate"]

NAME = "ppo"


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Static PPO configuration (compile specialises on it)."""

    env_id: str = "CartPole-v1"
    total_steps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    network: str = "auto"  # see funrl.agents.networks: an MLP, or MinAtar's CNN for [H, W, C] observations
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    normalize_obs: bool | None = None  # None: on for continuous actions, off for discrete
    normalize_reward: bool | None = None
    env_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for name in ("total_steps", "num_envs", "num_steps", "update_epochs", "num_minibatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: expected a divisor of num_envs * num_steps = "
                f"{self.num_envs * self.num_steps}, got {self.num_minibatches}"
            )
        if self.total_steps < self.num_envs * self.num_steps:
            raise ValueError(
                f"total_steps: expected at least num_envs * num_steps = "
                f"{self.num_envs * self.num_steps}, got {self.total_steps}"
            )
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}: expected a value in [0, 1], got {getattr(self, name)}")
        for name in ("learning_rate", "clip_eps", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a value > 0, got {getattr(self, name)}")
        check_network(self.network)

    @property
    def num_updates(self) -> int:
        return self.total_steps // (self.num_envs * self.num_steps)

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps


class PPOHyperParams(NamedTuple):
    """The loss coefficients, γ and λ: float32 scalar tensors (the learning rate is in the optimiser state)."""

    ent_coef: torch.Tensor
    clip_eps: torch.Tensor
    vf_coef: torch.Tensor
    gamma: torch.Tensor
    gae_lambda: torch.Tensor


SWEEPABLE = ("learning_rate", "max_grad_norm", *PPOHyperParams._fields)
"""The config fields that ride in the train state: the names ``init(key, **hparams)`` (and
``train(..., hparams=...)``) takes; any other raises. The compiled step does not depend on them.
The learning rate and ``max_grad_norm`` are tensors of the optimiser state (``inject_hyperparams``).

Reward normalisation (continuous actions) discounts with its wrapper's own γ (0.99), not ``gamma``."""


class PPOTrainState(NamedTuple):
    params: dict[str, torch.Tensor]
    opt_state: Any  # (clip, inject_hyperparams(adam) holding the learning rate[, annealing])
    env_state: Any
    obs: torch.Tensor
    update_count: torch.Tensor
    hparams: PPOHyperParams


def learning_rate(state: PPOTrainState) -> torch.Tensor:
    """The base learning rate a train state holds (before annealing), a float32 scalar tensor."""
    return state.opt_state[1].hyperparams["learning_rate"]


def make_train(
    config: PPOConfig,
    env: BatchedEnvLike | None = None,
    device: str = "cpu",
    data_parallel: DataParallel | None = None,
) -> Agent:
    """Build PPO for ``config``: an :class:`~funrl.agents.common.Agent` (init, update, evaluate).

    Args:
        config: the static configuration.
        env: a batched environment (``funrl.envs.vmap(...)`` or ``funrl.envs.from_gymnasium``);
            by default ``config.env_id`` from funrl's registry, ``config.num_envs`` copies,
            wrapped in ``EpisodeStatistics`` (and, for continuous actions, normalisation wrappers
            on the batched view: one set of statistics for all envs).
        device: where params and env state live.
        data_parallel: this process's rank in a data-parallel agent
            (:func:`funrl.distributed.data_parallel`; default: one process). Each rank steps its
            block of the ``config.num_envs`` environments with the keys one process would give
            them; the update gathers the rollouts, every rank takes the same global minibatches
            and computes the gradient of its equal share of each, and the gradients (with the
            loss metrics) are averaged over the ranks by one all-reduce per gradient step inside
            the compiled update, as are the normalisation statistics at each env step. So every
            rank holds the same params, those of one process with all the environments (up to
            float rounding of the sums), and the update stays one graph.
    """
    device = torch.device(device)
    dp = data_parallel or DataParallel()
    if env is not None and dp.world_size > 1:
        raise ValueError("env: a data-parallel agent makes its own environments; expected None")
    local_envs = len(dp.local_block(config.num_envs))
    benv, env_params, continuous = make_batched_env(
        config.env_id,
        local_envs,
        env,
        dict(config.env_kwargs),
        config.normalize_obs,
        config.normalize_reward,
    )
    benv = shard_envs(benv, dp, config.num_envs)
    obs_shape = tuple(benv.observation_space(env_params).shape)
    act_space = benv.action_space(env_params)
    action_dim = act_space.shape[-1] if continuous else act_space.n
    module = make_network(
        config.network,
        obs_shape,
        config.hidden_sizes,
        lambda features, hidden: nets.ActorCritic(
            features, action_dim, hidden, config.activation, continuous=continuous
        ),
    )
    head_gains = {f"head.{name}": init for name, init in module.head.ppo_overrides().items()}
    dist = distributions.normal if continuous else distributions.categorical
    num_updates = config.num_updates
    batch_size = config.steps_per_update
    minibatch_size = batch_size // config.num_minibatches
    gradient_steps = config.update_epochs * config.num_minibatches
    # This rank's rows of every minibatch: the minibatches are global, their gradients shared.
    my_rows = dp.local_block(minibatch_size, "num_envs * num_steps / num_minibatches")

    def annealing(count: torch.Tensor) -> torch.Tensor:
        """CleanRL's linear annealing: ``1 - i / num_updates`` through update ``i`` (from 0)."""
        return 1.0 - (count // gradient_steps).to(torch.float32) / num_updates

    def optimizer(lr: float | torch.Tensor, max_grad_norm: float | torch.Tensor) -> optim.Optimizer:
        """Adam (eps 1e-5) under global-norm clipping; the rate and the norm tensors of its state
        (sweepable)."""
        adam = optim.inject_hyperparams(optim.adam, static_args=("eps",))(learning_rate=lr, eps=1e-5)
        clip = optim.inject_hyperparams(optim.clip_by_global_norm)(max_norm=max_grad_norm)
        parts = [clip, adam]
        if config.anneal_lr:
            parts.append(optim.scale_by_schedule(annealing))
        return optim.chain(*parts)

    tx = optimizer(config.learning_rate, config.max_grad_norm)  # its update reads both from the state

    def actor_critic(params: dict[str, torch.Tensor], obs: torch.Tensor) -> tuple[tuple, torch.Tensor]:
        """The distribution's parameters (a tuple) and the value."""
        dist_params, value = nets.apply(module, params, obs)
        return (dist_params if continuous else (dist_params,)), value

    def policy(params: dict[str, torch.Tensor], obs: torch.Tensor) -> tuple:
        """The distribution's parameters alone: the critic is not computed."""
        dist_params = nets.apply(module, params, obs, value=False)
        return dist_params if continuous else (dist_params,)

    def init(key: torch.Tensor, **hparam_overrides: Any) -> PPOTrainState:
        values = sweepable_values(config, hparam_overrides, SWEEPABLE)
        key_params, key_env = random.split(key)
        params = nets.init(module, key_params, orthogonal(math.sqrt(2.0)), head_gains)
        params = {k: v.to(device) for k, v in params.items()}
        obs, env_state = benv.reset(key_env.to(device), env_params)
        return PPOTrainState(
            params=params,
            opt_state=optimizer(values["learning_rate"], values["max_grad_norm"]).init(params),
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(PPOHyperParams, values, device),
        )

    def draw_noise(key: torch.Tensor) -> torch.Tensor:
        """One step's sampling noise for all ``config.num_envs`` environments (every rank's)."""
        return dist.noise(key, (config.num_envs, action_dim))

    def act(noise: torch.Tensor, params: dict[str, torch.Tensor], obs: torch.Tensor):
        dist_params = policy(params, obs)
        # The sample for all environments, of which this rank keeps its rows: each row's sample
        # depends on its own row and its noise only, so an environment gets the action one
        # process would draw for it.
        all_rows = dp.at_all_rows(dist_params, config.num_envs)
        action, log_prob = dist.sample_and_log_prob_from_noise(noise, *all_rows)
        return dp.my_rows(action), {"log_prob": dp.my_rows(log_prob)}

    def loss_fn(params, hp: PPOHyperParams, minibatch: dict[str, torch.Tensor]):
        dist_params, values = actor_critic(params, minibatch["obs"])
        log_prob = dist.log_prob(*dist_params, minibatch["action"])
        entropy = dist.entropy(*dist_params)
        return L.ppo_loss(
            log_prob,
            minibatch["log_prob"],
            minibatch["advantages"],
            values,
            minibatch["value"],
            minibatch["returns"],
            entropy,
            clip_eps=hp.clip_eps,
            vf_coef=hp.vf_coef,
            ent_coef=hp.ent_coef,
            value_clip_eps=hp.clip_eps,
            normalize=False,  # done on the whole minibatch, before the ranks take their rows
        )

    grad_fn = torch.func.grad_and_value(loss_fn, has_aux=True)

    def update(state: PPOTrainState, key: torch.Tensor) -> tuple[PPOTrainState, dict[str, torch.Tensor]]:
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
        # The values of the rollout's observations and of each step's next observation (for
        # bootstrapping), in one batched call after the rollout instead of one per step.
        _, all_values = actor_critic(state.params, torch.cat([traj.obs, traj.final_obs]))
        values, next_values = all_values.split(config.num_steps)
        advantages, returns = L.gae(
            traj.reward,
            values,
            next_values,
            traj.terminated,
            traj.truncated,
            state.hparams.gamma,
            state.hparams.gae_lambda,
        )
        data = {
            "obs": traj.obs,
            "action": traj.action,
            "log_prob": traj.extras["log_prob"],
            "value": values,
            "advantages": advantages,
            "returns": returns,
            "returned_episode": traj.info["returned_episode"],
            "returned_episode_return": traj.info["returned_episode_return"],
        }
        # [T, envs of this rank] -> [T, all envs]: every rank holds the whole rollout.
        data = {k: dp.all_gather(v, dim=1) for k, v in data.items()}
        info = {k: data.pop(k) for k in ("returned_episode", "returned_episode_return")}
        data = {k: v.reshape(batch_size, *v.shape[2:]) for k, v in data.items()}
        hp = state.hparams

        # One vmapped permutation for all epochs: each Threefry call site costs inductor compile
        # time, so the epochs share one.
        orders = torch.func.vmap(lambda k: random.permutation(k, batch_size))(epoch_keys)
        orders = orders.reshape(gradient_steps, minibatch_size)

        def gradient_step(carry, idx):
            params, opt_state = carry
            minibatch = {k: v[idx] for k, v in data.items()}
            if config.normalize_advantages:
                minibatch["advantages"] = L.normalize_advantages(minibatch["advantages"])
            mine = {k: v[my_rows.start : my_rows.stop] for k, v in minibatch.items()}
            grads, (loss, metrics) = grad_fn(params, hp, mine)
            grads, metrics = dp.mean_tree((grads, metrics))
            updates, opt_state = tx.update(grads, opt_state, params)
            metrics = {**metrics, "grad_norm": optim.global_norm(grads)}
            return (optim.apply_updates(params, updates), opt_state), metrics

        (params, opt_state), step_metrics = scan(gradient_step, (state.params, state.opt_state), orders)
        lr = learning_rate(state)
        if config.anneal_lr:
            lr = lr * annealing(state.update_count * gradient_steps)
        metrics = {k: v.mean() for k, v in step_metrics.items()}
        metrics.update(episode_metrics(info), learning_rate=lr)
        new_state = PPOTrainState(
            params=params,
            opt_state=opt_state,
            env_state=rollout_state.env_state,
            obs=rollout_state.obs,
            update_count=state.update_count + 1,
            hparams=state.hparams,
        )
        return new_state, metrics

    def evaluate_policy(params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return dist.mode(*policy(params, obs))

    return Agent(
        name=NAME,
        config=config,
        init=init,
        update=update,
        num_updates=num_updates,
        steps_per_update=batch_size,
        greedy_action=evaluate_policy,
        env=benv,
        env_params=env_params,
        device=device,
        # A rank's step holds its collectives and its share of the environments.
        static_key=(*static_key(NAME, config, SWEEPABLE, env, device), dp.rank, dp.world_size),
    )


register_agent(
    NAME,
    PPOConfig,
    make_train,
    summary="PPO, discrete or continuous actions",
    action_spaces=("discrete", "continuous"),
    learning_rates=("learning_rate",),
)
