"""A new agent as a user adds one: this file and nothing else (``tests/agents/test_registry.py``).

``toy`` is REINFORCE without a baseline on one-step returns: a linear softmax policy, one rollout
of ``num_steps`` steps per update, one Adam step. It reports a ``spread`` metric, the range of
the rollout's rewards per step, ``0 / 0 = NaN`` for a rollout of one step (``num_steps=1``): it
is what the non-finite check must stop unless the registration declares it may be NaN.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from funrl import envs, nets, optim, random
from funrl.agents import Agent, register_agent
from funrl.agents.common import episode_metrics, make_batched_env, sweepable_values
from funrl.agents.networks import make_network
from funrl.nets import distributions


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    env_id: str = "CartPole-v1"
    total_steps: int = 64
    num_envs: int = 2
    num_steps: int = 4
    learning_rate: float = 1e-2

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps


class ToyState(NamedTuple):
    params: dict[str, torch.Tensor]
    opt_state: Any
    env_state: Any
    obs: torch.Tensor
    update_count: torch.Tensor


def make_train(config: ToyConfig, env: Any = None, device: str = "cpu") -> Agent:
    device = torch.device(device)
    benv, env_params, continuous = make_batched_env(config.env_id, config.num_envs, env, {}, False, False)
    if continuous:
        raise ValueError(f"env_id: toy needs discrete actions, {config.env_id} has a Box action space")
    num_actions = benv.action_space(env_params).n
    obs_shape = tuple(benv.observation_space(env_params).shape)
    module = make_network("mlp", obs_shape, (), lambda n, h: nets.DiscreteActor(n, num_actions, h))
    tx = optim.inject_hyperparams(optim.adam)(learning_rate=config.learning_rate)

    def init(key: torch.Tensor, **overrides: Any) -> ToyState:
        values = sweepable_values(config, overrides, ("learning_rate",))
        key_params, key_env = random.split(key)
        params = nets.init(module, key_params)
        obs, env_state = benv.reset(key_env, env_params)
        opt = optim.inject_hyperparams(optim.adam)(learning_rate=values["learning_rate"])
        return ToyState(params, opt.init(params), env_state, obs, torch.zeros((), dtype=torch.int64))

    def loss_fn(
        params: dict[str, torch.Tensor], obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor
    ):
        log_prob = distributions.categorical.log_prob(nets.apply(module, params, obs), action)
        loss = -(log_prob * reward).mean()
        return loss, {"loss": loss}

    def update(state: ToyState, key: torch.Tensor) -> tuple[ToyState, dict[str, torch.Tensor]]:
        def act(k: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, dict]:
            return distributions.categorical.sample(k, nets.apply(module, state.params, obs)), {}

        rollout_state, traj = envs.rollout(
            benv, env_params, act, key, (state.obs, state.env_state), config.num_steps
        )
        grads, metrics = torch.func.grad(loss_fn, has_aux=True)(
            state.params, traj.obs, traj.action, traj.reward
        )
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        spread = (traj.reward.max() - traj.reward.min()) / (config.num_steps - 1)
        new_state = ToyState(
            optim.apply_updates(state.params, updates),
            opt_state,
            rollout_state.env_state,
            rollout_state.obs,
            state.update_count + 1,
        )
        return new_state, {**metrics, **episode_metrics(traj.info), "spread": spread}

    def greedy_action(params: dict[str, torch.Tensor], obs: torch.Tensor) -> torch.Tensor:
        return nets.apply(module, params, obs).argmax(dim=-1)

    return Agent(
        name="toy",
        config=config,
        init=init,
        update=update,
        num_updates=config.total_steps // config.steps_per_update,
        steps_per_update=config.steps_per_update,
        greedy_action=greedy_action,
        env=benv,
        env_params=env_params,
        device=device,
    )


register_agent(
    "toy",
    ToyConfig,
    make_train,
    summary="REINFORCE on one-step returns, a test agent",
    action_spaces=("discrete",),
    learning_rates=("learning_rate",),
)
