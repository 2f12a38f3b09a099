"""DQN (Mnih et al. 2015) with Double-DQN targets (van Hasselt et al. 2016) as one pure update step.

``make_train(config)`` builds an :class:`~funrl.agents.common.Agent` whose ``update(train_state,
key)`` does one iteration: ``num_steps`` ε-greedy steps of ``num_envs`` environments (a
:func:`funrl.envs.rollout` scan), one in-place ``add`` of those transitions to a
:func:`funrl.buffers.flat` replay buffer held in the train state, then ``num_envs * num_steps //
train_frequency`` gradient steps (a :func:`funrl.control.scan`), each followed by the periodic
target-network update. ``torch.compile`` makes the whole iteration one graph. Every frequency
(``train_frequency``, ``target_network_frequency``, ``learning_starts``, the ε decay) counts
environment transitions, so one environment gives CleanRL's loop exactly.

Defaults follow CleanRL's ``dqn.py`` for CartPole (Q-network 120-84 ReLU, Adam, buffer 1e4, batch
128, γ 0.99, hard target copy every 500 transitions, ε 1 -> 0.05, MSE loss), changed so that the
1e5-step budget of BENCHMARKS.md suffices: learning rate 1e-3 (CleanRL 2.5e-4), one gradient
step per 5 transitions (CleanRL 10), ε decays over the first 20% of the run (CleanRL 50%),
learning starts after 1e3 transitions (CleanRL 1e4), Double-DQN targets (``double_q``), and 10
environments stepped once per update instead of one environment stepped 10 times (the same
transitions per gradient step, a tenth of the per-call overhead). BENCHMARKS.md compares the
returns with CleanRL's rate, frequency and ε decay.

Differences from CleanRL's loop, on purpose: ε is taken at the start of each iteration (constant
over its ``num_steps`` steps) and the policy acts with the params of the start of the iteration
(with the defaults, one step of 10 environments and two gradient steps per iteration).
The ε schedule is branch-free (``torch.where`` on the update count): no host sync inside the
step. Until the buffer holds ``learning_starts`` transitions (CleanRL's ``global_step >
learning_starts``) the gradient steps are a :func:`funrl.control.cond` that keeps the old params
(their metrics NaN): skipped eagerly, computed and dropped in the branch-free compiled step.

The float hyper-parameters (:data:`SWEEPABLE`) ride as tensors in the train state (the learning
rate in the optimiser's state, the rest in ``hparams``) and ``update`` reads them from there
only: configs that differ in them share one compiled step, and a sweep is a ``vmap``.

Purity. ``update`` is pure in everything but the replay storage: the buffer ``add`` donates its
input (see :mod:`funrl.buffers`), so after ``update(state, key)`` the storage of ``state`` holds
the new rows and ``state`` is stale. What holds (tested): two fresh copies of a state
(``funrl.tree.map(torch.clone, state)``) given the same key give identical outputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from funrl import buffers, envs, nets, optim, random
from funrl import losses as L
from funrl import tree as ftree
from funrl.agents.common import (
    Agent,
    BatchedEnvLike,
    OffPolicySchedule,
    check_offpolicy_config,
    contiguous_copy,
    episode_metrics,
    float32_tensors,
    gradient_phase,
    make_batched_env,
    masked,
    replay_example,
    static_key,
    sweepable_values,
    update_keys,
    warmup_updates,
)
from funrl.agents.networks import make_network
from funrl.agents.registry import register_agent

__all__ = [
    "NAME",
    "SWEEPABLE",
    "DQNConfig",
    "DQNHyperParams",
    "DQNTrainState",
    "make_train",
    "linear_epsilon",
]

NAME = "dqn"


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicySchedule):
    """Static DQN configuration (compile specialises on it). Steps count environment transitions."""

    env_id: str = "CartPole-v1"
    total_steps: int = 100_000
    num_envs: int = 10
    num_steps: int = 1
    train_frequency: int = 5
    learning_rate: float = 1e-3
    buffer_size: int = 10_000
    batch_size: int = 128
    gamma: float = 0.99
    tau: float = 1.0
    target_network_frequency: int = 500
    start_e: float = 1.0
    end_e: float = 0.05
    exploration_fraction: float = 0.2
    learning_starts: int = 1_000
    double_q: bool = True
    loss_type: str = "mse"
    network: str = "auto"  # see funrl.agents.networks: an MLP, or MinAtar's CNN for [H, W, C] observations
    hidden_sizes: tuple[int, ...] = (120, 84)
    env_kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        check_offpolicy_config(
            self,
            positive_ints=("target_network_frequency",),
            unit_interval=("start_e", "end_e", "exploration_fraction"),
        )
        if self.target_network_frequency % self.train_frequency:
            raise ValueError(
                f"target_network_frequency: expected a multiple of train_frequency={self.train_frequency}, "
                f"got {self.target_network_frequency}"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate: expected a value > 0, got {self.learning_rate}")
        if self.loss_type not in ("mse", "huber"):
            raise ValueError(f"loss_type: expected 'mse' or 'huber', got {self.loss_type!r}")


class DQNHyperParams(NamedTuple):
    """Float32 scalar tensors in the train state (the learning rate is in the optimiser state)."""

    gamma: torch.Tensor
    tau: torch.Tensor
    start_e: torch.Tensor
    end_e: torch.Tensor
    exploration_fraction: torch.Tensor


METRICS = ("loss", "td_error_abs", "q_taken", "grad_norm")
"""What an update reports of its gradient steps (averaged over them; NaN before it learns)."""

SWEEPABLE = ("learning_rate", *DQNHyperParams._fields)
"""The config fields that ride in the train state: the names ``init(key, **hparams)`` takes (any
other raises). The compiled step does not depend on them."""


class DQNTrainState(NamedTuple):
    params: dict[str, torch.Tensor]
    target_params: dict[str, torch.Tensor]
    opt_state: Any  # inject_hyperparams(adam): the learning rate is a tensor of it (sweepable)
    buffer: buffers.FlatState
    env_state: Any
    obs: torch.Tensor
    update_count: torch.Tensor
    gradient_count: torch.Tensor
    hparams: DQNHyperParams


def linear_epsilon(
    start_e: float | torch.Tensor,
    end_e: float | torch.Tensor,
    duration: float | torch.Tensor,
    step: torch.Tensor,
) -> torch.Tensor:
    """CleanRL's ``linear_schedule``: ``max(end_e, start_e + (end_e - start_e) * step / duration)``.

    Args:
        start_e, end_e: ε at step 0 and from ``duration`` on (floats or 0-d float tensors).
        duration: steps of the decay (> 0; CleanRL's ``exploration_fraction * total_timesteps``).
        step: environment steps so far (an integer tensor; any shape).

    Returns:
        ε, float32 of ``step``'s shape.
    """
    start_e, end_e, duration = (
        torch.as_tensor(v, dtype=torch.float32, device=step.device) for v in (start_e, end_e, duration)
    )
    slope = (end_e - start_e) / duration
    value = start_e + slope * step.to(torch.float32)
    return torch.clamp(value, min=torch.minimum(start_e, end_e), max=torch.maximum(start_e, end_e))


def epsilon_greedy(key: torch.Tensor, q_values: torch.Tensor, epsilon: torch.Tensor) -> torch.Tensor:
    """With probability ``epsilon`` a uniform action, else ``argmax q_values`` (``[N, A] -> [N]``)."""
    num_envs, num_actions = q_values.shape
    # One draw for both decisions: each Threefry call is a chain of small integer kernels.
    explore_u, action_u = random.uniform(key, (2, num_envs))
    random_action = (action_u * num_actions).to(torch.int64).clamp(max=num_actions - 1)
    return torch.where(explore_u < epsilon, random_action, q_values.argmax(dim=-1))


def make_train(config: DQNConfig, env: BatchedEnvLike | None = None, device: str = "cpu") -> Agent:
    """Build DQN for ``config``: an :class:`~funrl.agents.common.Agent` (init, update, greedy_action).

    Args:
        config: the static configuration.
        env: a batched environment with discrete actions (``funrl.envs.vmap(...)`` or
            ``funrl.envs.from_gymnasium``); by default ``config.env_id`` from funrl's registry.
        device: where params, buffer and env state live.
    """
    if not isinstance(config, DQNConfig):
        raise TypeError(f"config: expected a DQNConfig, got {type(config).__name__}")
    device = torch.device(device)
    benv, env_params, continuous = make_batched_env(
        config.env_id, config.num_envs, env, dict(config.env_kwargs), False, False
    )
    if continuous:
        arg, name = ("env_id", config.env_id) if env is None else ("env", env.name)
        raise ValueError(f"{arg}: DQN needs discrete actions, {name} has a Box action space")
    obs_shape = tuple(benv.observation_space(env_params).shape)
    num_actions = benv.action_space(env_params).n
    module = make_network(
        config.network,
        obs_shape,
        config.hidden_sizes,
        lambda features, hidden: nets.QNetwork(features, num_actions, hidden),
    )
    buffer = buffers.flat(config.buffer_size)
    target_period = config.target_network_frequency // config.train_frequency
    warmup = warmup_updates(config.learning_starts, config.steps_per_update)

    def optimizer(lr: float | torch.Tensor) -> optim.Optimizer:
        return optim.inject_hyperparams(optim.adam)(learning_rate=lr)

    tx = optimizer(config.learning_rate)  # its update reads the rate from the optimiser state

    def q_values(params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return nets.apply(module, params, obs)

    def init(key: torch.Tensor, **hparam_overrides: Any) -> DQNTrainState:
        values = sweepable_values(config, hparam_overrides, SWEEPABLE)
        key_params, key_env = random.split(key)
        params = {k: v.to(device) for k, v in nets.init(module, key_params).items()}
        obs, env_state = benv.reset(key_env.to(device), env_params)
        return DQNTrainState(
            params=params,
            target_params=ftree.map(torch.clone, params),
            opt_state=optimizer(values["learning_rate"]).init(params),
            buffer=buffer.init(replay_example(obs, torch.zeros((), dtype=torch.int64, device=device))),
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            gradient_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(DQNHyperParams, values, device),
        )

    def loss_fn(params, target_params, batch: dict[str, torch.Tensor], gamma: torch.Tensor):
        next_q_target = q_values(target_params, batch["next_obs"])
        if config.double_q:
            next_q_online = q_values(params, batch["next_obs"]).detach()
            target = L.double_q_learning_target(
                batch["reward"], next_q_online, next_q_target, batch["terminated"], gamma
            )
        else:
            target = L.q_learning_target(batch["reward"], next_q_target, batch["terminated"], gamma)
        return L.dqn_loss(q_values(params, batch["obs"]), batch["action"], target, config.loss_type)

    grad_fn = torch.func.grad_and_value(loss_fn, has_aux=True)

    def update(state: DQNTrainState, key: torch.Tensor) -> tuple[DQNTrainState, dict[str, torch.Tensor]]:
        key_rollout, step_keys = update_keys(key, config.gradient_steps)
        hp = state.hparams
        env_steps = state.update_count * config.steps_per_update
        exploration_steps = torch.clamp(hp.exploration_fraction * config.total_steps, min=1.0)
        epsilon = linear_epsilon(hp.start_e, hp.end_e, exploration_steps, env_steps)

        def act(k: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, dict]:
            return epsilon_greedy(k, q_values(state.params, obs).detach(), epsilon), {}

        rollout_state, traj = envs.rollout(
            benv,
            env_params,
            act,
            key_rollout,
            contiguous_copy((state.obs, state.env_state)),
            config.num_steps,
        )
        n = config.steps_per_update
        transitions = {
            "obs": traj.obs.reshape(n, *obs_shape),
            "action": traj.action.reshape(n).to(torch.int64),
            "reward": traj.reward.reshape(n).to(torch.float32),
            "next_obs": traj.final_obs.reshape(n, *obs_shape),
            "terminated": traj.terminated.reshape(n),
        }
        buffer_state = buffer.add(state.buffer, transitions)
        learning = state.update_count >= warmup

        def gradient_step(carry, step_key):
            params, target_params, opt_state, count = carry
            batch = buffer.sample(buffer_state, step_key, config.batch_size).items
            grads, (loss, metrics) = grad_fn(params, target_params, batch, hp.gamma)
            updates, new_opt_state = tx.update(grads, opt_state, params)
            new_params = optim.apply_updates(params, updates)
            new_count = count + 1
            refresh = new_count % target_period == 0
            new_target = L.polyak(target_params, new_params, hp.tau)
            carry = (
                new_params,
                masked(refresh, new_target, target_params),
                new_opt_state,
                new_count,
            )
            return carry, {"loss": loss, **metrics, "grad_norm": optim.global_norm(grads)}

        carry = (state.params, state.target_params, state.opt_state, state.gradient_count)
        (params, target_params, opt_state, gradient_count), metrics = gradient_phase(
            learning, gradient_step, carry, step_keys, METRICS
        )
        metrics.update(episode_metrics(traj.info), epsilon=epsilon)
        new_state = DQNTrainState(
            params=params,
            target_params=target_params,
            opt_state=opt_state,
            buffer=buffer_state,
            env_state=rollout_state.env_state,
            obs=rollout_state.obs,
            update_count=state.update_count + 1,
            gradient_count=gradient_count,
            hparams=hp,
        )
        return new_state, metrics

    def greedy_action(params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return q_values(params, obs).argmax(dim=-1)

    return Agent(
        name=NAME,
        config=config,
        init=init,
        update=update,
        num_updates=config.num_updates,
        steps_per_update=config.steps_per_update,
        greedy_action=greedy_action,
        env=benv,
        env_params=env_params,
        device=device,
        static_key=static_key(NAME, config, SWEEPABLE, env, device),
        warmup_updates=warmup,
    )


register_agent(
    NAME,
    DQNConfig,
    make_train,
    summary="DQN with Double-DQN targets, discrete actions",
    action_spaces=("discrete",),
    learning_rates=("learning_rate",),
)
