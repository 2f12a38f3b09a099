"""Data-parallel SAC: each rank steps its environments into its own replay buffer and draws their
shares of every batch; gradients are all-reduced inside the update; the same agent as one process
holding every environment."""

from __future__ import annotations

import pytest
import sac_dp_checks
from launch import run_ranks
from sac_dp_checks import TINY

from funrl import distributed, envs, random
from funrl.agents import common, sac
from funrl.testing import assert_trees_close


@pytest.mark.slow
def test_two_ranks_of_one_env_train_the_agent_of_one_process_with_two() -> None:
    found, _ = run_ranks(sac_dp_checks.findings, timeout=600)
    assert found["params"] < 1e-5 and found["log_alpha"] < 1e-5 and found["metrics"] < 1e-5
    assert found["moved"] > 1e-2  # it trained: gradient steps changed the params
    assert found["ranks_agree"] == 0.0  # every rank holds the same params
    assert found["local_buffer_rows"] == TINY.buffer_size // 2  # each rank stores its own env's
    assert found["graphs"] == 1 and found["all_reduce_in_graph"]
    assert found["compiled_params"] < 1e-6


def test_one_rank_is_the_single_process_agent() -> None:
    plain, single = sac.make_train(TINY), sac.make_train(TINY, data_parallel=distributed.DataParallel())
    assert type(single.env) is type(plain.env)
    a = plain.init(random.key(0))
    b = common.contiguous_copy(a)  # updates write into their buffer's storage: one each
    for i in range(3):  # the third update takes gradient steps
        a, metrics_a = single.update(a, random.key(i))
        b, metrics_b = plain.update(b, random.key(i))
        assert_trees_close((a, metrics_a), (b, metrics_b), rtol=0, atol=0)


def test_every_environment_keeps_a_transition() -> None:
    with pytest.raises(ValueError, match="buffer_size: expected at least num_envs = 3, got 2"):
        sac.SACConfig(num_envs=3, buffer_size=2)


def test_bad_shares_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="num_envs: expected a multiple of the 2 data-parallel ranks, got 3"):
        sac.make_train(
            sac.SACConfig(num_envs=3, batch_size=6, buffer_size=9),
            data_parallel=distributed.DataParallel(0, 2),
        )
    env = envs.vmap(envs.make("Pendulum-v1")[0], 2)
    with pytest.raises(
        ValueError, match="env: a data-parallel agent makes its own environments; expected None"
    ):
        sac.make_train(TINY, env=env, data_parallel=distributed.DataParallel(0, 2))
