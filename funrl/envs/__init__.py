"""Batched pure environments (see ``funrl.envs.core`` for the interface).

``to_sb3_vec_env`` (``funrl.envs.sb3_bridge``) and the PettingZoo bridges ``to_pettingzoo`` and
``from_pettingzoo`` (``funrl.envs.marl``) are imported on first use, so funrl imports without
Stable-Baselines3 or PettingZoo. Multi-agent environments live in ``funrl.envs.marl``.
"""

from funrl.envs.core import Box, Discrete, Environment, EnvParams, Space, StepResult
from funrl.envs.registry import make, register, registry

# Each environment module registers its ids on import.
from funrl.envs import cartpole  # noqa: E402,F401  isort: skip
from funrl.envs import acrobot, continuous_mountain_car, mountain_car, pendulum  # noqa: E402,F401  isort: skip
from funrl.envs import bsuite  # noqa: E402,F401  isort: skip
from funrl.envs import minatar  # noqa: E402,F401  isort: skip
from funrl.envs import mujoco  # noqa: E402,F401  isort: skip
from funrl.envs.render import render, write_video  # noqa: E402  isort: skip
from funrl.envs.gymnasium_bridge import from_gymnasium, to_gymnasium, to_gymnasium_env  # noqa: E402  isort: skip
from funrl.envs.batched import BatchedEnv, vmap  # noqa: E402  isort: skip
from funrl.envs.rollout import RolloutState, Trajectory, rollout  # noqa: E402  isort: skip
from funrl.envs.checker import check, validate_action  # noqa: E402  isort: skip

__all__ = [
    "from_gymnasium",
    "to_gymnasium",
    "to_gymnasium_env",
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
    "render",
    "write_video",
]


def __getattr__(name: str):
    if name == "to_sb3_vec_env":
        from funrl.envs.sb3_bridge import to_sb3_vec_env

        return to_sb3_vec_env
    if name in ("to_pettingzoo", "from_pettingzoo"):
        from funrl.envs import marl

        return getattr(marl, name)
    raise AttributeError(f"module 'funrl.envs' has no attribute {name!r}")
