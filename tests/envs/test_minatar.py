"""MinAtar games: conformance with pip ``minatar`` (its game state set from ours before every step,
sticky actions off), sticky actions, purity, vmap = loop, compile = eager, final_obs, bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from env_rollouts import random_rollout, vmapped_reset_equals_loop
from hypothesis import given, settings
from hypothesis import strategies as st
from minatar.environments import breakout as mn_breakout
from minatar.environments import space_invaders as mn_space_invaders

import funrl.envs.minatar  # noqa: F401  (registers the ids)
from funrl import control, random
from funrl import tree as ftree
from funrl.envs import make
from funrl.envs.core import Environment
from funrl.envs.minatar import _common
from funrl.envs.minatar.breakout import BreakoutState
from funrl.envs.minatar.space_invaders import SpaceInvadersState

# The compiled-vs-eager checks here capture every env in one full graph and run it through
# inductor with funrl's options (funrl.control.compile), as users compile. On a slow machine
# FUNRL_TEST_COMPILE_BACKEND=aot_eager keeps the capture and functionalisation but skips code
# generation (~25-100 CPU-s here).
COMPILE_BACKEND = os.environ.get("FUNRL_TEST_COMPILE_BACKEND", "inductor")

IDS = ["Breakout-MinAtar", "SpaceInvaders-MinAtar"]

SI_SCALARS = [
    "pos",
    "alien_dir",
    "enemy_move_interval",
    "alien_move_timer",
    "alien_shot_timer",
    "ramp_index",
    "shot_timer",
]
SI_MAPS = ["f_bullet_map", "e_bullet_map", "alien_map"]


def load_breakout(orig: mn_breakout.Env, s: BreakoutState) -> None:
    orig.ball_x, orig.ball_y, orig.ball_dir, orig.pos = (
        int(s.ball_x),
        int(s.ball_y),
        int(s.ball_dir),
        int(s.pos),
    )
    orig.brick_map = s.brick_map.numpy().astype(float)
    orig.strike, orig.last_x, orig.last_y = bool(s.strike), int(s.last_x), int(s.last_y)
    orig.terminal = False


def load_space_invaders(orig: mn_space_invaders.Env, s: SpaceInvadersState) -> None:
    for name in SI_SCALARS:
        setattr(orig, name, int(getattr(s, name)))
    for name in SI_MAPS:
        setattr(orig, name, getattr(s, name).numpy().astype(float))
    orig.terminal = False


def compare_step(env_id: str, orig, state, action: int, params) -> tuple[float, bool]:
    """One step from ``state`` in both implementations; asserts identical outcome."""
    env = make(env_id)[0]
    (load_breakout if env_id.startswith("Breakout") else load_space_invaders)(orig, state)
    reward, terminal = orig.act(action)
    obs, nxt, f_reward, terminated, truncated, _ = env.step_env(
        random.key(0), state, torch.tensor(action), params
    )
    np.testing.assert_array_equal(obs.numpy(), orig.state())
    assert obs.dtype == torch.bool
    assert float(f_reward) == reward and bool(terminated) == terminal and not bool(truncated)
    if env_id.startswith("SpaceInvaders"):
        for name in SI_SCALARS:
            assert int(getattr(nxt, name)) == getattr(orig, name), name
    else:
        assert bool(nxt.strike) == orig.strike and int(nxt.ball_dir) == orig.ball_dir
    return reward, terminal


def original(env_id: str):
    return mn_breakout.Env() if env_id.startswith("Breakout") else mn_space_invaders.Env()


# ------------------------------------------------------------------------------------------------
# Conformance: whole random episodes, then hypothesis-drawn states (edges: walls, refills, ramps)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_random_play_matches_minatar(env_id: str) -> None:
    env, params = make(env_id, sticky_action_prob=0.0)
    orig = original(env_id)
    key = random.key(1)
    _, state = env.reset(key, params)
    rewards = ends = 0.0
    for t in range(400):
        # Fire often so that SpaceInvaders kills aliens; random otherwise.
        action = 5 if t % 3 == 0 else int(random.randint(random.fold_in(key, t), (), 0, 6))
        reward, terminal = compare_step(env_id, orig, state, action, params)
        rewards, ends = rewards + reward, ends + terminal
        state = env.step(random.fold_in(key, 10_000 + t), state, torch.tensor(action), params)[1]
    assert rewards >= 10 and ends >= 2


def bool_board(draw, density: float) -> torch.Tensor:
    cells = draw(st.lists(st.booleans(), min_size=100, max_size=100))
    noise = draw(st.lists(st.floats(0, 1), min_size=100, max_size=100))
    return torch.tensor([c and n < density * 2 for c, n in zip(cells, noise, strict=True)]).reshape(10, 10)


@st.composite
def breakout_states(draw) -> BreakoutState:
    def i(lo: int, hi: int) -> torch.Tensor:
        return torch.tensor(draw(st.integers(lo, hi)))

    bricks = bool_board(draw, draw(st.sampled_from([0.0, 0.2, 0.6])))
    bricks[9] = False  # MinAtar's bricks never reach the paddle row
    ball_x, ball_y = i(0, 9), i(0, 8)
    return BreakoutState(
        ball_x=ball_x,
        ball_y=ball_y,
        ball_dir=i(0, 3),
        pos=i(0, 9),
        brick_map=bricks,
        strike=torch.tensor(draw(st.booleans())),
        last_x=ball_x,
        last_y=ball_y,
        last_action=i(0, 5),
        time=i(0, 50),
    )


@st.composite
def space_invaders_states(draw) -> SpaceInvadersState:
    def i(lo: int, hi: int) -> torch.Tensor:
        return torch.tensor(draw(st.integers(lo, hi)))

    aliens = bool_board(draw, draw(st.sampled_from([0.03, 0.3])))
    if draw(st.booleans()):  # a single alien left: exercises the new wave and the ramp
        aliens = torch.zeros(10, 10, dtype=torch.bool)
        aliens[draw(st.integers(0, 8)), draw(st.integers(0, 9))] = True
    if not bool(aliens.any()):
        aliens[0, 0] = True  # MinAtar never shoots from an empty block (its search returns None)
    interval = draw(st.integers(6, 12))
    return SpaceInvadersState(
        pos=i(0, 9),
        f_bullet_map=bool_board(draw, 0.1),
        e_bullet_map=bool_board(draw, 0.05),
        alien_map=aliens,
        alien_dir=torch.tensor(draw(st.sampled_from([-1, 1]))),
        enemy_move_interval=torch.tensor(interval),
        alien_move_timer=i(0, interval),
        alien_shot_timer=i(0, 10),
        ramp_index=i(0, 6),
        shot_timer=i(0, 5),
        last_action=i(0, 5),
        time=i(0, 50),
    )


@settings(max_examples=60)
@given(state=breakout_states(), action=st.integers(0, 5))
def test_breakout_any_state_matches_minatar(state: BreakoutState, action: int) -> None:
    compare_step(
        "Breakout-MinAtar",
        mn_breakout.Env(),
        state,
        action,
        make("Breakout-MinAtar", sticky_action_prob=0.0)[1],
    )


@settings(max_examples=60)
@given(state=space_invaders_states(), action=st.integers(0, 5), ramping=st.booleans())
def test_space_invaders_any_state_matches_minatar(
    state: SpaceInvadersState, action: int, ramping: bool
) -> None:
    orig = mn_space_invaders.Env(ramping=ramping)
    params = make("SpaceInvaders-MinAtar", sticky_action_prob=0.0, ramping=ramping)[1]
    compare_step("SpaceInvaders-MinAtar", orig, state, action, params)


def test_space_invaders_ramps_difficulty_on_a_cleared_wave() -> None:
    env, params = make("SpaceInvaders-MinAtar", sticky_action_prob=0.0)
    _, state = env.reset(random.key(0), params)
    aliens = torch.zeros(10, 10, dtype=torch.bool)
    aliens[4, 5] = True
    bullets = torch.zeros(10, 10, dtype=torch.bool)
    bullets[5, 5] = True  # moves up into the last alien this step
    state = state._replace(alien_map=aliens, f_bullet_map=bullets, alien_move_timer=torch.tensor(3))
    _, nxt, reward, *_ = env.step_env(random.key(1), state, torch.tensor(0), params)
    assert float(reward) == 1.0 and int(nxt.enemy_move_interval) == 11 and int(nxt.ramp_index) == 1
    assert int(nxt.alien_map.sum()) == 24
    _, flat, *_ = env.step_env(
        random.key(1), state, torch.tensor(0), make("SpaceInvaders-MinAtar", ramping=False)[1]
    )
    assert int(flat.enemy_move_interval) == 12 and int(flat.ramp_index) == 0


def test_breakout_reset_starts_match_minatar() -> None:
    env, params = make("Breakout-MinAtar")
    obs, state = torch.func.vmap(env.reset, in_dims=(0, None))(random.split(random.key(0), 200), params)
    starts = {(int(x), int(d)) for x, d in zip(state.ball_x, state.ball_dir, strict=True)}
    assert starts == {(0, 2), (9, 3)}
    orig = mn_breakout.Env()
    for seed in range(8):  # both of MinAtar's starts occur among these seeds
        orig.random = np.random.RandomState(seed)
        orig.reset()
        assert any(np.array_equal(o, orig.state()) for o in obs.numpy())


# ------------------------------------------------------------------------------------------------
# Sticky actions and action sets
# ------------------------------------------------------------------------------------------------


def test_sticky_actions_repeat_the_last_action_with_probability_p() -> None:
    env, params = make("Breakout-MinAtar", sticky_action_prob=0.1)
    _, state = env.reset(random.key(0), params)
    state = state._replace(last_action=torch.tensor(1), pos=torch.tensor(4))  # last: left
    keys = random.split(random.key(3), 4000)
    _, nxt, *_ = torch.func.vmap(env.step_env, in_dims=(0, None, None, None))(
        keys, state, torch.tensor(3), params
    )
    stuck = (nxt.pos == 3).float().mean()  # moved left instead of right
    assert abs(float(stuck) - 0.1) < 0.02
    assert bool(((nxt.pos == 3) == (nxt.last_action == 1)).all())
    never = make("Breakout-MinAtar", sticky_action_prob=0.0)[1]
    _, nxt, *_ = torch.func.vmap(env.step_env, in_dims=(0, None, None, None))(
        keys, state, torch.tensor(3), never
    )
    assert bool((nxt.pos == 5).all())


@pytest.mark.parametrize(
    "env_id, minimal, full", [("Breakout-MinAtar", (0, 1, 3), 6), ("SpaceInvaders-MinAtar", (0, 1, 3, 5), 6)]
)
def test_action_sets_follow_minatar(env_id: str, minimal: tuple[int, ...], full: int) -> None:
    env, params = make(env_id)
    assert env.action_space(params).n == full  # minatar.Environment's default: all 6 actions
    orig = original(env_id)
    assert tuple(orig.minimal_action_set()) == minimal
    env, params = make(env_id, use_minimal_action_set=True, sticky_action_prob=0.0)
    assert env.action_space(params).n == len(minimal)
    _, state = env.reset(random.key(0), params)
    full_env, full_params = make(env_id, sticky_action_prob=0.0)
    for i, mapped in enumerate(minimal):
        a = env.step_env(random.key(1), state, torch.tensor(i), params)
        b = full_env.step_env(random.key(1), state, torch.tensor(mapped), full_params)
        assert ftree.tree_equal(a, b)


# ------------------------------------------------------------------------------------------------
# Generic invariants
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=4)
@given(seed=st.integers(0, 2**31 - 1))
def test_purity(env_id: str, seed: int) -> None:
    assert ftree.tree_equal(random_rollout(env_id, seed, 15), random_rollout(env_id, seed, 15))


@pytest.mark.parametrize("env_id", IDS)
def test_vmap_equals_loop_and_final_obs(env_id: str) -> None:
    env, params = make(env_id)
    n = 5
    keys = random.split(random.key(4), n)
    obs, state, loop_states = vmapped_reset_equals_loop(env, params, keys)
    step = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))
    space = env.observation_space(params)
    ended = 0
    for t in range(40):
        k_act, k_step = random.split(random.fold_in(random.key(5), t))
        acts = random.randint(k_act, (n,), 0, env.action_space(params).n)
        step_keys = random.split(k_step, n)
        out = step(step_keys, state, acts, params)
        ref = [env.step(step_keys[i], loop_states[i], acts[i], params) for i in range(n)]
        assert ftree.tree_equal(out, ftree.stack(ref))
        assert out[0].dtype == torch.bool and bool(space.contains(out[0]))
        for i in range(n):  # final_obs is the raw step's observation; obs the reset's on an end
            k_step_i, k_reset_i = random.split(step_keys[i])
            raw = env.step_env(k_step_i, loop_states[i], acts[i], params)
            assert torch.equal(ref[i][5]["final_obs"], raw[0])
            if bool(ref[i][3] | ref[i][4]):
                ended += 1
                assert torch.equal(ref[i][0], env.reset(k_reset_i, params)[0])
        state, loop_states = out[1], [r[1] for r in ref]
    assert ended >= 1


@pytest.mark.parametrize("env_id", IDS)
def test_step_equals_the_generic_auto_reset(env_id: str) -> None:
    """The games' ``step`` picks the state before drawing the observation; it must return exactly
    what ``Environment.step`` (observation of both, then ``where``) returns, ends included."""
    env, params = make(env_id, max_episode_steps=7)
    n = 16
    keys = random.split(random.key(6), n)
    _, state = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    fast = torch.func.vmap(env.step, in_dims=(0, 0, 0, None))
    generic = torch.func.vmap(lambda *a: Environment.step(env, *a), in_dims=(0, 0, 0, None))
    ended = 0
    for t in range(20):
        k_act, k_step = random.split(random.fold_in(random.key(7), t))
        acts = random.randint(k_act, (n,), 0, env.action_space(params).n)
        step_keys = random.split(k_step, n)
        out, ref = fast(step_keys, state, acts, params), generic(step_keys, state, acts, params)
        assert ftree.tree_equal(out, ref), t
        assert out[0].dtype == torch.bool
        assert all(board.dtype == torch.uint8 for board in out[1] if board.dim() == 3)  # [n, 10, 10]
        ended += int((out[3] | out[4]).sum())
        state = out[1]
    assert ended >= n


def one_hot_stack(cells: list[tuple[int, int]], boards: list[torch.Tensor]) -> torch.Tensor:
    """The observation as MinAtar lays it out, built the obvious way (the reference for the packing);
    a cell off the board shows nowhere."""
    planes = []
    for row, col in cells:
        plane = torch.zeros(10, 10, dtype=torch.bool)
        if 0 <= row < 10 and 0 <= col < 10:
            plane[row, col] = True
        planes.append(plane)
    return torch.stack(planes + [b.bool() for b in boards], dim=-1)


@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("n_cells, n_boards", [(1, 1), (3, 1), (1, 5), (2, 3), (1, 2)])
def test_binary_image_equals_stacked_channels(
    n_cells: int, n_boards: int, byteorder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every channel count (4: int32 words, 6: int16 words, others and big-endian: bytes), vmapped."""
    monkeypatch.setattr(_common.sys, "byteorder", byteorder)
    g = torch.Generator().manual_seed(n_cells * 10 + n_boards)
    n = 8
    cells = torch.randint(-1, 12, (n, n_cells, 2), generator=g)  # off the board too (rows 10, 11, -1)
    cells[0] = 4  # and one env with every cell on the board
    boards = (torch.rand(n, n_boards, 10, 10, generator=g) < 0.4).to(torch.uint8)
    image = torch.func.vmap(lambda c, b: _common.binary_image([tuple(rc) for rc in c], list(b)))(
        cells, boards
    )
    assert image.dtype == torch.bool and image.shape == (n, 10, 10, n_cells + n_boards)
    for i in range(n):
        assert torch.equal(image[i], one_hot_stack([tuple(rc) for rc in cells[i].tolist()], list(boards[i])))


