"""Batched pure environments (see ``funrl.envs.core`` for the interface)."""

from funrl.envs.core import Box, Discrete, Environment, EnvParams, Space, StepResult
from funrl.envs.registry import make, register, registry

# Each environment module registers its ids on import.
from funrl.envs import cartpole  # noqa: E402,F401  isort: skip
from funrl.envs import acrobot, continuous_mountain_car, mountain_car, pendulum  # noqa: E402,F401  isort: skip
from funrl.envs import bsuite  # noqa: E402,F401  isort: skip
from funrl.envs import minatar  # noqa: E402,F401  isort: skip
from funrl.envs.gymnasium_bridge import from_gymnasium, to_gymnasium  # noqa: E402  isort: skip
from funrl.envs.batched import BatchedEnv, vmap  # noqa: E402  isort: skip
from funrl.envs.rollout import RolloutState, Trajectory, rollout  # noqa: E402  isort: skip
from funrl.envs.checker import check, validate_action  # noqa: E402  isort: skip

__all__ = [
    "from_gymnasium",
    "to_gymnasium",
    "BatchedEnv",
    "check",
    "validate_action",
    "RolloutState",
    "Trajectory",
    "rollout",
    "vmap",
    "Box",
    "Discrete",
    "Environment",
    "EnvParams",
    "Space",
    "StepResult",
    "make",
    "register",
    "registry",
]
