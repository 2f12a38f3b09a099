"""The shared part of the Multi-Particle Environments: state, params, actions, reset, step.

mpe2 (``mpe2/_mpe_utils/simple_env.py``) is the reference. A scenario (one file each) lists its
agents and landmarks as :class:`Entity` specs and defines ``observations``, ``rewards`` and the
goal draw; this module turns actions into forces and messages, steps the world
(``funrl.envs.marl.physics``), counts time and truncates after ``max_steps_in_episode`` steps
(mpe2's ``max_cycles``, 25). No MPE scenario terminates: ``terminated`` is always false.

Actions (per agent, mpe2's layout):

- discrete (default): a movable agent picks ``[no_action, left, right, down, up]``; one that
  also speaks picks ``move + 5 * word`` from ``5 * dim_c`` actions; a speaker that cannot move
  picks a word from ``dim_c``. The force is the unit direction times ``accel`` (5 unless the
  scenario sets it); a word becomes the one-hot message.
- continuous (``continuous_actions=True``): ``Box(0, 1)`` of ``[no_action, left, right, down,
  up]`` (movable) followed by the ``dim_c`` message values (speaking). The force is
  ``accel * (right - left, up - down)``. Values are clipped to ``[0, 1]``, as mpe2's default
  wrapper clips them; NaN or inf is an error in eager mode.

A silent agent's message is zeros. Teams are mpe2's agent names without the index (``agent``,
``adversary``, ``speaker``, ``listener``); every agent of a team shares its spaces.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import torch

from funrl import random
from funrl.envs.core import Box, Discrete, EnvParams, Space, reset_uniform
from funrl.envs.marl.core import MultiAgentEnv, Teams, check_actions
from funrl.envs.marl.physics import Bodies, world_step

__all__ = [
    "Entity",
    "MPEParams",
    "MPEState",
    "MPEEnvironment",
    "choose_landmark",
    "distance",
    "entity_at",
    "of_others",
    "others_index",
    "overlapping",
    "relative",
]

NUM_MOVES = 5  # no_action, left, right, down, up


class MPEState(NamedTuple):
    """Positions and velocities ``[E, 2]`` (agents, then landmarks; float32), the agents' messages
    ``[A, dim_c]``, each agent's goal landmark ``[A]`` (int64; what it means is the scenario's)
    and the steps taken (int32)."""

    pos: torch.Tensor
    vel: torch.Tensor
    comm: torch.Tensor
    goal: torch.Tensor
    time: torch.Tensor


@dataclasses.dataclass(frozen=True)
class MPEParams(EnvParams):
    """mpe2's world constants and episode length (``max_cycles``)."""

    max_steps_in_episode: int = 25
    dt: float = 0.1
    damping: float = 0.25
    contact_force: float = 100.0
    contact_margin: float = 1e-3


@dataclasses.dataclass(frozen=True)
class Entity:
    """A disc of the world: an agent (movable unless said otherwise) or a landmark."""

    name: str
    size: float = 0.05
    movable: bool = True
    collide: bool = True
    silent: bool = True
    accel: float = 5.0  # mpe2's default sensitivity
    max_speed: float = math.inf
    mass: float = 1.0


def distance(delta: torch.Tensor) -> torch.Tensor:
    """Euclidean norm over the last axis, computed as mpe2 computes it."""
    return delta.square().sum(-1).sqrt()


def choose_landmark(unit: torch.Tensor, num_landmarks: int) -> torch.Tensor:
    """Landmark indices uniform in ``[0, num_landmarks)`` from values uniform in ``[0, 1)`` (23
    random bits each: the bias is below ``num_landmarks / 2**23``)."""
    return (unit * num_landmarks).long().clamp(max=num_landmarks - 1)


def shared_goal(unit: torch.Tensor, num_landmarks: int, num_agents: int) -> torch.Tensor:
    """``[num_agents]``: one landmark index drawn from ``unit`` (a value uniform in ``[0, 1)``),
    the goal of every agent. A dense copy, not an expanded view: inside a seeds-vmapped compiled
    loop, a stride-0 goal reached the loop's carry in another memory order than the carry's, and
    inductor refused the loop (compiled IPPO on simple_adversary)."""
    return choose_landmark(unit, num_landmarks).expand(num_agents).clone()


def others_index(num: int, device: torch.device) -> torch.Tensor:
    """``[num, num - 1]``: row ``i`` lists every index but ``i``, in order (mpe2's "others").

    Built from ``arange`` rather than ``torch.tensor`` of a Python list: a multi-element tensor
    constant inside a compiled loop body is not a graph input inductor can take in torch 2.13."""
    j = torch.arange(num - 1, device=device).unsqueeze(0)
    return j + (j >= torch.arange(num, device=device).unsqueeze(1)).long()


