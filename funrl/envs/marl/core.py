"""The multi-agent environment interface: pure functions over teams of agents.

A :class:`MultiAgentEnv` is :class:`funrl.envs.core.Environment` with agents. Observations,
actions, rewards and done flags are dicts ``team -> tensor`` whose tensors carry the team's agent
axis first (``[A_team, ...]``); the package docstring (``funrl.envs.marl``) states the contract.
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

import torch

from funrl import control, random
from funrl.envs.core import Box, Discrete, Space, _where_tree

__all__ = ["MultiAgentEnv", "Teams", "check_actions", "team_of", "group_by_team"]

TState = TypeVar("TState")
TParams = TypeVar("TParams")
Teams = dict[str, torch.Tensor]
"""A dict ``team -> tensor`` with the team's agents on the leading axis."""


def team_of(agent_id: str) -> str:
    """The team of an agent id: the id without its trailing ``_<index>`` (``"adversary_0"`` ->
    ``"adversary"``), as TorchRL groups VMAS and PettingZoo agents."""
    return re.sub(r"_\d+$", "", agent_id)


def group_by_team(agent_ids: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``team -> agent ids`` in the order the teams first appear; teams must be contiguous runs of
    ``agent_ids`` so that concatenating the teams gives the agents in their fixed order."""
    teams: dict[str, list[str]] = {}
    previous = None
    for agent in agent_ids:
        team = team_of(agent)
        if team in teams and team != previous:
            raise ValueError(f"agent_ids: team {team!r} is not a contiguous run in {list(agent_ids)}")
        teams.setdefault(team, []).append(agent)
        previous = team
    return {team: tuple(agents) for team, agents in teams.items()}


def check_actions(
    actions: Any,
    spaces: dict[str, Space],
    teams: dict[str, tuple[str, ...]],
    batch_shape: tuple[int, ...] = (),
) -> None:
    """Raise a ``TypeError``/``ValueError`` naming the team unless ``actions`` fits the spaces.

    Structure, dtype kind and shape (``batch_shape + [A_team] + space.shape``) are checked always:
    they cost no host sync, so compiled code keeps them at trace time. Values (NaN or inf, a
    discrete action out of range) are read on the host, so they are checked in eager mode only.
    """
    if not isinstance(actions, dict):
        raise TypeError(
            f"actions: expected a dict team -> tensor (teams {list(teams)}), got {type(actions).__name__}"
        )
    if set(actions) != set(teams):
        raise ValueError(
            f"actions: expected the teams {list(teams)}, got {list(actions)}"
            f" (missing {sorted(set(teams) - set(actions))}, unknown {sorted(set(actions) - set(teams))})"
        )
    traced = control.is_traced()
    for team, space in spaces.items():
        action, name = actions[team], f"actions[{team!r}]"
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(action).__name__}")
        if isinstance(space, Discrete) and (
            action.dtype.is_floating_point or action.dtype.is_complex or action.dtype == torch.bool
        ):
            raise TypeError(f"{name}: expected an integer tensor for {space}, got dtype {action.dtype}")
        if isinstance(space, Box) and not action.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating tensor for {space}, got dtype {action.dtype}")
        expected = (*batch_shape, len(teams[team]), *space.shape)
        if tuple(action.shape) != expected:
            raise ValueError(
                f"{name}: expected shape {list(expected)} ({len(teams[team])} agents {list(teams[team])}"
                f"{', batch ' + str(list(batch_shape)) if batch_shape else ''}), got {list(action.shape)}"
            )
        if traced:
            continue
        if isinstance(space, Discrete) and not bool(((action >= 0) & (action < space.n)).all()):
            raise ValueError(f"{name}: expected values in [0, {space.n}), got {action.tolist()}")
        if isinstance(space, Box) and not bool(torch.isfinite(action).all()):
            raise ValueError(f"{name}: expected finite values, got NaN or inf: {action.tolist()}")


def _all_done(terminated: Teams, truncated: Teams) -> torch.Tensor:
    return torch.stack([(terminated[t] | truncated[t]).all(-1) for t in terminated], -1).all(-1)


class MultiAgentEnv(Generic[TState, TParams]):
    """Base class of pure multi-agent environments.

    Subclasses define ``agents``, ``default_params``, ``reset_env``, ``step_env``,
    ``observation_spaces``, ``action_spaces``, ``global_state`` and ``global_state_space``;
    nothing here holds state. ``step_env`` checks its actions with :func:`check_actions`.
    """

    batch_polymorphic: bool = False
    """True where ``step_with`` also takes a batch as it is (states, actions and draws with the
    same leading dimensions, the batch shape being ``state.time``'s), as in
    ``funrl.envs.Environment``: batched views then call it on the whole batch, without
    ``torch.func.vmap``."""

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def agents(self) -> tuple[str, ...]:
        """Every agent id, in the fixed order of the environment (PettingZoo's ``possible_agents``)."""
        raise NotImplementedError

    @property
    def teams(self) -> dict[str, tuple[str, ...]]:
        """``team -> agent ids``; team tensors hold these agents on their leading axis, in this
        order, and concatenating the teams in order gives :attr:`agents`."""
        return group_by_team(self.agents)

    @property
    def default_params(self) -> TParams:
        raise NotImplementedError

    def observation_spaces(self, params: TParams | None = None) -> dict[str, Space]:
        """``team -> Space`` of ONE agent's observation (team tensors add ``[A_team]`` in front)."""
        raise NotImplementedError

    def action_spaces(self, params: TParams | None = None) -> dict[str, Space]:
        """``team -> Space`` of ONE agent's action (team tensors add ``[A_team]`` in front)."""
        raise NotImplementedError

    def global_state_space(self, params: TParams | None = None) -> Box:
        """The space of :meth:`global_state`."""
        raise NotImplementedError

    def global_state(self, state: TState, params: TParams | None = None) -> torch.Tensor:
        """A flat float32 view of the whole environment for a centralised critic."""
        raise NotImplementedError

    def reset_env(self, key: torch.Tensor, params: TParams) -> tuple[Teams, TState]:
        raise NotImplementedError

    def step_env(
        self, key: torch.Tensor, state: TState, actions: Teams, params: TParams
    ) -> tuple[Teams, TState, Teams, Teams, Teams, dict[str, Any]]:
        raise NotImplementedError

    def step_keys(self, key: torch.Tensor, params: TParams) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``step`` hands to ``step_env`` and ``reset_env`` (``split(key)``; an env whose
        transition draws nothing returns ``(key, key)``, as in ``funrl.envs.core``)."""
        key_step, key_reset = random.split(key)
        return key_step, key_reset

    def reset(self, key: torch.Tensor, params: TParams | None = None) -> tuple[Teams, TState]:
        """First observations and state of an episode."""
        params = self.default_params if params is None else params
        return self.reset_env(key, params)

    def draw_step(self, key: torch.Tensor, params: TParams | None = None) -> Any:
        """What ``step(key, ...)`` draws from ``key``: ``(key_step, (obs_reset, state_reset))``, the
        key ``step_env`` gets and the reset a finished episode is replaced with. It depends on the
        key and params only, so a rollout draws every step's values before its loop."""
        params = self.default_params if params is None else params
        key_step, key_reset = self.step_keys(key, params)
        return key_step, self.reset_env(key_reset, params)

    def step_with(
        self, draw: Any, state: TState, actions: Teams, params: TParams | None = None
    ) -> tuple[Teams, TState, Teams, Teams, Teams, dict[str, Any]]:
        """``step`` given ``draw = draw_step(key, params)``."""
        params = self.default_params if params is None else params
        key_step, (obs_reset, state_reset) = draw
        obs_step, state_step, rewards, terminated, truncated, info = self.step_env(
            key_step, state, actions, params
        )
        done = _all_done(terminated, truncated)
        info = dict(info)
        info["final_obs"] = obs_step
        info["final_global_state"] = self.global_state(state_step, params)
        state = _where_tree(done, state_reset, state_step)
        obs = _where_tree(done, obs_reset, obs_step)
        return obs, state, rewards, terminated, truncated, info

    def step(
        self, key: torch.Tensor, state: TState, actions: Teams, params: TParams | None = None
    ) -> tuple[Teams, TState, Teams, Teams, Teams, dict[str, Any]]:
        """One transition of every agent, with auto-reset once every agent is done:
        ``step_with(draw_step(key, params), ...)``.

        ``info["final_obs"]`` holds the pre-reset observations and ``info["final_global_state"]``
        the pre-reset :meth:`global_state` (both for bootstrapping truncated episodes).
        """
        return self.step_with(self.draw_step(key, params), state, actions, params)

    def __repr__(self) -> str:
        return f"{self.name}()"
