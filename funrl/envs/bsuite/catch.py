"""bsuite Catch: move a paddle to catch a ball falling straight down its column.

Reference: ``bsuite/environments/catch.py`` (pip ``bsuite`` 0.3.6); gymnax's
``gymnax/environments/bsuite/catch.py`` for the pure form. Rules as in bsuite: the ball starts
in row 0 at a uniform column, the paddle in the bottom row's middle column (``columns // 2``);
actions ``0, 1, 2`` move the paddle ``-1, 0, +1`` (clipped to the board), then the ball drops
one row; when it reaches the paddle's row the episode terminates with reward ``+1`` if caught,
else ``-1``; every other step gives ``0``. Observation: float32 ``[rows, columns]``, 1 where the
ball or the paddle is. Episodes last ``rows - 1`` steps, so the time limit never binds at its
default. Randomness comes from funrl keys instead of numpy's ``RandomState`` (same distribution).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.registry import register

__all__ = ["Catch", "CatchParams", "CatchState"]


@dataclasses.dataclass(frozen=True)
class CatchParams(EnvParams):
    rows: int = 10
    columns: int = 5
    max_steps_in_episode: int = 1000


class CatchState(NamedTuple):
    ball_x: torch.Tensor  # int64 column of the ball
    ball_y: torch.Tensor  # int64 row of the ball
    paddle_x: torch.Tensor  # int64 column of the paddle (its row is rows - 1)
    time: torch.Tensor


class Catch(Environment[CatchState, CatchParams]):
    @property
    def name(self) -> str:
        return "Catch-bsuite"

    @property
    def default_params(self) -> CatchParams:
        return CatchParams()

    def observation(self, state: CatchState, params: CatchParams) -> torch.Tensor:
        """The board: 1.0 at the ball and at the paddle, float32 ``[rows, columns]``."""
        rows = torch.arange(params.rows, device=state.ball_x.device).unsqueeze(1)
        cols = torch.arange(params.columns, device=state.ball_x.device).unsqueeze(0)
        ball = (rows == state.ball_y) & (cols == state.ball_x)
        paddle = (rows == params.rows - 1) & (cols == state.paddle_x)
        return (ball | paddle).to(torch.float32)

    def reset_env(self, key: torch.Tensor, params: CatchParams) -> tuple[torch.Tensor, CatchState]:
        zero = torch.zeros((), dtype=torch.int64, device=key.device)
        state = CatchState(
            ball_x=random.randint(key, (), 0, params.columns),
            ball_y=zero,
            paddle_x=zero + params.columns // 2,
            time=zero,
        )
        return self.observation(state, params), state

    def step_env(self, key: torch.Tensor, state: CatchState, action: torch.Tensor, params: CatchParams):
        check_action_static(action, self.action_space(params))
        paddle_x = torch.clamp(state.paddle_x + action.to(torch.int64) - 1, 0, params.columns - 1)
        ball_y = state.ball_y + 1
        time = state.time + 1
        state = CatchState(state.ball_x, ball_y, paddle_x, time)
        terminated = ball_y == params.rows - 1
        caught = paddle_x == state.ball_x
        reward = torch.where(terminated, torch.where(caught, 1.0, -1.0), 0.0).to(torch.float32)
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(state, params), state, reward, terminated, truncated, {}

    def observation_space(self, params: CatchParams | None = None) -> Box:
        params = self.default_params if params is None else params
        return Box(low=0.0, high=1.0, shape=(params.rows, params.columns), dtype=torch.float32)

    def action_space(self, params: CatchParams | None = None) -> Discrete:
        return Discrete(3)


def make_catch(rows: int = 10, columns: int = 5, max_episode_steps: int = 1000) -> tuple[Catch, CatchParams]:
    check_positive_int(rows, "rows")
    check_positive_int(columns, "columns")
    if rows < 2:
        raise ValueError(f"rows: expected at least 2 (ball and paddle rows), got {rows}")
    check_positive_int(max_episode_steps, "max_episode_steps")
    return Catch(), CatchParams(rows=rows, columns=columns, max_steps_in_episode=max_episode_steps)


register("Catch-bsuite", make_catch)
