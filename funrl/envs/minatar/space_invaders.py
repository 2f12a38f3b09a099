"""MinAtar SpaceInvaders: shoot down a descending, shooting block of aliens from a cannon.

Reference: ``minatar/environments/space_invaders.py`` and ``minatar/environment.py`` (pip
``minatar`` 1.0.15); gymnax's ``gymnax/environments/minatar/space_invaders.py`` for the pure
form. Rules as in MinAtar, in its order within a step: the cannon fires (if its cool-down of 5
is over) or moves; friendly bullets move up, enemy bullets down (one hit on the cannon
terminates); the aliens (a 4 x 6 block starting at rows 0-3, columns 2-7, moving left) move one
column every ``min(#aliens, enemy_move_interval)`` steps, and step down a row and reverse at a
wall (reaching the cannon, or the bottom row at a wall, terminates); every 10 steps the alien
nearest the cannon's column (ties: the left one; its lowest cell) shoots; each alien hit by a
friendly bullet pays ``+1``. When all aliens are gone a new block appears and, with difficulty
ramping (MinAtar's default), ``enemy_move_interval`` drops by one (from 12, down to 6).

Observation: **bool** ``[10, 10, 6]`` (cannon, alien, alien_left, alien_right, friendly_bullet,
enemy_bullet), MinAtar's layout. Actions: MinAtar's default full set of 6 (``n l u r d f``),
or the minimal set ``(n, l, r, f)`` with ``use_minimal_action_set=True``. Sticky actions with
probability 0.1 as ``minatar.Environment``'s default.

The state keeps the bullet and alien maps as uint8 0/1 ``[10, 10]`` boards (a bool board is accepted):
inductor's CPU code for bool boards is many times slower (see ``_common``).

Deliberate differences: the previous action (for sticky actions) restarts as no-op on each new
episode; funrl truncates at ``max_steps_in_episode`` (1000 by default, gymnax's value), MinAtar
has no time limit.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from funrl.envs.core import Box, Discrete, Environment, EnvParams, check_action_static, time_limit_reached
from funrl.envs.minatar._common import (
    FIRE,
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
    bottom_row_index,
    cell_index,
    check_minatar_options,
    grid_coords,
    move_column,
    resolve_action,
    select_board,
    set_cell,
)
from funrl.envs.registry import register

__all__ = ["SpaceInvaders", "SpaceInvadersParams", "SpaceInvadersState", "make_space_invaders"]

MINIMAL_ACTION_SET = (0, 1, 3, 5)  # n, l, r, f
SHOT_COOL_DOWN = 5
ENEMY_MOVE_INTERVAL = 12
ENEMY_SHOT_INTERVAL = 10
FASTEST_MOVE_INTERVAL = 6


@dataclasses.dataclass(frozen=True)
class SpaceInvadersParams(EnvParams):
    sticky_action_prob: float = 0.1
    use_minimal_action_set: bool = False
    ramping: bool = True
    max_steps_in_episode: int = 1000


class SpaceInvadersState(NamedTuple):
    pos: torch.Tensor  # cannon column (row 9)
    # Boards: uint8 [10, 10], 1 where a bullet / alien is (see _common: no bool boards).
    f_bullet_map: torch.Tensor
    e_bullet_map: torch.Tensor
    alien_map: torch.Tensor
    alien_dir: torch.Tensor  # -1 left, +1 right
    enemy_move_interval: torch.Tensor
    alien_move_timer: torch.Tensor
    alien_shot_timer: torch.Tensor
    ramp_index: torch.Tensor
    shot_timer: torch.Tensor
    last_action: torch.Tensor  # full-set index, for sticky actions
    time: torch.Tensor


def initial_aliens(device: torch.device) -> torch.Tensor:
    rows, cols = grid_coords(device)
    return (band(rows, 0, 3) * band(cols, 2, 7)).to(torch.uint8)


def shift_rows(board: torch.Tensor, shift: int) -> torch.Tensor:
    """``np.roll`` by ``shift`` (-1: up, +1: down) rows, then clear the row that wrapped in
    (MinAtar's bullet move)."""
    # Rows move by slicing and concatenating (contiguous copies); ``torch.roll`` along rows
    # compiled to a scalar loop with a modulo per cell.
    empty = torch.zeros(1, GRID, dtype=board.dtype, device=board.device)
    return torch.cat([board[1:], empty]) if shift < 0 else torch.cat([empty, board[:-1]])


def nearest_alien_shot(alien_map: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat cell that fires and whether any alien can: in the occupied column nearest ``pos``
    (ties to the left, as MinAtar's stable sort of columns by distance), the alien lowest on the
    screen. Per column and per row only (10 values), never a mask over the board."""
    _, cols = grid_coords(alien_map.device)
    col_idx = cols[0]
    occupied = alien_map.sum(dim=0, dtype=torch.int32) > 0  # [10] columns
    order = (col_idx - pos).abs() * GRID + col_idx  # distance first, then column
    order = torch.where(occupied, order, GRID * GRID * 2)
    column = torch.argmin(order)
    in_column = torch.gather(alien_map, 1, column.reshape(1, 1).expand(GRID, 1)).reshape(GRID)
    lowest = (in_column.to(torch.int64) * (col_idx + 1)).amax() - 1  # the lowest occupied row
    return cell_index(lowest.clamp(min=0), column), occupied.any()


class SpaceInvaders(Environment[SpaceInvadersState, SpaceInvadersParams]):
    @property
    def name(self) -> str:
        return "SpaceInvaders-MinAtar"

    @property
    def default_params(self) -> SpaceInvadersParams:
        return SpaceInvadersParams()

    def observation(self, state: SpaceInvadersState, params: SpaceInvadersParams) -> torch.Tensor:
        cannon = (bottom_row(state.pos), state.pos)
        aliens = as_board(state.alien_map)
        moving_left = state.alien_dir < 0
        boards = [aliens, board_if(moving_left, aliens), board_if(~moving_left, aliens)]
        return binary_image([cannon], [*boards, as_board(state.f_bullet_map), as_board(state.e_bullet_map)])

    def reset_env(
        self, key: torch.Tensor, params: SpaceInvadersParams
    ) -> tuple[torch.Tensor, SpaceInvadersState]:
        def scalar(v: int) -> torch.Tensor:
            return torch.full((), v, dtype=torch.int64, device=key.device)

        empty = torch.zeros(GRID, GRID, dtype=torch.uint8, device=key.device)
        state = SpaceInvadersState(
            pos=scalar(5),
            f_bullet_map=empty,
            e_bullet_map=empty.clone(),
            alien_map=initial_aliens(key.device),
            alien_dir=scalar(-1),
            enemy_move_interval=scalar(ENEMY_MOVE_INTERVAL),
            alien_move_timer=scalar(ENEMY_MOVE_INTERVAL),
            alien_shot_timer=scalar(ENEMY_SHOT_INTERVAL),
            ramp_index=scalar(0),
            shot_timer=scalar(0),
            last_action=scalar(0),
            time=scalar(0),
        )
        return self.observation(state, params), state

    def step_env(
        self, key: torch.Tensor, state: SpaceInvadersState, action: torch.Tensor, params: SpaceInvadersParams
    ):
        check_action_static(action, self.action_space(params))
        action_set = active_action_set(MINIMAL_ACTION_SET, params.use_minimal_action_set)
        a = resolve_action(key, action, state.last_action, action_set, params.sticky_action_prob)

        # Boards are uint8 0/1 and only gathered, scattered, shifted and combined arithmetically
        # (see _common); cells are flat indices.
        # The cannon: fire (when cooled down), else move (``f`` is neither ``l`` nor ``r``).
        fires = (a == FIRE) & (state.shot_timer == 0)
        f_bullets = as_board(state.f_bullet_map)
        muzzle = bottom_row_index(state.pos)
        f_bullets = set_cell(f_bullets, muzzle, board_at(f_bullets, muzzle) | fires)
        shot_timer = torch.where(fires, SHOT_COOL_DOWN, state.shot_timer)
        pos = move_column(state.pos, a)
        cannon = bottom_row_index(pos)

        # Bullets.
        f_bullets = shift_rows(f_bullets, -1)
        e_bullets = shift_rows(as_board(state.e_bullet_map), 1)
        terminated = board_at(e_bullets, cannon)

        # Aliens: move on the timer; at a wall reverse and descend.
        aliens = as_board(state.alien_map)
        terminated = terminated | board_at(aliens, cannon)
        moves = state.alien_move_timer == 0
        count = aliens.sum(dtype=torch.int64)
        alien_move_timer = torch.where(
            moves, torch.minimum(count, state.enemy_move_interval), state.alien_move_timer
        )
        at_wall = (board_any(aliens[:, 0]) & (state.alien_dir < 0)) | (
            board_any(aliens[:, GRID - 1]) & (state.alien_dir > 0)
        )
        descend = moves & at_wall
        sideways = moves & ~at_wall
        terminated = terminated | (descend & board_any(aliens[GRID - 1]))
        alien_dir = torch.where(descend, -state.alien_dir, state.alien_dir)
        shifted_side = select_board(
            state.alien_dir > 0, torch.roll(aliens, 1, dims=1), torch.roll(aliens, -1, dims=1)
        )
        aliens = select_board(
            descend, torch.roll(aliens, 1, dims=0), select_board(sideways, shifted_side, aliens)
        )
        terminated = terminated | (moves & board_at(aliens, cannon))

        # The nearest alien shoots on its timer.
        shoots = state.alien_shot_timer == 0
        alien_shot_timer = torch.where(shoots, ENEMY_SHOT_INTERVAL, state.alien_shot_timer)
        shooter, can_shoot = nearest_alien_shot(aliens, pos)
        e_bullets = set_cell(e_bullets, shooter, board_at(e_bullets, shooter) | (shoots & can_shoot))

        # Hits.
        kills = aliens & f_bullets
        reward = kills.sum(dtype=torch.int32).to(torch.float32)
        aliens = aliens ^ kills
        f_bullets = f_bullets ^ kills

        # Timers, and a new wave (faster, with ramping) when the block is cleared.
        shot_timer = shot_timer - (shot_timer > 0).to(torch.int64)
        alien_move_timer = alien_move_timer - 1
        alien_shot_timer = alien_shot_timer - 1
        cleared = ~board_any(aliens)
        ramps = cleared & (state.enemy_move_interval > FASTEST_MOVE_INTERVAL) & params.ramping
        enemy_move_interval = state.enemy_move_interval - ramps.to(torch.int64)
        ramp_index = state.ramp_index + ramps.to(torch.int64)
        aliens = aliens | board_if(cleared, initial_aliens(key.device))

        time = state.time + 1
        state = SpaceInvadersState(
            pos=pos,
            f_bullet_map=f_bullets,
            e_bullet_map=e_bullets,
            alien_map=aliens,
            alien_dir=alien_dir,
            enemy_move_interval=enemy_move_interval,
            alien_move_timer=alien_move_timer,
            alien_shot_timer=alien_shot_timer,
            ramp_index=ramp_index,
            shot_timer=shot_timer,
            last_action=a,
            time=time,
        )
        truncated = time_limit_reached(time, params) & ~terminated
        return self.observation(state, params), state, reward, terminated, truncated, {}

    # Environment.step's auto-reset, with the observation drawn once from the chosen state.
    step_with = auto_reset_step_with

    def observation_space(self, params: SpaceInvadersParams | None = None) -> Box:
        return Box(low=False, high=True, shape=(GRID, GRID, 6), dtype=torch.bool)

    def action_space(self, params: SpaceInvadersParams | None = None) -> Discrete:
        params = self.default_params if params is None else params
        return action_space(MINIMAL_ACTION_SET, params.use_minimal_action_set)


def make_space_invaders(
    sticky_action_prob: float = 0.1,
    use_minimal_action_set: bool = False,
    ramping: bool = True,
    max_episode_steps: int = 1000,
) -> tuple[SpaceInvaders, SpaceInvadersParams]:
    check_minatar_options(sticky_action_prob, max_episode_steps)
    params = SpaceInvadersParams(
        sticky_action_prob=float(sticky_action_prob),
        use_minimal_action_set=bool(use_minimal_action_set),
        ramping=bool(ramping),
        max_steps_in_episode=max_episode_steps,
    )
    return SpaceInvaders(), params


register("SpaceInvaders-MinAtar", make_space_invaders)
