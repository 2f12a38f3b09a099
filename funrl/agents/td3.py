"""TD3 (Fujimoto et al. 2018) as one pure update step.

``make_train(config)`` builds an :class:`~funrl.agents.common.Agent` whose ``update(train_state,
key)`` does one iteration: ``num_steps`` steps of ``num_envs`` environments with the deterministic
actor plus Gaussian exploration noise (uniform random actions before ``learning_starts``), one
in-place ``add`` to a :func:`funrl.buffers.flat` replay buffer held in the train state, then
``num_envs * num_steps // train_frequency`` gradient steps (a :func:`funrl.control.scan`): twin
critics as one stacked-params ensemble with the clipped double-Q target at the smoothed target
action (``funrl.losses.td3_critic_objective``), and every ``policy_frequency``-th step the actor
and the Polyak updates of both targets. The delay is a mask, not a branch; until the buffer holds
``learning_starts`` transitions the gradient steps are a :func:`funrl.control.cond` that keeps
the old params (their metrics NaN): skipped eagerly, computed and dropped when compiled.

Defaults follow CleanRL's ``td3_continuous_action.py`` (256-256 ReLU actor with a tanh output and
critics, Adam 3e-4, batch 256, γ 0.99, τ 0.005, policy noise 0.2 clipped at 0.5, exploration noise
0.1, policy delay 2, one environment, one gradient step per transition), except: learning starts
after 1e3 transitions instead of 2.5e4 and the buffer holds 1e5 transitions, for the 2e4-step
Pendulum-v1 budget of BENCHMARKS.md. The actor acts in ``[-1, 1]`` (noise in those units, i.e.
CleanRL's noise times the action scale); the environment receives ``low + (a + 1) (high - low) / 2``.

The float hyper-parameters (:data:`SWEEPABLE`) ride as tensors in the train state (the learning
rate in the optimisers' states, the rest in ``hparams``) and ``update`` reads them from there
only: configs that differ in them share one compiled step, and a sweep is a ``vmap``.

Purity: as for DQN and SAC, ``update`` is pure except for the donated replay storage; fresh
copies of a state give the same outputs (tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from funrl import buffers, nets, optim, random
from funrl import losses as L
from funrl import tree as ftree
from funrl.agents.common import (
    Agent,
    BatchedEnvLike,
    ContinuousOffPolicyConfig,
    check_offpolicy_config,
    float32_tensors,
    gradient_phase,
    masked,
    replay_example,
    static_key,
    sweepable_values,
    update_keys,
    warmup_updates,
)
from funrl.agents.networks import make_network
from funrl.agents.registry import register_agent
from funrl.agents.sac import collect, continuous_setup, init_actor_and_twin_critics, twin_critic

__all__ = [
    "NAME",
    "SWEEPABLE",
    "TD3Config",
    "TD3HyperParams",
    "TD3TrainState",
    "DeterministicActor",
    "make_train",
]

NAME = "td3"


class DeterministicActor(nn.Module):
    """``mu(s) = tanh(MLP(s))``: ``[..., obs_dim] -> [..., action_dim]`` in ``[-1, 1]`` (CleanRL's TD3 actor)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: str = "relu",
        device: str = "meta",
    ):
        super().__init__()
        self.mlp = nets.MLP(obs_dim, hidden_sizes, action_dim, activation, device=device)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mlp(obs))


@dataclasses.dataclass(frozen=True)
class TD3Config(ContinuousOffPolicyConfig):
    """Static TD3 configuration (compile specialises on it). Steps count environment transitions."""

    learning_rate: float = 3e-4
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    exploration_noise: float = 0.1
    policy_frequency: int = 2

    def __post_init__(self) -> None:
        check_offpolicy_config(self)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate: expected a value > 0, got {self.learning_rate}")
        for name in ("policy_noise", "noise_clip", "exploration_noise"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: expected a value >= 0, got {getattr(self, name)}")
        value = self.policy_frequency
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"policy_frequency: expected a positive int, got {value!r}")


