"""What MinAtar's games share: the 6-action map, sticky actions, the 10x10 grid, option checks."""

from __future__ import annotations

import sys
from typing import Any

import torch

from funrl import random
from funrl.envs.bsuite._common import check_positive_int
from funrl.envs.core import Discrete, Environment, EnvParams

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


def cell_index(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """The flat index ``row * 10 + col`` of a cell of the board (row-major, as ``reshape(100)``)."""
    return row * GRID + col


def bottom_row_index(col: torch.Tensor) -> torch.Tensor:
    """The flat index of the bottom row's ``col`` (paddle, cannon)."""
    return cell_index(bottom_row(col), col)


def bottom_row(col: torch.Tensor) -> torch.Tensor:
    """The bottom row's index, shaped like ``col``."""
    return torch.full_like(col, GRID - 1)


# Boards are uint8 (0/1) inside the games and in their states, and every board-sized operation is
# integer arithmetic (``&``, ``|``, ``*``, gathers, scatters, sums): no comparison, ``where`` or
# bool load/store over a board: inductor's vectorised CPU code handles bool/mask values far less
# well than integer arithmetic (see BENCHMARKS.md), and a bool-board Breakout compiled slower
# than it ran eagerly.
# Observations are bool, as MinAtar's: a uint8 image reinterpreted with ``view(torch.bool)``.


def band(index: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """int64 1 where ``lo <= index <= hi``, else 0, by clamping: a constant board built from
    comparisons is recomputed inside every kernel that reads it as mask code (see above)."""
    return (index - (lo - 1)).clamp(0, 1) * ((hi + 1) - index).clamp(0, 1)


def as_board(board: torch.Tensor) -> torch.Tensor:
    """A state's board as uint8 0/1 (a bool board, as a caller may build one, is converted)."""
    return board.to(torch.uint8)


def board_at(board: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    """``board``'s value at flat index ``cell`` (in ``[0, 100)``), as a bool scalar: one gather per
    env under vmap, where masking the board with a one-hot cell and reducing it reads all 100."""
    return torch.gather(board.reshape(GRID * GRID), 0, cell.reshape(1)).reshape(()) != 0


def set_cell(board: torch.Tensor, cell: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``board`` with flat cell ``cell`` set to ``value`` (a bool scalar): one scatter per env."""
    flat = board.reshape(GRID * GRID)
    return flat.scatter(0, cell.reshape(1), value.to(board.dtype).reshape(1)).reshape(GRID, GRID)


def board_any(board: torch.Tensor) -> torch.Tensor:
    """Whether a uint8 board has any cell set (a sum: no mask reduction over the board)."""
    return board.sum(dtype=torch.int32) > 0


def select_board(cond: torch.Tensor, if_true: torch.Tensor, if_false: torch.Tensor) -> torch.Tensor:
    """``torch.where(cond, if_true, if_false)`` for uint8 boards and a bool scalar, as arithmetic."""
    return if_false ^ ((if_true ^ if_false) * cond.to(torch.uint8))


def board_if(cond: torch.Tensor, board: torch.Tensor) -> torch.Tensor:
    """``board`` where ``cond`` (a bool scalar), else an empty board: ``board & cond``."""
    return board * cond.to(torch.uint8)


def binary_image(cells: list[tuple[torch.Tensor, torch.Tensor]], boards: list[torch.Tensor]) -> torch.Tensor:
    """The bool ``[10, 10, C]`` observation: first one channel per ``(row, col)`` in ``cells``
    (that one cell set; none when it is off the board, as a ball past the paddle after a
    terminal step), then one channel per uint8 board in ``boards``.

    A cell's ``C`` channel bytes are built as integer words (``C`` = 4: one int32 per cell; ``C``
    = 6: three int16), each board shifted into its byte, and reinterpreted as bytes with
    ``view(torch.uint8)``; then the cells are set with one scatter. The words are elementwise
    over the 10 x 10 board, so inductor vectorises them, where an elementwise expression over
    the ``[10, 10, C]`` image indexes the boards by ``i // C`` and compiles to a scalar loop, and
    ``torch.stack`` of channels to ``C`` strided loops. Bytes of a word are in memory order only
    on a little-endian host; elsewhere (and for other ``C``) each word is one byte.
    """
    n_cells, n = len(cells), len(cells) + len(boards)
    device = boards[0].device
    width = next(w for w in (4, 2, 1) if n % w == 0 and (w == 1 or sys.byteorder == "little"))
    dtype = {4: torch.int32, 2: torch.int16, 1: torch.uint8}[width]
    channels: list[torch.Tensor | None] = [None] * n_cells + list(boards)  # None: set by the scatter
    words = []
    for start in range(0, n, width):
        word = torch.zeros(GRID, GRID, dtype=dtype, device=device)
        for byte, board in enumerate(channels[start : start + width]):
            if board is not None:
                word = word | (board.to(dtype) << (8 * byte))
        words.append(word)
    image = torch.stack(words, dim=-1).view(torch.uint8).reshape(GRID * GRID * n)
    # Cell channel k is all zeros before the scatter and only cell k writes to it, so an
    # off-board cell writes its 0 to its channel's first byte: no index outside the image, and
    # no two writes to one byte.
    rows = torch.stack([row for row, _ in cells])
    cols = torch.stack([col for _, col in cells])
    on_board = (rows >= 0) & (rows < GRID) & (cols >= 0) & (cols < GRID)
    channel = torch.arange(n_cells, device=device)
    index = torch.where(on_board, cell_index(rows, cols) * n + channel, channel)
    image = image.scatter(0, index, on_board.to(torch.uint8))
    return image.reshape(GRID, GRID, n).view(torch.bool)


def auto_reset_step_with(
    env: Environment,
    draw: Any,
    state: Any,
    action: torch.Tensor,
    params: EnvParams | None = None,
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
    """``Environment.step_with`` (same draws, same outputs) with the state chosen before the
    observation is drawn: ``observation(where(done, reset_state, step_state))`` equals ``where(done,
    reset_obs, step_obs)``, and selects 100-cell uint8 boards instead of bool images. A game
    whose observation is drawn from boards takes it as its ``step_with``
    (``step_with = auto_reset_step_with``)."""
    params = env.default_params if params is None else params
    key_step, (_, state_reset) = draw
    obs_step, state_step, reward, terminated, truncated, info = env.step_env(key_step, state, action, params)
    done = terminated | truncated

    def select(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.dim() == 0:
            return torch.where(done, a, b)
        return select_board(done, a, b)

    state = type(state_step)(*(select(a, b) for a, b in zip(state_reset, state_step, strict=True)))
    info = dict(info)
    info["final_obs"] = obs_step
    return env.observation(state, params), state, reward, terminated, truncated, info
