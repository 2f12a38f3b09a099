"""MinAtar Breakout: bounce a ball off a paddle to break three rows of bricks.

Reference: ``minatar/environments/breakout.py`` and ``minatar/environment.py`` (pip ``minatar``
1.0.15); gymnax's ``gymnax/environments/minatar/breakout.py`` for the pure form. Rules as in
MinAtar: the ball starts at row 3 in column 0 moving down-right or column 9 moving down-left
(coin flip); the paddle starts at column 4; bricks fill rows 1-3. A brick hit pays ``+1`` and
bounces the ball (only one brick per consecutive strike); the paddle bounces the ball back (or
sideways off its corner); missing it terminates. When the ball reaches the bottom with no
bricks left, the bricks are refilled. Breakout has no difficulty ramp in MinAtar.

Observation: **bool** ``[10, 10, 4]`` (channels paddle, ball, trail, brick), MinAtar's layout.
Actions: MinAtar's default full set of 6 (``n l u r d f``; only ``l``/``r`` move), or its
minimal set ``(n, l, r)`` with ``use_minimal_action_set=True`` (MinAtar's gym ``-v1`` ids).
Sticky actions with ``sticky_action_prob=0.1`` as ``minatar.Environment``'s default.

The state keeps ``brick_map`` as uint8 0/1 ``[10, 10]`` boards (a bool board is accepted):
inductor's CPU code for bool boards is many times slower (see ``_common``).

Deliberate differences: the previous action (for sticky actions) restarts as no-op on each new
episode, where MinAtar carries it over from the last episode; MinAtar has no time limit, funrl
truncates at ``max_steps_in_episode`` (1000 by default, gymnax's value; raise it to disable).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl import random
from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.minatar._common import (
    GRID,
    action_space,
    active_action_set,
    as_board,
    auto_reset_step_with,
    band,
    binary_image,
    board_any,
    board_at,
    board_if,
    bottom_row,
    cell_index,
    check_minatar_options,
    grid_coords,
    move_column,
    resolve_action,
    set_cell,
)
from funrl.envs.registry import register

__all__ = ["Breakout", "BreakoutParams", "BreakoutState", "make_breakout"]

MINIMAL_ACTION_SET = (0, 1, 3)  # n, l, r


@dataclasses.dataclass(frozen=True)
class BreakoutParams(EnvParams):
    sticky_action_prob: float = 0.1
    use_minimal_action_set: bool = False
    max_steps_in_episode: int = 1000


class BreakoutState(NamedTuple):
    ball_x: torch.Tensor
    ball_y: torch.Tensor
    ball_dir: torch.Tensor  # 0 up-left, 1 up-right, 2 down-right, 3 down-left
    pos: torch.Tensor  # paddle column
    brick_map: torch.Tensor  # uint8 [10, 10], 1 where a brick is (see _common: no bool boards)
    strike: torch.Tensor  # bool: the ball hit a brick on the previous step
    last_x: torch.Tensor
    last_y: torch.Tensor
    last_action: torch.Tensor  # full-set index, for sticky actions
    time: torch.Tensor


def initial_bricks(device: torch.device) -> torch.Tensor:
    rows, _ = grid_coords(device)
    return band(rows, 1, 3).expand(GRID, GRID).to(torch.uint8)


class Breakout(Environment[BreakoutState, BreakoutParams]):
    @property
    def name(self) -> str:
        return "Breakout-MinAtar"

    @property
    def default_params(self) -> BreakoutParams:
        return BreakoutParams()

    def observation(self, state: BreakoutState, params: BreakoutParams) -> torch.Tensor:
        """bool ``[10, 10, 4]``: paddle, ball, trail (the ball's previous cell), bricks."""
        paddle = (bottom_row(state.pos), state.pos)
        ball = (state.ball_y, state.ball_x)
        trail = (state.last_y, state.last_x)
        return binary_image([paddle, ball, trail], [as_board(state.brick_map)])

    def reset_env(self, key: torch.Tensor, params: BreakoutParams) -> tuple[torch.Tensor, BreakoutState]:
        start_right = random.randint(key, (), 0, 2)  # MinAtar: [(0, 2), (9, 3)][randint(2)]
        ball_x = start_right * 9
        ball_y = torch.full((), 3, dtype=torch.int64, device=key.device)
        state = BreakoutState(
            ball_x=ball_x,
            ball_y=ball_y,
            ball_dir=2 + start_right,
            pos=torch.full((), 4, dtype=torch.int64, device=key.device),
            brick_map=initial_bricks(key.device),
            strike=torch.zeros((), dtype=torch.bool, device=key.device),
            last_x=ball_x,
            last_y=ball_y,
            last_action=torch.zeros((), dtype=torch.int64, device=key.device),
            time=torch.zeros((), dtype=torch.int64, device=key.device),
        )
        return self.observation(state, params), state

    def step_env(self, key: torch.Tensor, state: BreakoutState, action: torch.Tensor, params: BreakoutParams):
        check_action_static(action, self.action_space(params))
        action_set = active_action_set(MINIMAL_ACTION_SET, params.use_minimal_action_set)
        a = resolve_action(key, action, state.last_action, action_set, params.sticky_action_prob)
        pos = move_column(state.pos, a)

        # Directions 0..3 step by (-1,-1), (+1,-1), (+1,+1), (-1,+1); the flips are bit tricks on
        # MinAtar's tables: [1,0,3,2] = d ^ 1 (x), [3,2,1,0] = 3 - d (y), [2,3,0,1] = d ^ 2 (both).
        d = state.ball_dir
        dx = torch.where((d == 1) | (d == 2), 1, -1)
        dy = torch.where(d >= 2, 1, -1)
        new_x = state.ball_x + dx
        new_y = state.ball_y + dy
        hit_side = (new_x < 0) | (new_x > GRID - 1)
        new_x = new_x.clamp(0, GRID - 1)
        d = torch.where(hit_side, d ^ 1, d)

        # Positions stay flat cell indices: the brick under the ball is one gather, the broken
        # brick is cleared with one scatter, the refill is an elementwise ``|``, and MinAtar's
        # refill test (any brick left?) is the one reduction over the board.
        hit_top = new_y < 0
        bricks = as_board(state.brick_map)
        cell = cell_index(new_y.clamp(0, GRID - 1), new_x)
        brick_there = board_at(bricks, cell)
        hit_brick = ~hit_top & brick_there
        at_bottom = ~hit_top & ~hit_brick & (new_y == GRID - 1)
        breaks = hit_brick & ~state.strike
        reward = breaks.to(torch.float32)
        refill = at_bottom & ~board_any(bricks)
        brick_map = set_cell(bricks, cell, brick_there & ~breaks) | board_if(
            refill, initial_bricks(key.device)
        )
        paddle_under_ball = state.ball_x == pos
        paddle_at_landing = new_x == pos
        bounce_back = at_bottom & paddle_under_ball
        bounce_corner = at_bottom & ~paddle_under_ball & paddle_at_landing
        terminated = at_bottom & ~paddle_under_ball & ~paddle_at_landing

        d = torch.where(hit_top | breaks | bounce_back, 3 - d, d)
        d = torch.where(bounce_corner, d ^ 2, d)
        new_y = torch.where(hit_top, 0, new_y)
        new_y = torch.where(breaks | bounce_back | bounce_corner, state.ball_y, new_y)
        time = state.time + 1
        state = BreakoutState(
            ball_x=new_x,
            ball_y=new_y,
            ball_dir=d,
            pos=pos,
            brick_map=brick_map,
            strike=hit_brick,
            last_x=state.ball_x,
            last_y=state.ball_y,
            last_action=a,
            time=time,
        )
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(state, params), state, reward, terminated, truncated, {}

    # Environment.step's auto-reset, with the observation drawn once from the chosen state.
    step_with = auto_reset_step_with

    def observation_space(self, params: BreakoutParams | None = None) -> Box:
        return Box(low=False, high=True, shape=(GRID, GRID, 4), dtype=torch.bool)

    def action_space(self, params: BreakoutParams | None = None) -> Discrete:
        params = self.default_params if params is None else params
        return action_space(MINIMAL_ACTION_SET, params.use_minimal_action_set)


def make_breakout(
    sticky_action_prob: float = 0.1, use_minimal_action_set: bool = False, max_episode_steps: int = 1000
) -> tuple[Breakout, BreakoutParams]:
    check_minatar_options(sticky_action_prob, max_episode_steps)
    params = BreakoutParams(
        sticky_action_prob=float(sticky_action_prob),
        use_minimal_action_set=bool(use_minimal_action_set),
        max_steps_in_episode=max_episode_steps,
    )
    return Breakout(), params


register("Breakout-MinAtar", make_breakout)
