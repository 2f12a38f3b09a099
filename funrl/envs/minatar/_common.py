"""What MinAtar's games share: the 6-action map, sticky actions, the 10x10 grid."""

from __future__ import annotations

import torch

from funrl import random

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


def grid_coords(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column index grids ``[10, 1]`` and ``[1, 10]`` (broadcast to the board)."""
    idx = torch.arange(GRID, device=device)
    return idx.unsqueeze(1), idx.unsqueeze(0)


def one_hot_cell(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """A bool ``[10, 10]`` board true at ``(row, col)`` (no indexing: batches under vmap)."""
    rows, cols = grid_coords(row.device)
    return (rows == row) & (cols == col)