def test_breakout_steps_past_a_terminal_state() -> None:
    """Stepping on from a terminal state (a ball past the paddle, as ``step_env`` without the
    auto-reset, or gymnasium's next-step reset, does) moves the ball off the board: it must
    vanish from the image, as MinAtar's one-hot boards would show it, not fail."""
    env, params = make("Breakout-MinAtar", sticky_action_prob=0.0)
    _, state = env.reset(random.key(0), params)
    state = state._replace(ball_x=torch.tensor(0), ball_y=torch.tensor(8), ball_dir=torch.tensor(3))
    state = state._replace(pos=torch.tensor(9))
    obs, state, _, terminated, _, _ = env.step_env(random.key(1), state, torch.tensor(0), params)
    assert bool(terminated) and int(state.ball_y) == 9
    for _ in range(2):
        obs, state, *_ = env.step_env(random.key(1), state, torch.tensor(0), params)
    assert int(state.ball_y) == 11 and int(state.last_y) == 10
    assert not bool(obs[..., 1].any()) and not bool(obs[..., 2].any())  # ball and trail: off the board
    assert int(obs[9, 9, 0]) == 1 and int(obs[..., 3].sum()) == 30  # paddle and bricks still drawn


def test_truncation_at_the_time_limit() -> None:
    env, params = make("SpaceInvaders-MinAtar", max_episode_steps=5, sticky_action_prob=0.0)
    _, state = env.reset(random.key(0), params)
    flags = []
    for t in range(10):
        _, state, _, terminated, truncated, _ = env.step(random.key(t), state, torch.tensor(0), params)
        flags.append((bool(terminated), bool(truncated)))
    assert flags == ([(False, False)] * 4 + [(False, True)]) * 2


