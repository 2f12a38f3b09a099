"""Seed sharding with compiled update steps: 2 ranks x 2 seeds, each rank compiling its own step,
train the agents of 1 process x 4 seeds within 1e-6 (compiled kernels round otherwise than eager
ones, so equality is up to their rounding).

The ranks' graphs are the same (equal blocks), so the second rank waits for the first's compile
and loads its graph from the compile cache they share: the same kernels, at the cost of a cache
hit instead of a second compile. The single process runs eager:
a compiled one would compile a third graph (four seeds), and compiled steps are checked against
eager ones agent by agent in ``tests/agents``.

The agent is the smallest registered one, ``toy`` (a user's agent file,
``tests/agents/toy_agent.py``: a rollout, a policy gradient and an Adam step), since every
compile costs test time and sharding does not depend on what the update computes."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch
from launch import train_run

from funrl import tree
from funrl.agents import common, run
from funrl.testing import assert_trees_close

TOY_AGENT = Path(__file__).parents[1] / "agents" / "toy_agent.py"
UPDATES = 3


@pytest.fixture(scope="module")
def toy_agent():
    sys.path.insert(0, str(TOY_AGENT.parent))
    try:
        import toy_agent
    finally:
        sys.path.remove(str(TOY_AGENT.parent))
    return toy_agent


def metrics(out: Path) -> dict[str, torch.Tensor]:
    """Every column of metrics.csv as float64, in row order."""
    with (out / run.METRICS).open(newline="") as f:
        rows = list(csv.DictReader(f))
    return {name: torch.tensor([float(r[name]) for r in rows], dtype=torch.float64) for name in rows[0]}


@pytest.mark.slow
def test_two_compiled_ranks_train_the_seeds_of_one_process(toy_agent, tmp_path: Path) -> None:
    config = toy_agent.ToyConfig(total_steps=UPDATES * toy_agent.ToyConfig().steps_per_update)
    sharded, single = tmp_path / "sharded", tmp_path / "single"
    proc = train_run(
        2,
        tmp_path,
        timeout=900,
        agent_files=[str(TOY_AGENT)],
        algo="toy",
        config={"total_steps": config.total_steps},
        out=str(sharded),
        num_seeds=4,
        compile=True,
        compile_in_turn=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    run.train_run("toy", config, single, num_seeds=4, compile=False, progress=False)

    assert len(metrics(single)["update"]) == UPDATES * 4
    assert_trees_close(metrics(sharded), metrics(single), rtol=1e-6, atol=1e-6, name="metrics")
    sharded_state, single_state = run.load_run(sharded)[1], run.load_run(single)[1]
    assert_trees_close(sharded_state, single_state, rtol=1e-6, atol=1e-6, name="train_state")
    initial, _ = common.init_state(toy_agent.make_train(config), common.seed_keys(0, 4))
    assert not tree.tree_equal(single_state.params, initial.params)  # it trained
