"""``Box`` bound tensors: shapes, dtypes and vmapped bounds, and an env whose action bounds differ
per dimension clipped by ``ClipAction`` in a compiled ``scan`` (as a compiled PPO or SAC step does)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pytest
import torch

from funrl import control, random
from funrl.envs import wrappers as W
from funrl.envs.core import Box, Environment
from funrl.testing import assert_compile_equals_eager

ACTION_DIM = 9  # inductor inlines tensor constants of up to 8 elements; more become graph attributes


@dataclasses.dataclass(frozen=True)
class DriftParams:
    max_steps_in_episode: int = 5


class DriftState(NamedTuple):
    position: torch.Tensor
    time: torch.Tensor


class Drift(Environment):
    """A point moved by its action, whose nine bounds all differ."""

    @property
    def default_params(self) -> DriftParams:
        return DriftParams()

    def observation_space(self, params: DriftParams | None = None) -> Box:
        return Box(-float("inf"), float("inf"), (ACTION_DIM,))

    def action_space(self, params: DriftParams | None = None) -> Box:
        return Box(
            tuple(-1.0 - 0.1 * i for i in range(ACTION_DIM)),
            tuple(1.0 + 0.2 * i for i in range(ACTION_DIM)),
            (ACTION_DIM,),
        )

    def step_keys(self, key: torch.Tensor, params: DriftParams) -> tuple[torch.Tensor, torch.Tensor]:
        return key, key  # draws nothing: no key derivation to compile

    def reset_env(self, key: torch.Tensor, params: DriftParams) -> tuple[torch.Tensor, DriftState]:
        position = torch.zeros(ACTION_DIM)
        return position, DriftState(position, torch.zeros((), dtype=torch.int32))

    def step_env(self, key, state, action, params):  # type: ignore[override]
        position = state.position + action
        time = state.time + 1
        reward = -(position**2).sum()
        truncated = time >= params.max_steps_in_episode
        terminated = torch.zeros((), dtype=torch.bool)
        return position, DriftState(position, time), reward, terminated, truncated, {}


@pytest.mark.parametrize(
    ("low", "shape", "expected"),
    [
        (-1.5, (3,), [-1.5, -1.5, -1.5]),
        ((1.0, 2.0, 3.0), (3,), [1.0, 2.0, 3.0]),
        (((1.0, 2.0), (3.0, 4.0)), (2, 2), [[1.0, 2.0], [3.0, 4.0]]),
        ((1.0, 2.0), (2, 2), [[1.0, 2.0], [1.0, 2.0]]),  # broadcast over the leading dimension
        (torch.tensor([0.5, -0.5]), (2,), [0.5, -0.5]),
    ],
)
def test_bound_tensors_have_the_box_shape_and_dtype(low: object, shape: tuple, expected: list) -> None:
    for dtype in (torch.float32, torch.float64):
        bound = Box(low, 9.0, shape, dtype).low_tensor()
        assert bound.dtype == dtype and bound.shape == shape
        assert bound.tolist() == expected
    assert Box(0, 4, (2,), torch.int64).high_tensor().tolist() == [4, 4]


def test_bound_tensors_follow_vmapped_tensor_bounds() -> None:
    """A params field that is a tensor (vmapped: one bound per env) gives per-env bounds."""
    highs = torch.tensor([1.0, 2.0])
    bounds = torch.func.vmap(lambda high: Box(-high, (high, 2 * high), (2,)).high_tensor())(highs)
    assert bounds.tolist() == [[1.0, 2.0], [2.0, 4.0]]


def test_clip_action_clips_to_per_dimension_bounds() -> None:
    env = W.ClipAction(Drift())
    obs, state = env.reset(random.key(0))
    action = torch.full((ACTION_DIM,), 5.0)
    space = Drift().action_space()
    _, next_state, *_ = env.step(random.key(1), state, action)
    assert torch.equal(next_state.position - state.position, torch.tensor(space.high))
    _, next_state, *_ = env.step(random.key(1), state, -action)
    assert torch.equal(next_state.position - state.position, torch.tensor(space.low))


@pytest.mark.slow
def test_clip_action_in_a_compiled_scan_equals_eager() -> None:
    """The bounds, nine distinct values each, were graph constants that inductor left unbound in
    the scan's loop body (``_torchinductor_pyobject_tensor_data_ptr: non-tensor input``)."""
    env = W.ClipAction(Drift())
    params = env.default_params
    key = random.key(0)
    obs, state = env.reset(key, params)
    actions = 3.0 * random.normal(random.key(1), (2, ACTION_DIM))  # [steps, dim]

    def two_steps(obs: torch.Tensor, state: DriftState, actions: torch.Tensor) -> tuple:
        def one(carry: tuple, action: torch.Tensor) -> tuple:
            obs, state, reward, *_ = env.step(key, carry[1], action, params)
            return (obs, state), (obs, reward)

        return control.scan(one, (obs, state), actions)

    assert_compile_equals_eager(two_steps, obs, state, actions)
