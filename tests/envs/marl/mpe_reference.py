"""Runs mpe2 side by side with funrl's MPE scenarios: copy funrl's state into mpe2's world, step
both with the same actions, and read mpe2's results as funrl's team tensors."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import torch

from funrl import random
from funrl.envs.core import Discrete
from funrl.envs.marl import MPEState
from funrl.testing import assert_trees_close

# mpe2 integrates in float64, funrl in float32: one step from the same state agrees to float32
# rounding of values of order 1-10 (forces, velocities after contacts).
RTOL = 1e-5
ATOL = 1e-5


def goal_index(world: Any, landmark: Any) -> int:
    return next(i for i, lm in enumerate(world.landmarks) if lm is landmark)


def goals_from_world(env_id: str, world: Any) -> list[int]:
    """funrl's ``MPEState.goal`` (one landmark index per agent) read from mpe2's world."""
    if env_id in ("simple_spread", "simple_tag"):
        return [0] * len(world.agents)
    if env_id in ("simple_adversary", "simple_push"):
        return [goal_index(world, a.goal_a) for a in world.agents]
    if env_id == "simple_reference":
        return [goal_index(world, a.goal_b) for a in world.agents]
    if env_id == "simple_speaker_listener":
        goal = goal_index(world, world.agents[0].goal_b)
        return [goal, goal]
    raise ValueError(env_id)


def make_reference(env_id: str, continuous_actions: bool, **kwargs: Any) -> Any:
    module = {"simple_speaker_listener": "simple_speaker_listener_v4"}.get(env_id, f"{env_id}_v3")
    return importlib.import_module(f"mpe2.{module}").parallel_env(
        continuous_actions=continuous_actions, **kwargs
    )


def state_from_world(env_id: str, reference: Any) -> MPEState:
    world = reference.unwrapped.world
    return MPEState(
        pos=torch.tensor(np.array([e.state.p_pos for e in world.entities]), dtype=torch.float32),
        vel=torch.tensor(np.array([e.state.p_vel for e in world.entities]), dtype=torch.float32),
        comm=torch.tensor(np.array([a.state.c for a in world.agents]), dtype=torch.float32).reshape(
            len(world.agents), world.dim_c
        ),
        goal=torch.tensor(goals_from_world(env_id, world), dtype=torch.int64),
        time=torch.tensor(reference.unwrapped.steps, dtype=torch.int32),
    )


def load_into_world(state: MPEState, reference: Any) -> None:
    """Overwrite mpe2's positions, velocities and messages with funrl's (float64 copies)."""
    world = reference.unwrapped.world
    for i, entity in enumerate(world.entities):
        entity.state.p_pos = state.pos[i].double().numpy().copy()
        entity.state.p_vel = state.vel[i].double().numpy().copy()
    for i, agent in enumerate(world.agents):
        agent.state.c = state.comm[i].double().numpy().copy()


def random_actions(env: Any, key: torch.Tensor, batch: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """Uniform random actions of every team, with leading ``batch`` dimensions."""
    actions = {}
    for i, (team, space) in enumerate(env.action_spaces().items()):
        shape = (*batch, len(env.teams[team]))
        k = random.fold_in(key, i)
        if isinstance(space, Discrete):
            actions[team] = random.randint(k, shape, 0, space.n)
        else:
            actions[team] = random.uniform(k, (*shape, *space.shape))
    return actions


def per_agent(env: Any, actions: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    out = {}
    for team, ids in env.teams.items():
        for i, agent in enumerate(ids):
            value = actions[team][i].numpy()
            out[agent] = int(value) if value.ndim == 0 else value.astype(np.float32)
    return out


def as_teams(env: Any, values: dict[str, Any], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {
        team: torch.tensor(np.array([values[a] for a in ids]), dtype=dtype) for team, ids in env.teams.items()
    }


def step_both(
    env: Any, params: Any, env_id: str, reference: Any, state: MPEState, actions: Any, where: str
) -> Any:
    """One step of both from funrl's ``state``; asserts the results agree and returns funrl's."""
    load_into_world(state, reference)
    ref_obs, ref_rew, ref_term, ref_trunc, _ = reference.step(per_agent(env, actions))
    out = env.step_env(random.key(0), state, actions, params)
    obs, state, rewards, terminated, truncated, _ = out
    expected = state_from_world(env_id, reference)
    assert_trees_close(
        (state.pos, state.vel, state.comm, state.time),
        (expected.pos, expected.vel, expected.comm, expected.time),
        rtol=RTOL,
        atol=ATOL,
        name=f"{where} (pos, vel, comm, time)",
    )
    assert_trees_close(obs, as_teams(env, ref_obs, torch.float32), rtol=RTOL, atol=ATOL, name=f"{where} obs")
    assert_trees_close(
        rewards, as_teams(env, ref_rew, torch.float32), rtol=RTOL, atol=ATOL, name=f"{where} rewards"
    )
    assert_trees_close(terminated, as_teams(env, ref_term, torch.bool), name=f"{where} terminated")
    assert_trees_close(truncated, as_teams(env, ref_trunc, torch.bool), name=f"{where} truncated")
    return out


def run_conformance(env: Any, params: Any, env_id: str, reference: Any, steps: int, seed: int) -> None:
    """``steps`` steps of random actions; every step starts both from funrl's state and compares
    positions, velocities, messages, observations, rewards and flags (raises on a difference)."""
    reference.reset(seed=seed)
    state = state_from_world(env_id, reference)
    episode = 0
    all_actions = random_actions(env, random.key(seed), (steps,))
    for t in range(steps):
        actions = {team: a[t] for team, a in all_actions.items()}
        _, state, _, _, truncated, _ = step_both(
            env, params, env_id, reference, state, actions, f"{env_id} step {t}"
        )
        if bool(truncated[next(iter(truncated))].all()):
            episode += 1
            reference.reset(seed=seed + episode)
            state = state_from_world(env_id, reference)
