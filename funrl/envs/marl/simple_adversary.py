"""simple_adversary: good agents hide which landmark is the target (mpe2's ``simple_adversary_v3``).

Reference: ``mpe2/simple_adversary/simple_adversary.py``. One ``adversary`` and ``N`` good agents
(team ``agent``), all of size 0.15, silent and not colliding; ``N`` landmarks (size 0.08). One
landmark, drawn uniformly at reset, is the goal (``MPEState.goal``, the same for every agent).
The adversary's reward is ``-|adversary - goal|``; each good agent's is
``-min over good agents |agent - goal| + |adversary - goal|`` (shared).

Observations (8 and 10 values for ``N = 2``)::

    adversary: [landmark_j - pos, pos_k - pos (k != self)]
    agent:     [goal - pos, landmark_j - pos, pos_k - pos (k != self)]

mpe2's partial observability options are not provided.
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
    of_others,
    relative,
    shared_goal,
)
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimpleAdversary", "make_simple_adversary"]


class SimpleAdversary(MPEEnvironment):
    """``adversary_0`` then ``agent_0 .. agent_{N-1}``, and ``N`` landmarks."""

    env_id = "simple_adversary"
    dim_c = 2

    def __init__(self, num_good: int = 2, continuous_actions: bool = False):
        if isinstance(num_good, bool) or not isinstance(num_good, int) or num_good < 1:
            raise ValueError(f"N: expected an int >= 1, got {num_good!r}")
        agents = [Entity("adversary_0", size=0.15, collide=False)]
        agents += [Entity(f"agent_{i}", size=0.15, collide=False) for i in range(num_good)]
        landmarks = [Entity(f"landmark {i}", size=0.08, collide=False) for i in range(num_good)]
        super().__init__(agents, landmarks, continuous_actions)

    @property
    def default_params(self) -> MPEParams:
        return MPEParams()

    def reset_goal(self, unit: torch.Tensor) -> torch.Tensor:
        return shared_goal(unit[0], self.num_landmarks, self.num_agents)

    def goal_pos(self, state: MPEState) -> torch.Tensor:
        """``[..., 2]``: the goal landmark's position (every agent's goal is the same)."""
        return entity_at(state.pos, self.num_agents + state.goal[..., 0])

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        n = self.num_agents
        pos = state.pos[..., :n, :]
        to_others = (of_others(pos) - pos.unsqueeze(-2)).flatten(-2)
        seen = torch.cat([relative(pos, state.pos[..., n:, :]), to_others], -1)
        to_goal = self.goal_pos(state).unsqueeze(-2) - pos[..., 1:, :]
        return {"adversary": seen[..., :1, :], "agent": torch.cat([to_goal, seen[..., 1:, :]], -1)}

    def rewards(self, state: MPEState, params: MPEParams) -> Teams:
        n = self.num_agents
        to_goal = distance(state.pos[..., :n, :] - self.goal_pos(state).unsqueeze(-2))  # [..., A]
        agent = -to_goal[..., 1:].min(-1).values + to_goal[..., 0]
        return {"adversary": -to_goal[..., :1], "agent": agent.unsqueeze(-1).expand(*agent.shape, n - 1)}


def make_simple_adversary(**kwargs: Any) -> tuple[SimpleAdversary, MPEParams]:
    """``make("simple_adversary", N=2, max_cycles=25, continuous_actions=False)``."""
    env_kwargs, params = split_kwargs("simple_adversary", MPEParams, kwargs, N="num_good")
    return SimpleAdversary(**env_kwargs), params


register("simple_adversary", make_simple_adversary)
