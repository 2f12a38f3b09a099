"""MinAtar games in pure form (registered as ``<Name>-MinAtar``, gymnax's ids)."""

from funrl.envs.minatar.breakout import Breakout, BreakoutParams, BreakoutState
from funrl.envs.minatar.space_invaders import SpaceInvaders, SpaceInvadersParams, SpaceInvadersState

__all__ = [
    "Breakout",
    "BreakoutParams",
    "BreakoutState",
    "SpaceInvaders",
    "SpaceInvadersParams",
    "SpaceInvadersState",
]
