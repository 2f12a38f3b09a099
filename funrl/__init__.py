"""funrl: pure-functional reinforcement learning for PyTorch.

Every subpackage is an attribute (``funrl.envs``, ``funrl.losses``, ...), imported on first use:
``import funrl`` stays cheap, and a part you do not use is never loaded.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = ("agents", "buffers", "control", "envs", "losses", "nets", "optim", "random", "testing", "tree")

__all__ = [*_SUBMODULES, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"funrl.{name}")
    raise AttributeError(f"module 'funrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES})
