"""Batched pure environments (see ``funrl.envs.core`` for the interface)."""

from funrl.envs.core import Box, Discrete, Environment, EnvParams, Space, StepResult
from funrl.envs.registry import make, register, registry

__all__ = [
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
