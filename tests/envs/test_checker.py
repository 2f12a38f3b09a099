"""Every registered environment passes ``funrl.testing.check_env`` (``funrl.envs.check`` and a
reset that uses its key), and ``funrl.envs.check`` catches each planted bug it promises to."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import funrl.envs as E
from funrl import random
from funrl.envs.cartpole import CartPole, CartPoleState
from funrl.envs.checker import check, validate_action
from funrl.testing import check_env

# Envs whose first state is fixed by the rules they follow, so every key resets them alike.
FIXED_FIRST_STATE = {"DeepSea-bsuite", "DiscountingChain-bsuite", "SpaceInvaders-MinAtar"}


@pytest.mark.parametrize("env_id", E.registry())  # read at collection: new ids are checked too
def test_every_registered_env_passes_check_env(env_id):
    env, params = E.make(env_id)
    # A short time limit makes every env end (and auto-reset) episodes within the steps checked.
    params = dataclasses.replace(params, max_steps_in_episode=min(params.max_steps_in_episode, 12))
    check_env(env, params, num_steps=30, random_reset=env_id not in FIXED_FIRST_STATE)


def test_check_is_exported():
    assert E.check is check and E.validate_action is validate_action


# Planted bugs: each subclass breaks exactly one promise.


class Float64Obs(CartPole):
    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs.double(), state


class OutsideSpace(CartPole):
    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs + 100.0, state


class GlobalRandomness(CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(key, state, action, params)
        return obs, state, reward + 1e-3 * torch.rand(()), terminated, truncated, info


class MutatesState(CartPole):
    def step_env(self, key, state, action, params):
        out = super().step_env(key, state, action, params)
        state.x.add_(0.0001)
        return out


class RewardShape(CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(key, state, action, params)
        return obs, state, reward.reshape(1), terminated, truncated, info


class FloatFlags(CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(key, state, action, params)
        return obs, state, reward, terminated.float(), truncated, info


class TimeChangesDtype(CartPole):
    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(key, state, action, params)
        return obs, state._replace(time=state.time.to(torch.int64)), reward, terminated, truncated, info


class NoAutoReset(CartPole):
    def step_with(self, draw, state, action, params=None):
        params = self.default_params if params is None else params
        key_step, _ = draw
        obs, state, reward, terminated, truncated, info = self.step_env(key_step, state, action, params)
        return obs, state, reward, terminated, truncated, {"final_obs": obs}


class WrongFinalObs(CartPole):
    def step_with(self, draw, state, action, params=None):
        obs, state, reward, terminated, truncated, info = super().step_with(draw, state, action, params)
        return obs, state, reward, terminated, truncated, {"final_obs": obs}


class HostSync(CartPole):
    def step_env(self, key, state, action, params):
        if float(state.x) > 10.0:  # a Python branch on a value: fine eagerly, not under vmap
            raise AssertionError("unreachable")
        return super().step_env(key, state, action, params)


class NoFinalObs(CartPole):
    def step_with(self, draw, state, action, params=None):
        obs, state, reward, terminated, truncated, _ = super().step_with(draw, state, action, params)
        return obs, state, reward, terminated, truncated, {}


class StacksAlongTheBatch(CartPole):
    """Declares a step that broadcasts over a batch, but stacks the observation along dim 0."""

    batch_polymorphic = True

    @staticmethod
    def get_obs(state):
        return torch.stack([state.x, state.x_dot, state.theta, state.theta_dot])


class MixesTheBatch(CartPole):
    """Declares a step that broadcasts over a batch, but one term mixes the envs of a batch."""

    batch_polymorphic = True

    @staticmethod
    def get_obs(state):
        obs = CartPole.get_obs(state)
        return obs + (obs.mean() - obs.mean(dim=-1, keepdim=True))  # zero for one env


class DrawsInABatchPolymorphicStep(CartPole):
    """Declares a step that broadcasts over a batch, but its step_env draws from its key."""

    batch_polymorphic = True

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, truncated, info = super().step_env(key, state, action, params)
        return obs, state, reward + random.uniform(key), terminated, truncated, info


@pytest.mark.parametrize(
    "broken, error, match",
    [
        (Float64Obs, TypeError, r"reset obs: expected dtype torch.float32"),
        (OutsideSpace, ValueError, r"reset obs: observation outside the observation space"),
        (GlobalRandomness, ValueError, r"step is not pure"),
        (MutatesState, ValueError, r"step modified its input state in place"),
        (RewardShape, ValueError, r"reward: expected a scalar"),
        (FloatFlags, TypeError, r"terminated: expected dtype torch.bool"),
        (TimeChangesDtype, ValueError, r"state leaf changed from torch.int32\[\] to torch.int64"),
        (NoAutoReset, ValueError, r"the episode ended but obs/state are not reset_env's"),
        (WrongFinalObs, ValueError, r"info\['final_obs'\], reward or flags differ"),
        (HostSync, ValueError, r"vmap\(step\) failed"),
        (NoFinalObs, TypeError, r"info: expected a dict with 'final_obs'"),
        (StacksAlongTheBatch, ValueError, r"step_with on a batch failed"),
        (MixesTheBatch, ValueError, r"step_with on a batch differs from vmap\(step_with\)"),
        (DrawsInABatchPolymorphicStep, ValueError, r"step_with on a batch failed"),
    ],
)
def test_planted_bugs_are_caught(broken, error, match):
    env = broken()
    with pytest.raises(error, match=match):
        check(env, env.default_params, num_steps=120)


def test_validate_action():
    cartpole, cp = E.make("CartPole-v1")
    validate_action(cartpole, torch.tensor(1), cp)
    with pytest.raises(ValueError, match=r"action: expected values in \[0, 2\), got 2"):
        validate_action(cartpole, torch.tensor(2), cp)
    with pytest.raises(ValueError, match=r"action: expected values in \[0, 2\), got -1"):
        validate_action(cartpole, torch.tensor(-1), cp)
    with pytest.raises(TypeError, match="action: expected an integer tensor"):
        validate_action(cartpole, torch.tensor(1.0), cp)
    pendulum, pp = E.make("Pendulum-v1")
    validate_action(pendulum, torch.tensor([2.0]), pp)
    with pytest.raises(ValueError, match=r"action: expected values in \[-2.0, 2.0\], got \[2.5\]"):
        validate_action(pendulum, torch.tensor([2.5]), pp)
    with pytest.raises(ValueError, match="action: expected finite values"):
        validate_action(pendulum, torch.tensor([float("nan")]), pp)
    with pytest.raises(ValueError, match=r"action: expected shape \[1\]"):
        validate_action(pendulum, torch.tensor(1.0), pp)


def test_state_class_is_what_the_planted_bugs_build_on():
    _, state = CartPole().reset(random.key(0))
    assert isinstance(state, CartPoleState)


def test_an_env_overriding_step_alone_is_refused():
    # rollouts call draw_step/step_with: a step of its own would be bypassed there
    with pytest.raises(TypeError, match="OwnStep: override draw_step and step_with"):

        class OwnStep(CartPole):
            def step(self, key, state, action, params=None):
                return super().step(key, state, action, params)