def of_others(x: torch.Tensor) -> torch.Tensor:
    """``[..., n, n - 1, D]``: for each row ``i`` of ``x`` (``[..., n, D]``), every other row, in
    order."""
    return x[..., others_index(x.shape[-2], x.device), :]


def relative(origin: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``[..., n, 2K]``: the ``K`` ``targets`` (``[..., K, 2]``) seen from each of the ``n``
    ``origin`` positions (``[..., n, 2]``), flattened target by target (``target - origin``,
    mpe2's layout)."""
    return (targets.unsqueeze(-3) - origin.unsqueeze(-2)).flatten(-2)


def overlapping(
    pos_a: torch.Tensor, size_a: torch.Tensor, pos_b: torch.Tensor, size_b: torch.Tensor
) -> torch.Tensor:
    """``[..., n_a, n_b]`` bool: the discs overlap (mpe2's ``is_collision``: distance < sum of
    radii); positions ``[..., n, 2]``, sizes ``[n]``."""
    dist = distance(pos_a.unsqueeze(-2) - pos_b.unsqueeze(-3))
    return dist < size_a.unsqueeze(-1) + size_b.unsqueeze(-2)


def entity_at(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``[..., 2]``: the row ``index`` (``[...]``, int64, one per batch element) of ``pos``
    (``[..., E, 2]``)."""
    rows = index.unsqueeze(-1).unsqueeze(-1).expand(*index.shape, 1, pos.shape[-1])
    return pos.gather(-2, rows).squeeze(-2)


class MPEEnvironment(MultiAgentEnv[MPEState, MPEParams]):
    """A Multi-Particle Environment; scenarios subclass it (see the module docstring)."""

    env_id: str = ""
    dim_c: int = 2
    landmark_range: float = 1.0  # landmarks reset uniform in [-range, range]^2
    # The step, observations and rewards index entities as [..., i, :] and reduce over named
    # trailing dims, so a batch of states steps as it is; a reset is per env (vmapped).
    batch_polymorphic = True

    def __init__(self, agents: list[Entity], landmarks: list[Entity], continuous_actions: bool = False):
        if not isinstance(continuous_actions, bool):
            raise TypeError(f"continuous_actions: expected a bool, got {continuous_actions!r}")
        self.entities = tuple(agents) + tuple(dataclasses.replace(lm, movable=False) for lm in landmarks)
        self.num_agents = len(agents)
        self.num_landmarks = len(landmarks)
        self.continuous_actions = continuous_actions
        self._agents = tuple(agent.name for agent in agents)
        self._team_entities: dict[str, list[Entity]] = {}
        for team, ids in self.teams.items():
            members = [e for e in agents if e.name in ids]
            if len({(e.movable, e.silent) for e in members}) != 1:
                raise ValueError(f"team {team!r}: every agent must share movable and silent")
            self._team_entities[team] = members

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def agents(self) -> tuple[str, ...]:
        return self._agents

    def sizes(self, device: torch.device) -> torch.Tensor:
        """``[E]`` radii of the entities, agents first."""
        return torch.tensor([e.size for e in self.entities], dtype=torch.float32, device=device)

    def bodies(self, device: torch.device) -> Bodies:
        def column(field: str, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([getattr(e, field) for e in self.entities], dtype=dtype, device=device)

        return Bodies(
            size=column("size", torch.float32),
            mass=column("mass", torch.float32),
            movable=column("movable", torch.bool),
            collide=column("collide", torch.bool),
            max_speed=column("max_speed", torch.float32),
        )

    # -- spaces ------------------------------------------------------------------------------

    def action_spaces(self, params: MPEParams | None = None) -> dict[str, Space]:
        spaces: dict[str, Space] = {}
        for team, (first, *_) in self._team_entities.items():
            moves = NUM_MOVES if first.movable else (0 if self.continuous_actions else 1)
            words = 0 if first.silent else self.dim_c
            if self.continuous_actions:
                spaces[team] = Box(0.0, 1.0, (moves + words,), torch.float32)
            else:
                spaces[team] = Discrete(moves * max(words, 1))
        return spaces

    def observation_spaces(self, params: MPEParams | None = None) -> dict[str, Space]:
        params = self.default_params if params is None else params
        _, state = self.reset_env(random.key(0), params)
        obs = self.observations(state, params)
        return {team: Box(-math.inf, math.inf, (o.shape[-1],), torch.float32) for team, o in obs.items()}

    def global_state_space(self, params: MPEParams | None = None) -> Box:
        size = sum(len(self.teams[t]) * s.shape[0] for t, s in self.observation_spaces(params).items())
        return Box(-math.inf, math.inf, (size,), torch.float32)

    def global_state(self, state: MPEState, params: MPEParams | None = None) -> torch.Tensor:
        """Every agent's observation, concatenated in agent order (mpe2's ``state()``)."""
        params = self.default_params if params is None else params
        return torch.cat([o.flatten(-2) for o in self.observations(state, params).values()], -1)

    # -- scenario hooks ----------------------------------------------------------------------

    def observations(self, state: MPEState, params: MPEParams) -> Teams:
        raise NotImplementedError

    def rewards(self, state: MPEState, params: MPEParams) -> Teams:
        raise NotImplementedError

    def reset_goal(self, unit: torch.Tensor) -> torch.Tensor:
        """``[A]`` int64 goal landmark per agent, drawn from ``unit`` (``[A]`` values uniform in
        ``[0, 1)``, see :func:`choose_landmark`); scenarios without goals keep zeros."""
        return torch.zeros(unit.shape, dtype=torch.int64, device=unit.device)

    # -- actions -----------------------------------------------------------------------------

    def decode_actions(
        self, actions: Teams, batch_shape: tuple[int, ...] | torch.Size = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action force ``[..., A, 2]`` and message ``[..., A, dim_c]`` of every agent (module
        docstring), for actions with leading ``batch_shape``."""
        forces, messages = [], []
        for team, members in self._team_entities.items():
            action, first = actions[team], members[0]
            device = action.device
            if self.continuous_actions:
                action = action.clamp(0.0, 1.0)
                word = action[..., NUM_MOVES:] if first.movable else action
                direction = (
                    [action[..., 2] - action[..., 1], action[..., 4] - action[..., 3]]
                    if first.movable
                    else []
                )
            else:
                move = action if first.silent else action % NUM_MOVES
                direction = [
                    (move == 2).float() - (move == 1).float(),
                    (move == 4).float() - (move == 3).float(),
                ]
                say = action // NUM_MOVES if first.movable else action
                word = (say.unsqueeze(-1) == torch.arange(self.dim_c, device=device)).float()
            if first.movable:
                accel = torch.tensor([e.accel for e in members], dtype=torch.float32, device=device)
                forces.append(torch.stack(direction, -1) * accel.unsqueeze(-1))
            else:
                forces.append(torch.zeros(*batch_shape, len(members), 2, device=device))
            silence = torch.zeros(*batch_shape, len(members), self.dim_c, device=device)
            messages.append(silence if first.silent else word)
        return torch.cat(forces, -2), torch.cat(messages, -2)

    # -- reset and step ----------------------------------------------------------------------

    def reset_env(self, key: torch.Tensor, params: MPEParams) -> tuple[Teams, MPEState]:
        """Agents uniform in ``[-1, 1]^2``, landmarks in ``[-landmark_range, landmark_range]^2``, at
        rest and silent; every value comes from one draw (a reset is computed on every step of a
        compiled batch, so it costs one Threefry call, not one per quantity)."""
        num_entities = len(self.entities)
        unit = reset_uniform(key, 2 * num_entities + self.num_agents, 0.0, 1.0)
        half_width = torch.tensor(
            [1.0] * self.num_agents + [self.landmark_range] * self.num_landmarks, device=key.device
        )
        pos = (unit[: 2 * num_entities].reshape(num_entities, 2) * 2 - 1) * half_width.unsqueeze(-1)
        state = MPEState(
            pos=pos,
            vel=torch.zeros_like(pos),
            comm=torch.zeros(self.num_agents, self.dim_c, device=key.device),
            goal=self.reset_goal(unit[2 * num_entities :]),
            time=torch.zeros((), dtype=torch.int32, device=key.device),
        )
        return self.observations(state, params), state

    def step_keys(self, key: torch.Tensor, params: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The transition draws nothing, so the reset takes the whole key."""
        return key, key

    def step_env(
        self, key: torch.Tensor, state: MPEState, actions: Teams, params: MPEParams
    ) -> tuple[Teams, MPEState, Teams, Teams, Teams, dict[str, Any]]:
        batch = state.time.shape
        check_actions(actions, self.action_spaces(params), self.teams, batch)
        force, comm = self.decode_actions(actions, batch)
        pos, vel = world_step(
            state.pos,
            state.vel,
            force,
            self.bodies(state.pos.device),
            params.dt,
            params.damping,
            params.contact_force,
            params.contact_margin,
        )
        state = MPEState(pos, vel, comm, state.goal, state.time + 1)
        truncated = state.time >= params.max_steps_in_episode
        terminated = {
            t: torch.zeros(*batch, len(ids), dtype=torch.bool, device=pos.device)
            for t, ids in self.teams.items()
        }
        truncated = {t: truncated.unsqueeze(-1).expand(*batch, len(ids)) for t, ids in self.teams.items()}
        return self.observations(state, params), state, self.rewards(state, params), terminated, truncated, {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(agents={list(self.agents)}, continuous_actions={self.continuous_actions})"
        )
