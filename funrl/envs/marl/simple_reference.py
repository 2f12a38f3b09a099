"""simple_reference: two agents guide each other to landmarks by talking (mpe2's ``simple_reference_v3``).

Reference: ``mpe2/simple_reference/simple_reference.py``. ``agent_0`` and ``agent_1`` (team
``agent``, size 0.05, not colliding) move and speak (``dim_c = 10``); three landmarks. Each agent
``i`` draws a goal landmark ``goal[i]`` at reset that only it knows and the OTHER agent must reach:
its local reward is ``-|other - landmark[goal[i]]|``; the global reward is the mean of the local
ones, and each agent gets ``(1 - local_ratio) * global + local_ratio * local``.

Observation of agent ``i`` (21 values)::

    [vel_i, landmark_j - pos_i, colour of landmark goal[i], message of the other agent]

Landmark colours are mpe2's (0.75 in channel ``j``, 0.25 elsewhere). Discrete actions are
``move + 5 * word`` (50), continuous ones 5 movement and 10 message values (15).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from funrl.envs.marl.core import Teams
from funrl.envs.marl.mpe import (
    Entity,
    MPEEnvironment,
    MPEParams,
    MPEState,
    choose_landmark,
    distance,
    entity_at,
    of_others,
    relative,
)
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimpleReference", "SimpleReferenceParams", "make_simple_reference"]

LANDMARK_COLOURS = ((0.75, 0.25, 0.25), (0.25, 0.75, 0.25), (0.25, 0.25, 0.75))


@dataclasses.dataclass(frozen=True)
class SimpleReferenceParams(MPEParams):
    """``local_ratio`` weighs each agent's own reward against the mean of both."""

    local_ratio: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.local_ratio <= 1.0:
            raise ValueError(f"local_ratio: expected a value in [0, 1], got {self.local_ratio}")


class SimpleReference(MPEEnvironment):
    """``agent_0`` and ``agent_1``, speaking and moving; three landmarks."""

    env_id = "simple_reference"
    dim_c = 10

    def __init__(self, continuous_actions: bool = False):
        agents = [Entity(f"agent_{i}", collide=False, silent=False) for i in range(2)]
        landmarks = [Entity(f"landmark {i}", collide=False) for i in range(3)]
        super().__init__(agents, landmarks, continuous_actions)

    @property
    def default_params(self) -> SimpleReferenceParams:
        return SimpleReferenceParams()

    def reset_goal(self, unit: torch.Tensor) -> torch.Tensor:
        return choose_landmark(unit, self.num_landmarks)

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        pos, vel = state.pos[..., :2, :], state.vel[..., :2, :]
        goal_colour = torch.tensor(LANDMARK_COLOURS, device=pos.device)[state.goal]
        messages = of_others(state.comm).flatten(-2)
        return {"agent": torch.cat([vel, relative(pos, state.pos[..., 2:, :]), goal_colour, messages], -1)}

    def rewards(self, state: MPEState, params: SimpleReferenceParams) -> Teams:
        other = state.pos[..., :2, :].flip(-2)
        goals = torch.stack([entity_at(state.pos, 2 + state.goal[..., i]) for i in range(2)], -2)
        local = -distance(other - goals)
        shared = local.mean(-1, keepdim=True) * (1 - params.local_ratio)
        return {"agent": shared + local * params.local_ratio}


def make_simple_reference(**kwargs: Any) -> tuple[SimpleReference, SimpleReferenceParams]:
    """``make("simple_reference", local_ratio=0.5, max_cycles=25, continuous_actions=False)``."""
    env_kwargs, params = split_kwargs("simple_reference", SimpleReferenceParams, kwargs)
    return SimpleReference(**env_kwargs), params


register("simple_reference", make_simple_reference)
