"""simple_push: an adversary pushes the good agent away from its goal (mpe2's ``simple_push_v3``).

Reference: ``mpe2/simple_push/simple_push.py``. ``adversary_0`` and ``agent_0`` (size 0.05, both
colliding, silent) and two landmarks (not colliding); one landmark, drawn at reset, is the goal
of both (``MPEState.goal``). The good agent's reward is ``-|agent - goal|``; the adversary's is
``|agent - goal| - |adversary - goal|``.

Observations (8 and 19 values)::

    adversary: [vel, landmark_j - pos, other - pos]
    agent:     [vel, goal - pos, own colour, landmark_j - pos, landmark colours, other - pos]

Colours are mpe2's: landmark ``j`` is 0.1 everywhere but 0.9 in channel ``j + 1``; the good
agent is 0.25 everywhere but 0.75 in channel ``goal + 1``, so its colour names the goal.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl.envs.marl.core import Teams
from funrl.envs.marl.mpe import (
    Entity,
    MPEEnvironment,
    MPEParams,
    MPEState,
    distance,
    entity_at,
    relative,
    shared_goal,
)
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimplePush", "make_simple_push"]

LANDMARK_COLOURS = ((0.1, 0.9, 0.1), (0.1, 0.1, 0.9))


class SimplePush(MPEEnvironment):
    """``adversary_0`` and ``agent_0``, two landmarks."""

    env_id = "simple_push"
    dim_c = 2

    def __init__(self, continuous_actions: bool = False):
        agents = [Entity("adversary_0"), Entity("agent_0")]
        landmarks = [Entity(f"landmark {i}", collide=False) for i in range(2)]
        super().__init__(agents, landmarks, continuous_actions)

    @property
    def default_params(self) -> MPEParams:
        return MPEParams()

    def reset_goal(self, unit: torch.Tensor) -> torch.Tensor:
        return shared_goal(unit[0], self.num_landmarks, self.num_agents)

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        pos, vel = state.pos[..., :2, :], state.vel[..., :2, :]
        landmarks, goal = state.pos[..., 2:, :], state.goal[..., 1]
        colours = torch.tensor(LANDMARK_COLOURS, device=pos.device)
        own_colour = 0.25 + 0.5 * (torch.arange(3, device=pos.device) == (goal + 1).unsqueeze(-1)).float()
        to_landmarks = relative(pos, landmarks)
        to_other = pos.flip(-2) - pos
        to_goal = entity_at(landmarks, goal) - pos[..., 1, :]
        all_colours = colours.flatten().expand(*goal.shape, -1)
        adversary = torch.cat([vel[..., 0, :], to_landmarks[..., 0, :], to_other[..., 0, :]], -1)
        agent = torch.cat(
            [vel[..., 1, :], to_goal, own_colour, to_landmarks[..., 1, :], all_colours, to_other[..., 1, :]],
            -1,
        )
        return {"adversary": adversary.unsqueeze(-2), "agent": agent.unsqueeze(-2)}

    def rewards(self, state: MPEState, params: MPEParams) -> Teams:
        goal = entity_at(state.pos, 2 + state.goal[..., 1])
        to_goal = distance(state.pos[..., :2, :] - goal.unsqueeze(-2))
        return {"adversary": (to_goal[..., 1] - to_goal[..., 0]).unsqueeze(-1), "agent": -to_goal[..., 1:]}


def make_simple_push(**kwargs: Any) -> tuple[SimplePush, MPEParams]:
    """``make("simple_push", max_cycles=25, continuous_actions=False)``."""
    env_kwargs, params = split_kwargs("simple_push", MPEParams, kwargs)
    return SimplePush(**env_kwargs), params


register("simple_push", make_simple_push)
