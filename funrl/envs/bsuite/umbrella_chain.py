"""bsuite UmbrellaChain: the first action decides a reward paid only at the end of a noisy chain.

Reference: ``bsuite/environments/umbrella_chain.py`` (pip ``bsuite`` 0.3.6); gymnax's
``gymnax/environments/bsuite/umbrella_chain.py`` for the pure form. Rules as in bsuite: reset
draws ``need_umbrella`` and ``has_umbrella`` (Bernoulli 0.5 each); the first step sets
``has_umbrella = action``; on step ``chain_length`` the episode terminates with ``+1`` if
``has_umbrella == need_umbrella`` else ``-1``; every other step pays a random ``+-1``. The
observation is ``[need, has, 1 - t / chain_length, n_distractor random bits]``, float32.

Deliberate difference: flat ``[3 + n_distractor]`` observation (gymnax's layout) rather than
bsuite's ``[1, 3 + n_distractor]``; randomness from funrl keys, not numpy's ``RandomState``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.registry import register

__all__ = ["UmbrellaChain", "UmbrellaChainParams", "UmbrellaChainState", "make_umbrella_chain"]


@dataclasses.dataclass(frozen=True)
class UmbrellaChainParams(EnvParams):
    chain_length: int = 10
    n_distractor: int = 0
    max_steps_in_episode: int = 1000


class UmbrellaChainState(NamedTuple):
    need_umbrella: torch.Tensor  # int64 0/1
    has_umbrella: torch.Tensor  # int64 0/1
    time: torch.Tensor


class UmbrellaChain(Environment[UmbrellaChainState, UmbrellaChainParams]):
    @property
    def name(self) -> str:
        return "UmbrellaChain-bsuite"

    @property
    def default_params(self) -> UmbrellaChainParams:
        return UmbrellaChainParams()

    def observation(
        self, key: torch.Tensor, state: UmbrellaChainState, params: UmbrellaChainParams
    ) -> torch.Tensor:
        head = torch.stack(
            [
                state.need_umbrella.to(torch.float32),
                state.has_umbrella.to(torch.float32),
                (params.chain_length - state.time).to(torch.float32) / params.chain_length,  # one rounding
            ]
        )
        distractors = random.bernoulli(key, 0.5, (params.n_distractor,)).to(torch.float32)
        return torch.cat([head, distractors])

    def reset_env(
        self, key: torch.Tensor, params: UmbrellaChainParams
    ) -> tuple[torch.Tensor, UmbrellaChainState]:
        key_need, key_has, key_obs = random.split(key, 3)
        state = UmbrellaChainState(
            need_umbrella=random.bernoulli(key_need, 0.5, ()).to(torch.int64),
            has_umbrella=random.bernoulli(key_has, 0.5, ()).to(torch.int64),
            time=torch.zeros((), dtype=torch.int64, device=key.device),
        )
        return self.observation(key_obs, state, params), state

    def step_env(
        self, key: torch.Tensor, state: UmbrellaChainState, action: torch.Tensor, params: UmbrellaChainParams
    ):
        check_action_static(action, self.action_space(params))
        key_reward, key_obs = random.split(key)
        time = state.time + 1
        has_umbrella = torch.where(time == 1, action.to(torch.int64), state.has_umbrella)
        state = UmbrellaChainState(state.need_umbrella, has_umbrella, time)
        terminated = time == params.chain_length
        final_reward = torch.where(has_umbrella == state.need_umbrella, 1.0, -1.0)
        noise_reward = 2.0 * random.bernoulli(key_reward, 0.5, ()).to(torch.float32) - 1.0
        reward = torch.where(terminated, final_reward, noise_reward).to(torch.float32)
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(key_obs, state, params), state, reward, terminated, truncated, {}

    def observation_space(self, params: UmbrellaChainParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(low=0.0, high=1.0, shape=(3 + params.n_distractor,))

    def action_space(self, params: UmbrellaChainParams | None = None) -> Discrete:
        return Discrete(2)


def make_umbrella_chain(
    chain_length: int = 10, n_distractor: int = 0, max_episode_steps: int = 1000
) -> tuple[UmbrellaChain, UmbrellaChainParams]:
    check_positive_int(chain_length, "chain_length")
    if isinstance(n_distractor, bool) or not isinstance(n_distractor, int) or n_distractor < 0:
        raise ValueError(f"n_distractor: expected a non-negative int, got {n_distractor!r}")
    check_positive_int(max_episode_steps, "max_episode_steps")
    return UmbrellaChain(), UmbrellaChainParams(
        chain_length=chain_length, n_distractor=n_distractor, max_steps_in_episode=max_episode_steps
    )


register("UmbrellaChain-bsuite", make_umbrella_chain)
