"""simple_spread: N agents cover N landmarks without colliding (mpe2's ``simple_spread_v3``).

Reference: ``mpe2/simple_spread/simple_spread.py``. Agents (team ``agent``, size 0.15, colliding,
silent) and landmarks start uniform in ``[-1, 1]^2``. Every agent's reward is
``(1 - local_ratio) * global + local_ratio * local`` with ``global = -sum over landmarks of the
distance to the nearest agent`` and ``local = -(number of other agents it overlaps)``.

Observation of agent ``i`` (``4 + 2N + 2(N-1) + 2(N-1)``; 18 for N=3)::

    [vel_i, pos_i, landmark_j - pos_i (j < N), pos_k - pos_i (k != i), message_k (k != i)]

The messages are zeros (the agents are silent), as in mpe2. mpe2's curriculum, partial
observability and ``terminate_on_success`` options are not provided.
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
    distance,
    of_others,
    overlapping,
    relative,
)
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimpleSpread", "SimpleSpreadParams", "make_simple_spread"]


@dataclasses.dataclass(frozen=True)
class SimpleSpreadParams(MPEParams):
    """``local_ratio`` weighs the local (collision) reward against the global (coverage) one."""

    local_ratio: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.local_ratio <= 1.0:
            raise ValueError(f"local_ratio: expected a value in [0, 1], got {self.local_ratio}")


class SimpleSpread(MPEEnvironment):
    """``N`` agents ``agent_0 .. agent_{N-1}`` (one team, ``agent``) and ``N`` landmarks."""

    env_id = "simple_spread"
    dim_c = 2

    def __init__(self, num_agents: int = 3, continuous_actions: bool = False, landmark_range: float = 1.0):
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 2:
            raise ValueError(f"num_agents: expected an int >= 2, got {num_agents!r}")
        if (
            isinstance(landmark_range, bool)
            or not isinstance(landmark_range, (int, float))
            or not landmark_range > 0
        ):
            raise ValueError(f"landmark_range: expected a positive number, got {landmark_range!r}")
        self.landmark_range = float(landmark_range)
        agents = [Entity(f"agent_{i}", size=0.15) for i in range(num_agents)]
        landmarks = [Entity(f"landmark {i}", collide=False) for i in range(num_agents)]
        super().__init__(agents, landmarks, continuous_actions)

    @property
    def default_params(self) -> SimpleSpreadParams:
        return SimpleSpreadParams()

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        n = self.num_agents
        pos, vel = state.pos[..., :n, :], state.vel[..., :n, :]
        to_others = of_others(pos) - pos.unsqueeze(-2)  # [..., i, k, 2]
        messages = of_others(state.comm)  # [..., i, k, dim_c]
        landmarks = relative(pos, state.pos[..., n:, :])
        obs = torch.cat([vel, pos, landmarks, to_others.flatten(-2), messages.flatten(-2)], -1)
        return {"agent": obs}

    def rewards(self, state: MPEState, params: SimpleSpreadParams) -> Teams:
        n = self.num_agents
        pos, size = state.pos[..., :n, :], self.sizes(state.pos.device)[:n]
        landmarks = state.pos[..., n:, :]
        coverage = -distance(landmarks.unsqueeze(-2) - pos.unsqueeze(-3)).min(-1).values.sum(-1)
        overlap = overlapping(pos, size, pos, size) & ~torch.eye(n, dtype=torch.bool, device=pos.device)
        collisions = -overlap.sum(-1).float()
        local = collisions * params.local_ratio
        return {"agent": coverage.unsqueeze(-1) * (1 - params.local_ratio) + local}


def make_simple_spread(**kwargs: Any) -> tuple[SimpleSpread, SimpleSpreadParams]:
    """``make("simple_spread", N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)``;
    any other ``SimpleSpreadParams`` field may be given too. ``landmark_range=0.8`` starts the
    landmarks in ``[-0.8, 0.8]^2`` instead of mpe2's ``[-1, 1]^2``: the task of the MAPPO authors'
    benchmark (marlbenchmark/on-policy), whose published returns are on that task."""
    env_kwargs, params = split_kwargs(
        "simple_spread", SimpleSpreadParams, kwargs, N="num_agents", landmark_range="landmark_range"
    )
    return SimpleSpread(**env_kwargs), params


register("simple_spread", make_simple_spread)
