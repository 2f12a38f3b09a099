"""bsuite MemoryChain: remember a context bit shown on the first step until a query at the end.

Reference: ``bsuite/environments/memory_chain.py`` (pip ``bsuite`` 0.3.6); gymnax's
``gymnax/environments/bsuite/memory_chain.py`` for the pure form. Rules as in bsuite: reset
draws ``num_bits`` context bits (Bernoulli 0.5) and a query index; the observation is
``[1 - t / memory_length, query (only at t = memory_length - 1), 2 * context - 1 (only at
t = 0)]``. ``step`` returns the observation of the time *before* the step (bsuite computes it
before advancing time; gymnax keeps this), reward 0 until the step taken at
``t = memory_length``, which terminates with ``+1`` if the action equals ``context[query]``,
else ``-1``. Episodes last ``memory_length + 1`` steps.

Deliberate difference: the observation is flat ``[num_bits + 2]`` float32 (gymnax's layout)
rather than bsuite's ``[1, num_bits + 2]``; the values are the same.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.registry import register

__all__ = ["MemoryChain", "MemoryChainParams", "MemoryChainState", "make_memory_chain"]


@dataclasses.dataclass(frozen=True)
class MemoryChainParams(EnvParams):
    memory_length: int = 5
    num_bits: int = 1
    max_steps_in_episode: int = 1000


class MemoryChainState(NamedTuple):
    context: torch.Tensor  # int64 [num_bits], each 0 or 1
    query: torch.Tensor  # int64, which bit is asked for
    time: torch.Tensor


class MemoryChain(Environment[MemoryChainState, MemoryChainParams]):
    @property
    def name(self) -> str:
        return "MemoryChain-bsuite"

    @property
    def default_params(self) -> MemoryChainParams:
        return MemoryChainParams()

    def observation(self, state: MemoryChainState, params: MemoryChainParams) -> torch.Tensor:
        # (L - t) / L: one rounding, equal to bsuite's float64 ``1 - t / L`` stored as float32.
        time_left = ((params.memory_length - state.time).to(torch.float32) / params.memory_length).reshape(1)
        query = (
            torch.where(state.time == params.memory_length - 1, state.query, 0).to(torch.float32).reshape(1)
        )
        context = torch.where(state.time == 0, 2 * state.context - 1, 0).to(torch.float32)
        return torch.cat([time_left, query, context])

    def reset_env(
        self, key: torch.Tensor, params: MemoryChainParams
    ) -> tuple[torch.Tensor, MemoryChainState]:
        key_context, key_query = random.split(key)
        state = MemoryChainState(
            context=random.bernoulli(key_context, 0.5, (params.num_bits,)).to(torch.int64),
            query=random.randint(key_query, (), 0, params.num_bits),
            time=torch.zeros((), dtype=torch.int64, device=key.device),
        )
        return self.observation(state, params), state

    def step_env(
        self, key: torch.Tensor, state: MemoryChainState, action: torch.Tensor, params: MemoryChainParams
    ):
        check_action_static(action, self.action_space(params))
        obs = self.observation(state, params)  # before time advances, as bsuite
        terminated = state.time == params.memory_length
        # Select the queried bit with a one-hot sum (batches under vmap without a gather).
        bits = torch.arange(params.num_bits, device=state.query.device)
        answer = (state.context * (bits == state.query)).sum()
        correct = action.to(torch.int64) == answer
        reward = torch.where(terminated, torch.where(correct, 1.0, -1.0), 0.0).to(torch.float32)
        time = state.time + 1
        truncated = time_limit_reached(time, params) & ~terminated
        return obs, state._replace(time=time), reward, terminated, truncated, {}

    def observation_space(self, params: MemoryChainParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(low=-1.0, high=float(max(1, params.num_bits - 1)), shape=(params.num_bits + 2,))

    def action_space(self, params: MemoryChainParams | None = None) -> Discrete:
        return Discrete(2)


def make_memory_chain(
    memory_length: int = 5, num_bits: int = 1, max_episode_steps: int = 1000
) -> tuple[MemoryChain, MemoryChainParams]:
    check_positive_int(memory_length, "memory_length")
    check_positive_int(num_bits, "num_bits")
    check_positive_int(max_episode_steps, "max_episode_steps")
    return MemoryChain(), MemoryChainParams(
        memory_length=memory_length, num_bits=num_bits, max_steps_in_episode=max_episode_steps
    )


register("MemoryChain-bsuite", make_memory_chain)
