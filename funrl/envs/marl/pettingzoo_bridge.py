"""Bridges to PettingZoo's parallel API in both directions (``pettingzoo/utils/env.py``).

``to_pettingzoo(env_id_or_env, params=None)`` wraps a funrl multi-agent env as a PettingZoo
``ParallelEnv`` (one env, eager, numpy in and out), so PettingZoo tools and training loops run on
it. ``reset(seed=s)`` derives the env's key from ``funrl.random.key(s)``, so a seed gives the
same episode as ``env.reset(split(key(s))[1])``; ``state()`` is :meth:`global_state`. When the
episode ends every agent leaves ``agents``, as in mpe2, and the next call is ``reset``.

``from_pettingzoo(parallel_env)`` puts any PettingZoo parallel env behind funrl's multi-agent
contract (team tensors, ``reset``/``step`` with auto-reset, ``global_state``). It is **not
pure**: the PettingZoo env lives on the host and changes on every call; funrl's "state" is an
opaque handle that only checks it is the latest one, and the wrapper refuses to run under
``torch.compile`` or ``vmap``. Agents are grouped into teams by id (``adversary_0`` ->
``adversary``) where a team's agents share their spaces and stand together in
``possible_agents``; otherwise every agent is its own team. Agents that leave before the episode
ends get zero observations and rewards and set flags until it does. ``reset(key)`` seeds the
host env with ``seed_of(key)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import gymnasium
import numpy as np
import pettingzoo
import torch

from funrl import control, random
from funrl.envs.core import Box, Discrete, EnvParams, Space
from funrl.envs.marl.core import MultiAgentEnv, Teams, check_actions, group_by_team
from funrl.envs.marl.registry import make

__all__ = [
    "FunrlParallelEnv",
    "PettingZooEnv",
    "PettingZooState",
    "from_pettingzoo",
    "seed_of",
    "to_pettingzoo",
]


def seed_of(key: torch.Tensor) -> int:
    """The integer seed ``from_pettingzoo`` hands to the host env's ``reset`` for ``key``."""
    return int(random.bits(key, ())) & 0x7FFFFFFF


def _to_gymnasium(space: Space) -> gymnasium.spaces.Space:
    if isinstance(space, Discrete):
        return gymnasium.spaces.Discrete(space.n)
    low, high = space.low_tensor().numpy(), space.high_tensor().numpy()
    return gymnasium.spaces.Box(low=low, high=high, shape=space.shape, dtype=np.float32)


def _from_gymnasium(space: gymnasium.spaces.Space, name: str) -> Space:
    if isinstance(space, gymnasium.spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"{name}: expected a Discrete space starting at 0, got start={space.start}")
        return Discrete(int(space.n))
    if isinstance(space, gymnasium.spaces.Box):
        dtype = torch.float32 if np.issubdtype(space.dtype, np.floating) else torch.int64

        def bound(values: np.ndarray) -> float | tuple:
            flat = np.unique(values)
            return float(flat[0]) if flat.size == 1 else values.astype(float).tolist()

        return Box(bound(space.low), bound(space.high), tuple(space.shape), dtype)
    raise TypeError(f"{name}: expected a gymnasium Box or Discrete space, got {type(space).__name__}")


class FunrlParallelEnv(pettingzoo.ParallelEnv):
    """A funrl multi-agent env as a PettingZoo ``ParallelEnv``; see :func:`to_pettingzoo`."""

    def __init__(self, env: MultiAgentEnv, params: Any = None, device: str | torch.device = "cpu"):
        self.env = env
        self.params = env.default_params if params is None else params
        self.device = torch.device(device)
        self.metadata = {"name": env.name, "is_parallelizable": True, "render_modes": []}
        self.possible_agents = list(env.agents)
        self.agents: list[str] = []
        self._team_of = {agent: team for team, ids in env.teams.items() for agent in ids}
        obs_spaces, act_spaces = env.observation_spaces(self.params), env.action_spaces(self.params)
        self.observation_spaces = {
            a: _to_gymnasium(obs_spaces[self._team_of[a]]) for a in self.possible_agents
        }
        self.action_spaces = {a: _to_gymnasium(act_spaces[self._team_of[a]]) for a in self.possible_agents}
        self.state_space = _to_gymnasium(env.global_state_space(self.params))
        self._key = random.key(np.random.SeedSequence().entropy % 2**63).to(self.device)
        self._state: Any = None

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[agent]

    def _next_key(self) -> torch.Tensor:
        self._key, key = random.split(self._key)
        return key

    def _per_agent(self, teams: Teams) -> dict[str, Any]:
        # Copies, so that a caller writing into an array never reaches funrl's tensors.
        return {
            agent: teams[team][i].cpu().numpy().copy()
            for team, ids in self.env.teams.items()
            for i, agent in enumerate(ids)
        }

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._key = random.key(seed).to(self.device)
        obs, self._state = self.env.reset(self._next_key(), self.params)
        self.agents = list(self.possible_agents)
        return self._per_agent(obs), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step: the episode has ended (no live agents); call reset first")
        missing = sorted(set(self.agents) - set(actions))
        if missing:
            raise ValueError(f"actions: every live agent acts at once; missing {missing}")
        spaces = self.env.action_spaces(self.params)
        teams = {}
        for team, ids in self.env.teams.items():
            dtype = torch.int64 if isinstance(spaces[team], Discrete) else torch.float32
            values = np.stack([np.asarray(actions[a]) for a in ids])
            teams[team] = torch.as_tensor(values, device=self.device).to(dtype)
        obs, self._state, rewards, terminated, truncated, _ = self.env.step_env(
            self._next_key(), self._state, teams, self.params
        )
        obs, rewards = self._per_agent(obs), self._per_agent(rewards)
        terminated, truncated = self._per_agent(terminated), self._per_agent(truncated)
        live = self.agents
        self.agents = [a for a in live if not (terminated[a] or truncated[a])]
        return (
            {a: obs[a] for a in live},
            {a: float(rewards[a]) for a in live},
            {a: bool(terminated[a]) for a in live},
            {a: bool(truncated[a]) for a in live},
            {a: {} for a in live},
        )

    def state(self) -> np.ndarray:
        if self._state is None:
            raise RuntimeError("state: call reset first")
        return self.env.global_state(self._state, self.params).cpu().numpy()

    def render(self) -> None:
        return None


