"""A tiny pure continuous-action environment for the off-policy agent tests (registered as
``PointMass-test``): drive a point on ``[-1, 1]`` to the origin with a force in ``[-2, 2]``.

Box actions with bounds other than ``[-1, 1]`` exercise the agents' action scaling; reaching the
origin terminates (no bootstrap) and the time limit truncates (bootstrap from ``final_obs``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch

from funrl import envs, random
from funrl.envs import core

ENV_ID = "PointMass-test"


class PointState(NamedTuple):
    position: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class PointParams(core.EnvParams):
    max_steps_in_episode: int = 16
    step_size: float = 0.25


class PointMass(core.Environment[PointState, PointParams]):
    @property
    def default_params(self) -> PointParams:
        return PointParams()

    def reset_env(self, key: torch.Tensor, params: PointParams) -> tuple[torch.Tensor, PointState]:
        position = random.uniform(key, (1,), minval=-1.0, maxval=1.0)
        state = PointState(position, torch.zeros((), dtype=torch.int32, device=key.device))
        return position.clone(), state

    def step_env(self, key: torch.Tensor, state: PointState, action: torch.Tensor, params: PointParams):
        position = (state.position + params.step_size * action).clamp(-1.0, 1.0)
        time = state.time + 1
        terminated = position.abs()[0] < 0.05
        truncated = core.time_limit_reached(time, params)
        reward = -position.abs()[0]
        return position.clone(), PointState(position, time), reward, terminated, truncated, {}

    def observation_space(self, params: PointParams | None = None) -> envs.Box:
        return envs.Box(-1.0, 1.0, (1,))

    def action_space(self, params: PointParams | None = None) -> envs.Box:
        return envs.Box(-2.0, 2.0, (1,))


def make_point_mass(**kwargs: Any) -> tuple[PointMass, PointParams]:
    return PointMass(), core.params_from_kwargs(PointParams, ENV_ID, kwargs)


if ENV_ID not in envs.registry():
    envs.register(ENV_ID, make_point_mass)