@pytest.mark.slow
def test_compiled_equals_eager_for_both_games() -> None:
    """Breakout and SpaceInvaders (sticky actions on, auto-reset) in one compiled graph."""
    made = [make(env_id) for env_id in IDS]
    n = 4

    def step_all(keys, states, actions):
        return [
            torch.func.vmap(env.step, in_dims=(0, 0, 0, None))(keys, state, actions, params)
            for (env, params), state in zip(made, states, strict=True)
        ]

    keys0 = random.split(random.key(0), n)
    states = [torch.func.vmap(env.reset, in_dims=(0, None))(keys0, params)[1] for env, params in made]
    states = ftree.map(torch.Tensor.contiguous, states)  # no stride-0 leaves: no recompile
    if COMPILE_BACKEND == "inductor":
        compiled = control.compile(step_all)
    else:
        compiled = torch.compile(step_all, backend=COMPILE_BACKEND, fullgraph=True)
    eager_states = compiled_states = states
    ended = 0
    for t in range(40):
        keys = random.split(random.fold_in(random.key(1), t), n)
        actions = random.randint(random.fold_in(random.key(2), t), (n,), 0, 6)
        e = step_all(keys, eager_states, actions)
        c = compiled(keys, compiled_states, actions)
        assert ftree.tree_equal(e, c), t
        ended += sum(int((o[3] | o[4]).sum()) for o in e)
        eager_states, compiled_states = [o[1] for o in e], [o[1] for o in c]
    assert ended >= 1


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_bad_action_is_named(env_id: str) -> None:
    env, params = make(env_id)
    _, state = env.reset(random.key(0), params)
    with pytest.raises(TypeError, match="action: expected an integer tensor"):
        env.step(random.key(1), state, torch.tensor(1.0), params)
    with pytest.raises(ValueError, match=r"action: expected shape \[\]"):
        env.step(random.key(1), state, torch.tensor([1]), params)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sticky_action_prob": 1.5}, "sticky_action_prob: expected a probability"),
        ({"sticky_action_prob": "0.1"}, "sticky_action_prob: expected a float"),
        ({"max_episode_steps": 0}, "max_episode_steps: expected a positive int"),
    ],
)
def test_bad_options_are_named(kwargs: dict, match: str) -> None:
    for env_id in IDS:
        with pytest.raises((ValueError, TypeError), match=match):
            make(env_id, **kwargs)
