"""The id -> multi-agent environment registry: ``make(env_id, **kwargs) -> (env, env_params)``.

Kept apart from ``funrl.envs``'s single-agent registry, whose ids all follow the single-agent
contract. An id may carry the ``mpe:`` prefix the CLI uses (``--env mpe:simple_spread``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from funrl.envs.core import params_from_kwargs

__all__ = ["register", "make", "registry", "split_kwargs", "PREFIX"]

PREFIX = "mpe:"
_REGISTRY: dict[str, Callable[..., tuple[Any, Any]]] = {}


def register(env_id: str, factory: Callable[..., tuple[Any, Any]]) -> None:
    """Register ``factory(**kwargs) -> (env, env_params)`` under ``env_id``."""
    if env_id in _REGISTRY:
        raise ValueError(f"env_id: {env_id!r} is already registered")
    _REGISTRY[env_id] = factory


def registry() -> list[str]:
    """The registered multi-agent ids, sorted (each also reachable as ``"mpe:<id>"``)."""
    return sorted(_REGISTRY)


def make(env_id: str, **kwargs: Any) -> tuple[Any, Any]:
    """The multi-agent environment and its default params for ``env_id`` (``"simple_spread"`` or
    ``"mpe:simple_spread"``). Keyword arguments are mpe2's options of the same scenario (``N``,
    ``local_ratio``, ``max_cycles``, ``continuous_actions``, ...) or any params field."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id: expected a str, got {type(env_id).__name__}")
    name = env_id.removeprefix(PREFIX)
    if name not in _REGISTRY:
        raise ValueError(f"env_id: unknown multi-agent id {env_id!r}; known ids: {', '.join(registry())}")
    return _REGISTRY[name](**kwargs)


def split_kwargs(
    env_id: str, params_cls: type, kwargs: dict[str, Any], **env_options: str
) -> tuple[dict[str, Any], Any]:
    """Split ``make``'s keyword arguments into the env's constructor arguments and its params.

    ``env_options`` maps mpe2's option names that fix shapes (``N="num_agents"``) to constructor
    arguments; ``continuous_actions`` is always one. ``max_cycles`` (mpe2) and
    ``max_episode_steps`` (gymnasium) name ``max_steps_in_episode``; the rest are params fields.
    """
    kwargs = dict(kwargs)
    env_kwargs = {arg: kwargs.pop(option) for option, arg in env_options.items() if option in kwargs}
    if "continuous_actions" in kwargs:
        env_kwargs["continuous_actions"] = kwargs.pop("continuous_actions")
    if "max_cycles" in kwargs:
        kwargs["max_steps_in_episode"] = kwargs.pop("max_cycles")
    try:
        params = params_from_kwargs(params_cls, env_id, kwargs)
    except TypeError as err:
        known = ", ".join([*env_options, "continuous_actions", "max_cycles"])
        raise TypeError(f"{err}; scenario options: {known}") from None
    return env_kwargs, params