def to_pettingzoo(
    env_id_or_env: str | MultiAgentEnv, params: Any = None, device: str | torch.device = "cpu"
) -> FunrlParallelEnv:
    """A PettingZoo ``ParallelEnv`` of a funrl multi-agent env (an id for ``funrl.envs.marl.make``
    or an env; ``params`` default to the id's or the env's)."""
    if isinstance(env_id_or_env, str):
        env, default = make(env_id_or_env)
        params = default if params is None else params
    elif isinstance(env_id_or_env, MultiAgentEnv):
        env = env_id_or_env
    else:
        raise TypeError(
            f"env_id_or_env: expected an id or a funrl.envs.marl.MultiAgentEnv, got {type(env_id_or_env).__name__}"
        )
    return FunrlParallelEnv(env, params, device)


class PettingZooState(NamedTuple):
    """An opaque handle on the host env's current state: its version and the steps taken."""

    version: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class PettingZooParams(EnvParams):
    """The host env keeps its own settings; ``max_steps_in_episode`` is its ``max_cycles`` where
    it has one (informational: the host env truncates itself)."""

    max_steps_in_episode: int = 0


class PettingZooEnv(MultiAgentEnv[PettingZooState, PettingZooParams]):
    """A PettingZoo parallel env behind the multi-agent contract; see :func:`from_pettingzoo`."""

    def __init__(self, parallel_env: Any, device: str | torch.device = "cpu"):
        self.parallel_env = parallel_env
        self.device = torch.device(device)
        self._agents = tuple(parallel_env.possible_agents)
        self._teams = self._group(parallel_env)
        self._obs_spaces = {
            t: _from_gymnasium(parallel_env.observation_space(ids[0]), f"observation_space({ids[0]!r})")
            for t, ids in self._teams.items()
        }
        self._act_spaces = {
            t: _from_gymnasium(parallel_env.action_space(ids[0]), f"action_space({ids[0]!r})")
            for t, ids in self._teams.items()
        }
        self._version = 0
        self._time = 0
        self._global_state: torch.Tensor | None = None

    def _group(self, parallel_env: Any) -> dict[str, tuple[str, ...]]:
        def spaces(agent: str) -> tuple:
            return (parallel_env.observation_space(agent), parallel_env.action_space(agent))

        try:
            teams = group_by_team(self._agents)
        except ValueError:
            return {agent: (agent,) for agent in self._agents}
        if all(spaces(a) == spaces(ids[0]) for ids in teams.values() for a in ids):
            return teams
        return {agent: (agent,) for agent in self._agents}

    @property
    def name(self) -> str:
        return str(self.parallel_env)

    @property
    def agents(self) -> tuple[str, ...]:
        return self._agents

    @property
    def teams(self) -> dict[str, tuple[str, ...]]:
        return self._teams

    @property
    def default_params(self) -> PettingZooParams:
        return PettingZooParams(int(getattr(self.parallel_env.unwrapped, "max_cycles", 0)))

    def observation_spaces(self, params: Any = None) -> dict[str, Space]:
        return self._obs_spaces

    def action_spaces(self, params: Any = None) -> dict[str, Space]:
        return self._act_spaces

    def global_state_space(self, params: Any = None) -> Box:
        space = getattr(self.parallel_env, "state_space", None)
        if space is not None:
            return _from_gymnasium(space, "state_space")
        size = sum(len(ids) * math.prod(self._obs_spaces[t].shape) for t, ids in self._teams.items())
        return Box(-math.inf, math.inf, (size,), torch.float32)

    def global_state(self, state: PettingZooState, params: Any = None) -> torch.Tensor:
        """The host env's ``state()`` (or, without one, every observation concatenated) at ``state``."""
        self._check_handle(state)
        assert self._global_state is not None  # set with every handle
        return self._global_state

    # -- host calls ---------------------------------------------------------------------------

    def _refuse_traced(self) -> None:
        if control.is_traced():
            raise RuntimeError(
                "from_pettingzoo: a host PettingZoo env cannot run under torch.compile or a torch.func "
                "transform (vmap, grad); call it eagerly"
            )

    def _check_handle(self, state: Any) -> None:
        if not isinstance(state, PettingZooState):
            raise TypeError(
                f"state: expected the PettingZooState from reset/step, got {type(state).__name__}"
            )
        if int(state.version) != self._version:
            raise ValueError(
                f"state: stale handle (version {int(state.version)}, the host env is at {self._version}); "
                "a host env cannot go back: use the state returned by the latest call"
            )

    def _teams_of(
        self, values: dict[str, Any], dtype: torch.dtype, fill: Any, shapes: dict[str, tuple]
    ) -> Teams:
        out = {}
        for team, ids in self._teams.items():
            rows = [np.asarray(values[a]) if a in values else np.full(shapes[team], fill) for a in ids]
            out[team] = torch.as_tensor(np.stack(rows), device=self.device).to(dtype)
        return out

    def _observe(self, obs: dict[str, Any]) -> tuple[Teams, PettingZooState]:
        teams = self._teams_of(obs, torch.float32, 0.0, {t: s.shape for t, s in self._obs_spaces.items()})
        try:
            global_state = np.asarray(self.parallel_env.state(), dtype=np.float32)
            self._global_state = torch.as_tensor(global_state, device=self.device)
        except NotImplementedError:
            self._global_state = torch.cat([o.flatten() for o in teams.values()])
        self._version += 1
        handle = PettingZooState(
            torch.tensor(self._version, dtype=torch.int64, device=self.device),
            torch.tensor(self._time, dtype=torch.int32, device=self.device),
        )
        return teams, handle

    def reset_env(self, key: torch.Tensor, params: Any) -> tuple[Teams, PettingZooState]:
        self._refuse_traced()
        obs, _ = self.parallel_env.reset(seed=seed_of(key))
        self._time = 0
        return self._observe(obs)

    def step_env(
        self, key: torch.Tensor, state: PettingZooState, actions: Teams, params: Any
    ) -> tuple[Teams, PettingZooState, Teams, Teams, Teams, dict[str, Any]]:
        self._refuse_traced()
        self._check_handle(state)
        check_actions(actions, self._act_spaces, self._teams)
        live = set(self.parallel_env.agents)
        # Copies: a host env may write into the arrays it is given (mpe2 floor-divides them in
        # place), which must not reach the caller's tensors.
        per_agent = {
            agent: actions[team][i].cpu().numpy().copy()
            for team, ids in self._teams.items()
            for i, agent in enumerate(ids)
        }
        obs, rewards, terminated, truncated, _ = self.parallel_env.step(
            {a: v for a, v in per_agent.items() if a in live}
        )
        self._time += 1
        scalars = {t: () for t in self._teams}
        obs, handle = self._observe(obs)
        return (
            obs,
            handle,
            self._teams_of(rewards, torch.float32, 0.0, scalars),
            self._teams_of(terminated, torch.bool, True, scalars),
            self._teams_of(truncated, torch.bool, True, scalars),
            {},
        )

    def draw_step(self, key: torch.Tensor, params: Any = None) -> torch.Tensor:
        """The key itself: the host env's reset happens only once an episode ends (``step_with``)."""
        return key

    def step_with(
        self, draw: torch.Tensor, state: PettingZooState, actions: Teams, params: Any = None
    ) -> tuple[Teams, PettingZooState, Teams, Teams, Teams, dict[str, Any]]:
        """``step_env``, then a host reset once every agent is done (the host env cannot compute
        a reset for nothing, so this is a Python branch: eager only)."""
        params = self.default_params if params is None else params
        key_step, key_reset = self.step_keys(draw, params)
        obs_step, state, rewards, terminated, truncated, info = self.step_env(
            key_step, state, actions, params
        )
        info = dict(info, final_obs=obs_step, final_global_state=self.global_state(state, params))
        obs = obs_step
        if not self.parallel_env.agents:
            obs, state = self.reset_env(key_reset, params)
        return obs, state, rewards, terminated, truncated, info


def from_pettingzoo(parallel_env: Any, device: str | torch.device = "cpu") -> PettingZooEnv:
    """Any PettingZoo parallel env (e.g. ``mpe2.simple_spread_v3.parallel_env()``) behind funrl's
    multi-agent contract, eager only (see the module docstring); tensors go to ``device``."""
    if not hasattr(parallel_env, "possible_agents") or not hasattr(parallel_env, "step"):
        raise TypeError(f"parallel_env: expected a PettingZoo ParallelEnv, got {type(parallel_env).__name__}")
    return PettingZooEnv(parallel_env, device)
