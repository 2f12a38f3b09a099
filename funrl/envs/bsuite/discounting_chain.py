"""bsuite DiscountingChain: the first action picks a chain whose reward arrives after 1..100 steps.

Reference: ``bsuite/environments/discounting_chain.py`` (pip ``bsuite`` 0.3.6); gymnax's
``gymnax/environments/bsuite/discounting_chain.py`` for the pure form. Rules as in bsuite:
episodes last 100 steps; the first action (0..4) fixes the context; chain ``c`` pays
``rewards[c]`` once, on step ``(1, 3, 10, 30, 100)[c]``; ``rewards`` is 1 everywhere except
``1.1`` on chain ``mapping_seed % 5``. The observation is ``[context, t / 100]`` with
``context = -1`` before the first action.

Deliberate differences: flat ``[2]`` observation (gymnax's layout) rather than bsuite's
``[1, 2]``; ``mapping_seed`` defaults to 0 instead of a fresh numpy draw, so ``make`` is
deterministic; ``rewards`` is a params tensor, so it can be vmapped.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.registry import register

__all__ = ["DiscountingChain", "DiscountingChainParams", "DiscountingChainState", "make_discounting_chain"]

REWARD_TIMESTEPS = (1, 3, 10, 30, 100)
EPISODE_LENGTH = 100


@dataclasses.dataclass(frozen=True)
class DiscountingChainParams(EnvParams):
    rewards: torch.Tensor | None = None  # float32 [5]; None: bonus on chain 0
    max_steps_in_episode: int = 1000


class DiscountingChainState(NamedTuple):
    context: torch.Tensor  # int64, -1 until the first action
    time: torch.Tensor


def chain_rewards(mapping_seed: int) -> torch.Tensor:
    """bsuite's reward table: ones with ``+0.1`` on chain ``mapping_seed % 5``."""
    rewards = torch.ones(len(REWARD_TIMESTEPS), dtype=torch.float32)
    rewards[mapping_seed % len(REWARD_TIMESTEPS)] += 0.1
    return rewards


class DiscountingChain(Environment[DiscountingChainState, DiscountingChainParams]):
    @property
    def name(self) -> str:
        return "DiscountingChain-bsuite"

    @property
    def default_params(self) -> DiscountingChainParams:
        return DiscountingChainParams(rewards=chain_rewards(0))

    def observation(self, state: DiscountingChainState, params: DiscountingChainParams) -> torch.Tensor:
        return torch.stack([state.context.to(torch.float32), state.time.to(torch.float32) / EPISODE_LENGTH])

    def reset_env(
        self, key: torch.Tensor, params: DiscountingChainParams
    ) -> tuple[torch.Tensor, DiscountingChainState]:
        state = DiscountingChainState(
            context=torch.full((), -1, dtype=torch.int64, device=key.device),
            time=torch.zeros((), dtype=torch.int64, device=key.device),
        )
        return self.observation(state, params), state

    def step_env(
        self,
        key: torch.Tensor,
        state: DiscountingChainState,
        action: torch.Tensor,
        params: DiscountingChainParams,
    ):
        check_action_static(action, self.action_space(params))
        rewards = (chain_rewards(0) if params.rewards is None else params.rewards).to(key.device)
        context = torch.where(state.time == 0, action.to(torch.int64), state.context)
        time = state.time + 1
        chains = torch.arange(len(REWARD_TIMESTEPS), device=key.device)
        timesteps = torch.tensor(REWARD_TIMESTEPS, device=key.device)
        chosen = chains == context  # one-hot: batches under vmap without a gather
        due = (chosen & (timesteps == time)).any()
        reward = torch.where(due, (rewards * chosen).sum(), 0.0).to(torch.float32)
        state = DiscountingChainState(context, time)
        terminated = time == EPISODE_LENGTH
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(state, params), state, reward, terminated, truncated, {}

    def observation_space(self, params: DiscountingChainParams | None = None) -> Box:
        return Box(low=(-1.0, 0.0), high=(float(len(REWARD_TIMESTEPS) - 1), 1.0), shape=(2,))

    def action_space(self, params: DiscountingChainParams | None = None) -> Discrete:
        return Discrete(len(REWARD_TIMESTEPS))


def make_discounting_chain(
    mapping_seed: int = 0, max_episode_steps: int = 1000
) -> tuple[DiscountingChain, DiscountingChainParams]:
    if isinstance(mapping_seed, bool) or not isinstance(mapping_seed, int):
        raise TypeError(f"mapping_seed: expected an int, got {type(mapping_seed).__name__}")
    check_positive_int(max_episode_steps, "max_episode_steps")
    return DiscountingChain(), DiscountingChainParams(
        rewards=chain_rewards(mapping_seed), max_steps_in_episode=max_episode_steps
    )


register("DiscountingChain-bsuite", make_discounting_chain)
