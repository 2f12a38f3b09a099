"""The agents ``funrl train`` knows: one :func:`register_agent` call per agent file.

Everything that lists or looks up agents reads this registry, so adding an agent is one file in
``funrl/agents/`` (its config, its ``make_train`` and a ``register_agent`` call at the bottom) and
its tests: the command line's algorithm choices, its help, the config fields ``--lr`` sets, the
non-finite check of a training run and evaluation of a run folder all come from the record.

    register_agent(
        "ppo", PPOConfig, make_train,
        summary="PPO, discrete or continuous actions",
        action_spaces=("discrete", "continuous"),
        learning_rates=("learning_rate",),
    )
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ACTION_SPACES",
    "AgentSpec",
    "MAY_BE_NAN",
    "get_agent",
    "may_be_nan",
    "register_agent",
    "registered_agents",
]

ACTION_SPACES = ("discrete", "continuous")

MAY_BE_NAN = frozenset({"episode_return"})
"""Metrics allowed to be NaN by every agent: ``episode_return`` is NaN in an update where no
episode ended (see :func:`funrl.agents.common.episode_metrics`). Every other metric must be finite."""


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """One registered agent.

    Attributes:
        name: the CLI name (``funrl train NAME``) and ``Agent.name`` of what ``make_train`` builds.
        config_type: its frozen config dataclass; every field is a ``funrl train`` config field.
        make_train: ``make_train(config, env=None, device="cpu") -> Agent``.
        summary: one line for ``funrl train --help``.
        action_spaces: the action spaces it trains on, a subset of :data:`ACTION_SPACES`.
        learning_rates: the config fields ``--lr`` sets (all of them: SAC has two rates).
        may_be_nan: metrics the non-finite check skips (:data:`MAY_BE_NAN` and the agent's own).
    """

    name: str
    config_type: type
    make_train: Callable[..., Any]
    summary: str
    action_spaces: frozenset[str]
    learning_rates: tuple[str, ...]
    may_be_nan: frozenset[str]


_AGENTS: dict[str, AgentSpec] = {}


def register_agent(
    name: str,
    config_type: type,
    make_train: Callable[..., Any],
    *,
    summary: str,
    action_spaces: Iterable[str],
    learning_rates: Iterable[str],
    may_be_nan: Iterable[str] = (),
) -> AgentSpec:
    """Register an agent under ``name`` for the CLI, evaluation and the non-finite check.

    Raises ValueError (naming the argument) for a name already taken, a config that is not a
    dataclass, an unknown action space, or a learning-rate name that is not a field of the config.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name: expected an identifier such as 'ppo', got {name!r}")
    if name in _AGENTS:
        raise ValueError(f"name: {name!r} is already registered (by {_AGENTS[name].make_train.__module__})")
    if not (isinstance(config_type, type) and dataclasses.is_dataclass(config_type)):
        raise ValueError(f"config_type: expected a dataclass type, got {config_type!r}")
    if not callable(make_train):
        raise ValueError(f"make_train: expected a callable, got {type(make_train).__name__}")
    spaces = frozenset(action_spaces)
    if not spaces or not spaces <= set(ACTION_SPACES):
        raise ValueError(
            f"action_spaces: expected a non-empty subset of {ACTION_SPACES}, got {sorted(spaces)}"
        )
    fields = {f.name for f in dataclasses.fields(config_type)}
    rates = tuple(learning_rates)
    missing = [r for r in rates if r not in fields]
    if not rates or missing:
        raise ValueError(
            f"learning_rates: expected fields of {config_type.__name__}, got {list(rates)} "
            f"({missing} are not fields)"
        )
    spec = AgentSpec(
        name=name,
        config_type=config_type,
        make_train=make_train,
        summary=summary,
        action_spaces=spaces,
        learning_rates=rates,
        may_be_nan=MAY_BE_NAN | frozenset(may_be_nan),
    )
    _AGENTS[name] = spec
    return spec


def registered_agents() -> dict[str, AgentSpec]:
    """Every registered agent by name, in registration order (a copy)."""
    return dict(_AGENTS)


def get_agent(name: str) -> AgentSpec:
    """The agent registered as ``name``; a ValueError naming ``algo`` and the known names otherwise."""
    spec = _AGENTS.get(name)
    if spec is None:
        raise ValueError(f"algo: unknown algorithm {name!r}; known: {', '.join(sorted(_AGENTS))}")
    return spec


def may_be_nan(name: str) -> frozenset[str]:
    """The metrics the non-finite check skips for the agent ``name`` (:data:`MAY_BE_NAN` if unregistered)."""
    spec = _AGENTS.get(name)
    return MAY_BE_NAN if spec is None else spec.may_be_nan
