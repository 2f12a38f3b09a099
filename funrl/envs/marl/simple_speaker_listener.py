"""simple_speaker_listener: a speaker names the goal to a listener (mpe2's ``simple_speaker_listener_v4``).

Reference: ``mpe2/simple_speaker_listener/simple_speaker_listener.py``. ``speaker_0`` (immovable,
speaks ``dim_c = 3`` words) and ``listener_0`` (moves, silent), size 0.075, not colliding; three
landmarks (size 0.04). The goal landmark, drawn at reset, is ``MPEState.goal`` (the same entry for
both agents). Both agents get ``-|listener - goal|^2`` (squared distance).

Observations::

    speaker:  [colour of the goal landmark]                               (3)
    listener: [vel, landmark_j - pos, the speaker's message]              (11)

Landmark colours are mpe2's (0.65 in channel ``j``, 0.15 elsewhere). The speaker's actions are
``Discrete(3)`` words (continuous: the 3 message values), the listener's the five moves.
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
    entity_at,
    relative,
    shared_goal,
)
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimpleSpeakerListener", "make_simple_speaker_listener"]

LANDMARK_COLOURS = ((0.65, 0.15, 0.15), (0.15, 0.65, 0.15), (0.15, 0.15, 0.65))


class SimpleSpeakerListener(MPEEnvironment):
    """``speaker_0`` then ``listener_0`` (two teams of one), three landmarks."""

    env_id = "simple_speaker_listener"
    dim_c = 3

    def __init__(self, continuous_actions: bool = False):
        agents = [
            Entity("speaker_0", size=0.075, movable=False, collide=False, silent=False),
            Entity("listener_0", size=0.075, collide=False),
        ]
        landmarks = [Entity(f"landmark {i}", size=0.04, collide=False) for i in range(3)]
        super().__init__(agents, landmarks, continuous_actions)

    @property
    def default_params(self) -> MPEParams:
        return MPEParams()

    def reset_goal(self, unit: torch.Tensor) -> torch.Tensor:
        return shared_goal(unit[0], self.num_landmarks, self.num_agents)

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        goal_colour = torch.tensor(LANDMARK_COLOURS, device=state.pos.device)[state.goal[..., 0]]
        to_landmarks = relative(state.pos[..., 1:2, :], state.pos[..., 2:, :])
        listener = torch.cat([state.vel[..., 1:2, :], to_landmarks, state.comm[..., 0:1, :]], -1)
        return {"speaker": goal_colour.unsqueeze(-2), "listener": listener}

    def rewards(self, state: MPEState, params: MPEParams) -> Teams:
        goal = entity_at(state.pos, 2 + state.goal[..., 0])
        reward = -(state.pos[..., 1, :] - goal).square().sum(-1, keepdim=True)
        return {"speaker": reward, "listener": reward}


def make_simple_speaker_listener(**kwargs: Any) -> tuple[SimpleSpeakerListener, MPEParams]:
    """``make("simple_speaker_listener", max_cycles=25, continuous_actions=False)``."""
    env_kwargs, params = split_kwargs("simple_speaker_listener", MPEParams, kwargs)
    return SimpleSpeakerListener(**env_kwargs), params


register("simple_speaker_listener", make_simple_speaker_listener)
