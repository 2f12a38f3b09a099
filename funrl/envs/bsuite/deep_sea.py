"""bsuite DeepSea: an N x N grid where only always going "right" reaches the treasure (deep exploration).

Reference: ``bsuite/environments/deep_sea.py`` (pip ``bsuite`` 0.3.6); gymnax's
``gymnax/environments/bsuite/deep_sea.py`` for the pure form. Rules as in bsuite: start at
row 0, column 0; each step goes down one row; the action that means "right" in a cell is
``action_mapping[row, column]`` (random 0/1 per cell, or all 1 with ``randomize_actions=False``).
Right moves one column right (in the stochastic variant it fails with probability ``1/N``) and
costs ``unscaled_move_cost / N``; left moves one column left (clipped); choosing right in the
last column pays ``+1`` (also when the move then fails, as bsuite). The stochastic variant adds
``N(0, 1)`` noise to the reward in the last row's end columns. The episode terminates after
``N`` steps (row reaches ``N``), with an all-zero observation. Observation: float32 ``[N, N]``,
one-hot at the agent.

Deliberate differences: ``N`` is ``params.size``; the action mapping is a tensor in the params
(drawn from ``mapping_seed`` with funrl's keys, not numpy's ``RandomState``), so a vmap over
params gives each environment its own mapping; bsuite's logging counters (bad episodes,
denoised return) are left to wrappers.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.registry import register

__all__ = ["DeepSea", "DeepSeaParams", "DeepSeaState", "make_deep_sea"]


@dataclasses.dataclass(frozen=True)
class DeepSeaParams(EnvParams):
    action_mapping: torch.Tensor | None = None  # int64 [size, size]; None: action 1 is "right" everywhere
    size: int = 10
    deterministic: bool = True
    unscaled_move_cost: float = 0.01
    max_steps_in_episode: int = 1000


class DeepSeaState(NamedTuple):
    row: torch.Tensor
    column: torch.Tensor
    time: torch.Tensor


class DeepSea(Environment[DeepSeaState, DeepSeaParams]):
    def __init__(self, default_params: DeepSeaParams | None = None) -> None:
        self._default_params = default_params

    @property
    def name(self) -> str:
        return "DeepSea-bsuite"

    @property
    def default_params(self) -> DeepSeaParams:
        if self._default_params is None:  # drawn once: the mapping is part of the task
            self._default_params = make_deep_sea()[1]
        return self._default_params

    def observation(self, state: DeepSeaState, params: DeepSeaParams) -> torch.Tensor:
        """One-hot ``[N, N]`` at (row, column); all zeros once the row has left the grid."""
        rows = torch.arange(params.size, device=state.row.device).unsqueeze(1)
        cols = torch.arange(params.size, device=state.row.device).unsqueeze(0)
        return ((rows == state.row) & (cols == state.column)).to(torch.float32)

    def reset_env(self, key: torch.Tensor, params: DeepSeaParams) -> tuple[torch.Tensor, DeepSeaState]:
        zero = torch.zeros((), dtype=torch.int64, device=key.device)
        state = DeepSeaState(row=zero, column=zero, time=zero)
        return self.observation(state, params), state

    def step_env(self, key: torch.Tensor, state: DeepSeaState, action: torch.Tensor, params: DeepSeaParams):
        check_action_static(action, self.action_space(params))
        size = params.size
        key_noise, key_move = random.split(key)
        if params.action_mapping is None:
            right_action = torch.ones((), dtype=torch.int64, device=state.row.device)
        else:
            # Index flat so the lookup batches under vmap; row < size until the episode ends.
            flat = (state.row * size + state.column).clamp(max=size * size - 1)
            right_action = params.action_mapping.to(flat.device).reshape(-1)[flat]  # params may sit on CPU
        action_right = action.to(torch.int64) == right_action
        reward = torch.where(action_right & (state.column == size - 1), 1.0, 0.0)
        if not params.deterministic:
            at_end = (state.row == size - 1) & ((state.column == 0) | (state.column == size - 1))
            reward = reward + torch.where(at_end, random.normal(key_noise, ()), 0.0)
            move_ok = random.uniform(key_move, ()) > 1.0 / size
        else:
            move_ok = torch.ones((), dtype=torch.bool, device=state.row.device)
        reward = reward - torch.where(action_right, params.unscaled_move_cost / size, 0.0)
        column = torch.where(
            action_right,
            torch.where(move_ok, (state.column + 1).clamp(max=size - 1), state.column),
            (state.column - 1).clamp(min=0),
        )
        row = state.row + 1
        time = state.time + 1
        state = DeepSeaState(row=row, column=column, time=time)
        terminated = row == size
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(state, params), state, reward.to(torch.float32), terminated, truncated, {}

    def observation_space(self, params: DeepSeaParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(low=0.0, high=1.0, shape=(params.size, params.size), dtype=torch.float32)

    def action_space(self, params: DeepSeaParams | None = None) -> Discrete:
        return Discrete(2)


def make_deep_sea(
    size: int = 10,
    deterministic: bool = True,
    unscaled_move_cost: float = 0.01,
    randomize_actions: bool = True,
    mapping_seed: int = 0,
    max_episode_steps: int = 1000,
) -> tuple[DeepSea, DeepSeaParams]:
    """DeepSea of ``size`` (bsuite's sweep uses 10 .. 50); the mapping is drawn from ``mapping_seed``."""
    check_positive_int(size, "size")
    check_positive_int(max_episode_steps, "max_episode_steps")
    if randomize_actions:
        mapping = random.bernoulli(random.key(mapping_seed), 0.5, (size, size)).to(torch.int64)
    else:
        mapping = None
    params = DeepSeaParams(
        action_mapping=mapping,
        size=size,
        deterministic=bool(deterministic),
        unscaled_move_cost=float(unscaled_move_cost),
        max_steps_in_episode=max_episode_steps,
    )
    return DeepSea(params), params


register("DeepSea-bsuite", make_deep_sea)
