"""What MinAtar's games share: the 6-action map, sticky actions, the 10x10 grid, option checks."""

from __future__ import annotations

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Discrete

# MinAtar's action map ``['n', 'l', 'u', 'r', 'd', 'f']``: indices of the full action set.
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)
NUM_ACTIONS = 6
GRID = 10


def resolve_action(
    key: torch.Tensor,
    action: torch.Tensor,
    last_action: torch.Tensor,
    action_set: tuple[int, ...] | None,
    sticky_action_prob: float,
) -> torch.Tensor:
    """The full-set action the game applies: the agent's (mapped through the minimal set if one is
    used), or with probability ``sticky_action_prob`` the previous one, as
    ``minatar.Environment.act`` does (the draw happens on every step)."""
    action = action.to(torch.int64)
    if action_set is not None:
        table = torch.tensor(action_set, dtype=torch.int64, device=action.device)
        action = (table * (torch.arange(len(action_set), device=action.device) == action)).sum()
    if sticky_action_prob > 0.0:
        sticky = random.uniform(key, ()) < sticky_action_prob
        action = torch.where(sticky, last_action, action)
    return action


def active_action_set(
    minimal_action_set: tuple[int, ...], use_minimal_action_set: bool
) -> tuple[int, ...] | None:
    """The game's minimal set when asked for, else ``None`` (the full set of 6 as is)."""
    return minimal_action_set if use_minimal_action_set else None


def action_space(minimal_action_set: tuple[int, ...], use_minimal_action_set: bool) -> Discrete:
    """``Discrete(len(minimal set))`` or ``Discrete(6)``, as :func:`active_action_set` picks."""
    return Discrete(len(minimal_action_set) if use_minimal_action_set else NUM_ACTIONS)


def move_column(pos: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The paddle/cannon column after a full-set ``action``: ``l``/``r`` step one, within the grid."""
    pos = torch.where(action == LEFT, (pos - 1).clamp(min=0), pos)
    return torch.where(action == RIGHT, (pos + 1).clamp(max=GRID - 1), pos)


def check_minatar_options(sticky_action_prob: float, max_episode_steps: int) -> None:
    """The constructors' shared checks, outside any compiled region."""
    if isinstance(sticky_action_prob, bool) or not isinstance(sticky_action_prob, (int, float)):
        raise TypeError(f"sticky_action_prob: expected a float, got {type(sticky_action_prob).__name__}")
    if not 0.0 <= sticky_action_prob <= 1.0:
        raise ValueError(f"sticky_action_prob: expected a probability in [0, 1], got {sticky_action_prob}")
    check_positive_int(max_episode_steps, "max_episode_steps")


def grid_coords(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column index grids ``[10, 1]`` and ``[1, 10]`` (broadcast to the board)."""
    idx = torch.arange(GRID, device=device)
    return idx.unsqueeze(1), idx.unsqueeze(0)


def one_hot_cell(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """A bool ``[10, 10]`` board true at ``(row, col)`` (no indexing: batches under vmap)."""
    rows, cols = grid_coords(row.device)
    return (rows == row) & (cols == col)


def bottom_row_cell(col: torch.Tensor) -> torch.Tensor:
    """A bool ``[10, 10]`` board true at the bottom row's ``col`` (paddle, cannon)."""
    return one_hot_cell(torch.full_like(col, GRID - 1), col)
