"""The id -> environment registry: ``make(env_id, **kwargs) -> (env, env_params)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["register", "make", "registry"]

_REGISTRY: dict[str, Callable[..., tuple[Any, Any]]] = {}


def register(env_id: str, factory: Callable[..., tuple[Any, Any]]) -> None:
    """Register ``factory(**kwargs) -> (env, env_params)`` under ``env_id``."""
    if env_id in _REGISTRY:
        raise ValueError(f"env_id: {env_id!r} is already registered")
    _REGISTRY[env_id] = factory


def registry() -> list[str]:
    """The registered environment ids, sorted."""
    return sorted(_REGISTRY)


def make(env_id: str, **kwargs: Any) -> tuple[Any, Any]:
    """The environment and its default params for ``env_id``.

    Keyword arguments are the env's options (gymnasium's keyword options of the same id, and
    ``max_episode_steps``); they become fields of ``env_params``.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id: expected a str, got {type(env_id).__name__}")
    if env_id not in _REGISTRY:
        from funrl.envs.marl.registry import PREFIX
        from funrl.envs.marl.registry import registry as multi_agent_ids

        if env_id.removeprefix(PREFIX) in multi_agent_ids():
            raise ValueError(
                f"env_id: {env_id!r} is a multi-agent environment: make it with funrl.envs.marl.make "
                f"and train it with mappo or ippo (funrl train mappo --env {env_id})"
            )
        raise ValueError(f"env_id: unknown id {env_id!r}; known ids: {', '.join(registry())}")
    return _REGISTRY[env_id](**kwargs)
