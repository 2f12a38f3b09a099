"""simple_tag: slower adversaries chase faster good agents among obstacles (mpe2's ``simple_tag_v3``).

Reference: ``mpe2/simple_tag/simple_tag.py``. Teams ``adversary`` (``num_adversaries``, size
0.075, accel 3, max speed 1) and ``agent`` (``num_good``, size 0.05, accel 4, max speed 1.3);
every agent collides, and so do the ``num_obstacles`` landmarks (size 0.2, immovable, reset
uniform in ``[-0.9, 0.9]^2``). Agents start uniform in ``[-1, 1]^2``.

Rewards: each adversary gets ``+10`` per overlapping (good agent, adversary) pair, summed over all
adversaries (a shared reward); a good agent gets ``-10`` per adversary overlapping it, minus
``bound(|x|) + bound(|y|)`` to keep it on screen, ``bound(v) = 0`` below 0.9, ``10 (v - 0.9)``
below 1, else ``min(exp(2v - 2), 10)``.

Observation of agent ``i``::

    [vel_i, pos_i, landmark_j - pos_i, pos_k - pos_i (k != i), vel_g (good g != i)]

so an adversary sees every good agent's velocity and a good agent the other good agents'
(mpe2's layout: 16 and 14 values by default). mpe2's curriculum, partial observability and
``terminate_on_success`` options are not provided.
"""

from __future__ import annotations

from typing import Any

import torch

from funrl.envs.marl.core import Teams
from funrl.envs.marl.mpe import Entity, MPEEnvironment, MPEParams, MPEState, of_others, overlapping, relative
from funrl.envs.marl.registry import register, split_kwargs

__all__ = ["SimpleTag", "make_simple_tag"]


def out_of_bounds_penalty(coordinate: torch.Tensor) -> torch.Tensor:
    """mpe2's ``bound`` of ``|coordinate|``: 0 inside 0.9, linear to 1, then exponential up to 10."""
    x = coordinate.abs()
    return torch.where(
        x < 0.9, 0.0, torch.where(x < 1.0, (x - 0.9) * 10, torch.exp(2 * x - 2).clamp(max=10.0))
    )


class SimpleTag(MPEEnvironment):
    """Adversaries ``adversary_*`` then good agents ``agent_*``, and ``num_obstacles`` obstacles."""

    env_id = "simple_tag"
    dim_c = 2
    landmark_range = 0.9

    def __init__(
        self,
        num_good: int = 1,
        num_adversaries: int = 3,
        num_obstacles: int = 2,
        continuous_actions: bool = False,
    ):
        for name, value, low in (
            ("num_good", num_good, 1),
            ("num_adversaries", num_adversaries, 1),
            ("num_obstacles", num_obstacles, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
        adversaries = [
            Entity(f"adversary_{i}", size=0.075, accel=3.0, max_speed=1.0) for i in range(num_adversaries)
        ]
        good = [Entity(f"agent_{i}", size=0.05, accel=4.0, max_speed=1.3) for i in range(num_good)]
        obstacles = [Entity(f"landmark {i}", size=0.2) for i in range(num_obstacles)]
        self.num_adversaries = num_adversaries
        super().__init__(adversaries + good, obstacles, continuous_actions)

    @property
    def default_params(self) -> MPEParams:
        return MPEParams()

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        n, m = self.num_agents, self.num_adversaries
        pos, vel = state.pos[..., :n, :], state.vel[..., :n, :]
        to_others = (of_others(pos) - pos.unsqueeze(-2)).flatten(-2)
        common = torch.cat([vel, pos, relative(pos, state.pos[..., n:, :]), to_others], -1)
        good_vel = vel[..., m:, :]
        every_good_vel = good_vel.flatten(-2).unsqueeze(-2)
        adversary_sees = every_good_vel.expand(*every_good_vel.shape[:-2], m, -1)
        agent_sees = of_others(good_vel).flatten(-2)
        return {
            "adversary": torch.cat([common[..., :m, :], adversary_sees], -1),
            "agent": torch.cat([common[..., m:, :], agent_sees], -1),
        }

    def rewards(self, state: MPEState, params: MPEParams) -> Teams:
        n, m = self.num_agents, self.num_adversaries
        pos, size = state.pos[..., :n, :], self.sizes(state.pos.device)[:n]
        good, adversaries = pos[..., m:, :], pos[..., :m, :]
        caught = overlapping(good, size[m:], adversaries, size[:m])  # [..., good, adversary]
        adversary = 10.0 * caught.flatten(-2).sum(-1).float()
        agent = -10.0 * caught.sum(-1).float() - out_of_bounds_penalty(good).sum(-1)
        return {"adversary": adversary.unsqueeze(-1).expand(*adversary.shape, m), "agent": agent}


def make_simple_tag(**kwargs: Any) -> tuple[SimpleTag, MPEParams]:
    """``make("simple_tag", num_good=1, num_adversaries=3, num_obstacles=2, max_cycles=25,
    continuous_actions=False)``."""
    env_kwargs, params = split_kwargs(
        "simple_tag",
        MPEParams,
        kwargs,
        num_good="num_good",
        num_adversaries="num_adversaries",
        num_obstacles="num_obstacles",
    )
    return SimpleTag(**env_kwargs), params


register("simple_tag", make_simple_tag)