class TD3HyperParams(NamedTuple):
    """Float32 scalar tensors in the train state (the learning rate is in the optimisers' states)."""

    gamma: torch.Tensor
    tau: torch.Tensor
    policy_noise: torch.Tensor
    noise_clip: torch.Tensor
    exploration_noise: torch.Tensor


METRICS = ("critic_loss", "actor_loss", "q_mean", "grad_norm")
"""What an update reports of its gradient steps (averaged over them; NaN before it learns)."""

SWEEPABLE = ("learning_rate", *TD3HyperParams._fields)
"""The config fields that ride in the train state: the names ``init(key, **hparams)`` takes (any
other raises). The compiled step does not depend on them."""


class TD3TrainState(NamedTuple):
    params: dict[str, dict[str, torch.Tensor]]  # {"actor": ..., "critic": stacked [2, ...]}
    target_params: dict[str, dict[str, torch.Tensor]]
    actor_opt: Any  # inject_hyperparams(adam) states: the learning rate is a tensor of each
    critic_opt: Any
    buffer: buffers.FlatState
    env_state: Any
    obs: torch.Tensor
    update_count: torch.Tensor
    gradient_count: torch.Tensor
    hparams: TD3HyperParams


def make_train(config: TD3Config, env: BatchedEnvLike | None = None, device: str = "cpu") -> Agent:
    """Build TD3 for ``config``: an :class:`~funrl.agents.common.Agent` (init, update, greedy_action).

    Args:
        config: the static configuration.
        env: a batched environment with Box actions; by default ``config.env_id`` from funrl.
        device: where params, buffer and env state live.
    """
    if not isinstance(config, TD3Config):
        raise TypeError(f"config: expected a TD3Config, got {type(config).__name__}")
    device = torch.device(device)
    setup = continuous_setup(config, env, device)
    actor = make_network(
        config.network,
        setup.obs_shape,
        config.hidden_sizes,
        lambda features, hidden: DeterministicActor(features, setup.action_dim, hidden),
    )
    critic = twin_critic(config, setup)
    buffer = buffers.flat(config.buffer_size)
    n = config.steps_per_update
    warmup = warmup_updates(config.learning_starts, n)

    def optimizer(lr: float | torch.Tensor) -> optim.Optimizer:
        return optim.inject_hyperparams(optim.adam)(learning_rate=lr)

    tx = optimizer(config.learning_rate)  # its update reads the rate from the optimiser states

    def init(key: torch.Tensor, **hparam_overrides: Any) -> TD3TrainState:
        values = sweepable_values(config, hparam_overrides, SWEEPABLE)
        key_actor, key_critic, key_env = random.split(key, 3)
        actor_params, critic_params = init_actor_and_twin_critics(
            actor, critic, key_actor, key_critic, device
        )
        params = {"actor": actor_params, "critic": critic_params}
        obs, env_state = setup.env.reset(key_env.to(device), setup.env_params)
        return TD3TrainState(
            params=params,
            target_params=ftree.map(torch.clone, params),
            actor_opt=optimizer(values["learning_rate"]).init(params["actor"]),
            critic_opt=optimizer(values["learning_rate"]).init(params["critic"]),
            buffer=buffer.init(replay_example(obs, torch.zeros(setup.action_dim, device=device))),
            env_state=env_state,
            obs=obs,
            update_count=torch.zeros((), dtype=torch.int64, device=device),
            gradient_count=torch.zeros((), dtype=torch.int64, device=device),
            hparams=float32_tensors(TD3HyperParams, values, device),
        )

    critic_grad = torch.func.grad_and_value(L.td3_critic_objective, has_aux=True)
    actor_grad = torch.func.grad_and_value(L.td3_actor_objective, has_aux=True)

    def update(state: TD3TrainState, key: torch.Tensor) -> tuple[TD3TrainState, dict[str, torch.Tensor]]:
        key_rollout, step_keys = update_keys(key, config.gradient_steps, keys_per_step=2)
        warming_up = state.update_count * n < config.learning_starts
        actor_params = state.params["actor"]
        hp = state.hparams

        def policy(k: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
            mu = nets.apply(actor, actor_params, obs).detach()
            noisy = (mu + hp.exploration_noise * random.normal(k, tuple(mu.shape))).clamp(-1.0, 1.0)
            uniform = random.uniform(random.fold_in(k, 1), tuple(mu.shape), minval=-1.0, maxval=1.0)
            return torch.where(warming_up, uniform, noisy)

        rollout_state, transitions, episode = collect(
            setup, policy, key_rollout, state.obs, state.env_state, config.num_steps
        )
        buffer_state = buffer.add(state.buffer, transitions)
        learning = state.update_count >= warmup

        def gradient_step(carry, two_keys):
            params, target_params, actor_opt, critic_opt, count = carry
            key_sample, key_noise = two_keys
            batch = buffer.sample(buffer_state, key_sample, config.batch_size).items
            critic_grads, (critic_loss, critic_metrics) = critic_grad(
                params["critic"], target_params["actor"], target_params["critic"], batch, key_noise,
                actor=actor, critic=critic, gamma=hp.gamma,
                policy_noise=hp.policy_noise, noise_clip=hp.noise_clip,
            )  # fmt: skip
            updates, new_critic_opt = tx.update(critic_grads, critic_opt, params["critic"])
            new_critic = optim.apply_updates(params["critic"], updates)
            # The delayed actor step uses the updated critics (CleanRL's order).
            actor_grads, (actor_loss, _) = actor_grad(
                params["actor"], new_critic, batch, actor=actor, critic=critic
            )
            updates, new_actor_opt = tx.update(actor_grads, actor_opt, params["actor"])
            new_actor = optim.apply_updates(params["actor"], updates)
            new_count = count + 1
            delayed = new_count % config.policy_frequency == 0
            new_params = {"actor": new_actor, "critic": new_critic}
            new_target = L.polyak(target_params, new_params, hp.tau)
            carry = (
                {
                    "actor": masked(delayed, new_actor, params["actor"]),
                    "critic": new_critic,
                },
                masked(delayed, new_target, target_params),
                masked(delayed, new_actor_opt, actor_opt),
                new_critic_opt,
                new_count,
            )
            metrics = {
                "critic_loss": critic_loss,
                "actor_loss": actor_loss,
                "q_mean": critic_metrics["q_mean"],
                "grad_norm": optim.global_norm(critic_grads),
            }
            return carry, metrics

        carry = (state.params, state.target_params, state.actor_opt, state.critic_opt, state.gradient_count)
        carry, metrics = gradient_phase(
            learning, gradient_step, carry, step_keys, METRICS
        )
        params, target_params, actor_opt, critic_opt, gradient_count = carry
        metrics.update(episode)
        new_state = TD3TrainState(
            params=params,
            target_params=target_params,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            buffer=buffer_state,
            env_state=rollout_state.env_state,
            obs=rollout_state.obs,
            update_count=state.update_count + 1,
            gradient_count=gradient_count,
            hparams=state.hparams,
        )
        return new_state, metrics

    def greedy_action(params: dict[str, Any], obs: torch.Tensor) -> torch.Tensor:
        return setup.to_env(nets.apply(actor, params["actor"], obs))

    return Agent(
        name=NAME,
        config=config,
        init=init,
        update=update,
        num_updates=config.num_updates,
        steps_per_update=n,
        greedy_action=greedy_action,
        env=setup.env,
        env_params=setup.env_params,
        device=device,
        static_key=static_key(NAME, config, SWEEPABLE, env, device),
        warmup_updates=warmup,
    )


register_agent(
    NAME,
    TD3Config,
    make_train,
    summary="TD3, continuous actions",
    action_spaces=("continuous",),
    learning_rates=("learning_rate",),
)
