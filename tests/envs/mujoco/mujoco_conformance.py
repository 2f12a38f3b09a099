"""Side-by-side runs of a funrl MuJoCo env and gymnasium's env of the same id.

Both start from gymnasium's reset state (optionally moved, e.g. next to an unhealthy boundary),
then take the same actions; every step's observation, reward, info terms, terminated and
truncated are compared. Where gymnasium's episode ends both restart from gymnasium's next reset.
The warm start travels in funrl's state, so both simulators do the same float64 arithmetic and
the trajectories agree to rounding over any number of steps.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium
import numpy as np
import torch

from funrl import random
from funrl.envs import make
from funrl.testing import assert_trees_close

RTOL = 1e-6
ATOL = 1e-9

Perturb = Callable[[np.ndarray, np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def _close(actual: torch.Tensor, expected: object, what: str) -> None:
    expected_t = torch.as_tensor(np.asarray(expected, dtype=np.float64))
    actual_t = actual.to(torch.float64)
    # float32 outputs: their rounding (6e-8 relative) is inside RTOL; ATOL covers values near 0.
    atol = 1e-6 if actual.dtype == torch.float32 else ATOL
    assert_trees_close(actual_t, expected_t.reshape(actual_t.shape), rtol=RTOL, atol=atol, name=what)


def run_side_by_side(
    env_id: str,
    num_steps: int = 220,
    seed: int = 0,
    action_scale: float = 1.0,
    perturb: Perturb | None = None,
    **options: object,
) -> dict[str, int]:
    """Step both envs ``num_steps`` times; returns how many steps terminated, truncated and were
    unhealthy (gymnasium's ``reward_survive`` was 0)."""
    genv = gymnasium.make(env_id, **options)
    env, params = make(env_id, **options)
    rng = np.random.default_rng(seed)
    raw = genv.unwrapped
    low, high = raw.action_space.low, raw.action_space.high

    def restart() -> object:
        gobs, _ = genv.reset(seed=int(rng.integers(2**31)))
        if perturb is not None:
            qpos, qvel = perturb(raw.data.qpos.copy(), raw.data.qvel.copy(), rng)
            raw.set_state(qpos, qvel)
            gobs = raw._get_obs()
        state = env.new_state(torch.tensor(raw.data.qpos), torch.tensor(raw.data.qvel))
        _close(env.get_obs(state, params), gobs, f"{env_id} reset obs")
        return state

    state = restart()
    counts = {"terminated": 0, "truncated": 0, "unhealthy": 0}
    for t in range(num_steps):
        action = (rng.uniform(low, high) * action_scale).astype(np.float32)
        gobs, greward, gterminated, gtruncated, ginfo = genv.step(action)
        obs, state, reward, terminated, truncated, info = env.step_env(
            random.key(t), state, torch.from_numpy(action), params
        )
        where = f"{env_id} step {t}"
        _close(env.get_obs(state, params), gobs, f"{where} obs (float64)")
        _close(obs, gobs, f"{where} obs")
        _close(reward, greward, f"{where} reward")
        for name, value in ginfo.items():
            _close(info[name], value, f"{where} info[{name!r}]")
        assert set(info) == set(ginfo), f"{where}: info keys {sorted(info)} != gymnasium's {sorted(ginfo)}"
        assert bool(terminated) == gterminated, f"{where}: terminated {bool(terminated)} != {gterminated}"
        assert bool(truncated) == gtruncated, f"{where}: truncated {bool(truncated)} != {gtruncated}"
        counts["terminated"] += int(gterminated)
        counts["truncated"] += int(gtruncated)
        counts["unhealthy"] += int(ginfo.get("reward_survive", 1) == 0)
        if gterminated or gtruncated:
            state = restart()
    genv.close()
    return counts


def reset_moments(
    env_id: str, num: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(qpos, qvel)`` after ``num`` resets of gymnasium's env and of funrl's (vmapped keys)."""
    genv = gymnasium.make(env_id)
    raw = genv.unwrapped
    gym_q = []
    for i in range(num):
        genv.reset(seed=seed + i)
        gym_q.append(np.concatenate([raw.data.qpos, raw.data.qvel]))
    genv.close()
    env, params = make(env_id)
    keys = random.split(random.key(seed), num)
    _, states = torch.func.vmap(env.reset, in_dims=(0, None))(keys, params)
    ours = torch.cat([env.qpos(states), env.qvel(states)], dim=-1).numpy()
    return np.stack(gym_q), ours


def assert_same_distribution(gym_samples: np.ndarray, our_samples: np.ndarray, what: str) -> None:
    """Per coordinate, mean and standard deviation agree within 5 standard errors.

    With ``n`` samples per side the difference of two means has standard error
    ``sqrt(var_a / n + var_b / n)``; the standard deviation's is about ``sd * sqrt(1 / n)`` per side
    (``sd / sqrt(2 n)`` for a normal, larger for a flat uniform's kurtosis is smaller, so this is
    conservative). 5 standard errors make a false alarm over ~50 coordinates below 1e-4.
    Coordinates without noise must be equal.
    """
    n = gym_samples.shape[0]
    mean_g, mean_o = gym_samples.mean(0), our_samples.mean(0)
    sd_g, sd_o = gym_samples.std(0), our_samples.std(0)
    se_mean = np.sqrt((sd_g**2 + sd_o**2) / n)
    se_sd = np.sqrt((sd_g**2 + sd_o**2) / n)
    fixed = (sd_g == 0) & (sd_o == 0)
    bad_mean = ~fixed & (np.abs(mean_g - mean_o) > 5 * se_mean + 1e-12)
    bad_sd = ~fixed & (np.abs(sd_g - sd_o) > 5 * se_sd + 1e-12)
    bad_fixed = fixed & ~np.isclose(mean_g, mean_o, rtol=1e-12, atol=1e-12)
    assert not bad_mean.any(), (
        f"{what}: means differ at {np.flatnonzero(bad_mean)}: {mean_g[bad_mean]} vs {mean_o[bad_mean]}"
    )
    assert not bad_sd.any(), (
        f"{what}: std devs differ at {np.flatnonzero(bad_sd)}: {sd_g[bad_sd]} vs {sd_o[bad_sd]}"
    )
    assert not bad_fixed.any(), f"{what}: fixed coordinates differ at {np.flatnonzero(bad_fixed)}"
    # A noise-free coordinate on one side only would be a missing or extra noise term.
    assert ((sd_g == 0) == (sd_o == 0)).all(), f"{what}: noise on different coordinates"
