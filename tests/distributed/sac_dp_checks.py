"""The ranks' side of ``test_data_parallel_sac.py`` (2 ranks, :func:`launch.run_ranks`):
data-parallel SAC against one process holding every environment.

Rank 0 also trains the single-process agent itself (no collectives), so one launch compares
both; :func:`findings` returns them on rank 0 (None on the others) for the test to assert on.

- ``params`` / ``metrics`` / ``ranks_agree``: eager, 4 updates of 2 Pendulum envs, one per rank
  with its own replay buffer, against 2 envs in one process (the same keys).
- ``graphs`` / ``all_reduce_in_graph`` / ``compiled_params``: the update traced by dynamo with
  ``fullgraph=True`` (a graph break raises) and run as captured: how many graphs, whether the
  all-reduce is among their ops (scan bodies included), and the result against eager.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from dp_checks import max_difference

from funrl import distributed, random, tree
from funrl.agents import common, sac

# Two Pendulum envs x 2 steps per update, a gradient step per 2 transitions on batches of 7 (4
# rows from the first env, 3 from the second: the ranks' shares differ), learning from the second
# update on; 16-unit networks.
TINY = sac.SACConfig(
    total_steps=4 * 2 * 2,
    num_envs=2,
    num_steps=2,
    train_frequency=2,
    buffer_size=16,
    batch_size=7,
    learning_starts=4,
    hidden_sizes=(16, 16),
)


def findings() -> dict[str, Any] | None:
    distributed.init("cpu")
    first = distributed.is_first()
    out: dict[str, Any] = {}

    dp_agent = sac.make_train(TINY, data_parallel=distributed.data_parallel())
    dp_state, dp_metrics = common.train(dp_agent, random.key(3), compile=False)
    shares = distributed.gather_to_first(dp_state.params)
    if first:
        one_state, one_metrics = common.train(sac.make_train(TINY), random.key(3), compile=False)
        out["params"] = max_difference(dp_state.params, one_state.params)
        out["log_alpha"] = max_difference(dp_state.log_alpha, one_state.log_alpha)
        # no episode ends in 8 steps of Pendulum: episode_return is NaN in both
        out["metrics"] = max_difference(*(tree.map(torch.nan_to_num, m) for m in (dp_metrics, one_metrics)))
        out["ranks_agree"] = max_difference(shares[0], shares[1])
        out["moved"] = max_difference(one_state.params, sac.make_train(TINY).init(random.key(3)).params)
        out["local_buffer_rows"] = dp_state.buffer.experience["obs"].shape[0]
    dist.barrier()

    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    # Learning from the first update: an eager update before learning_starts skips the gradient
    # steps (and their all-reduces) that a traced one computes and drops.
    learning_agent = sac.make_train(
        dataclasses.replace(TINY, learning_starts=0), data_parallel=distributed.data_parallel()
    )

    def step(state: Any, run_key: torch.Tensor) -> Any:
        return learning_agent.update(state, random.fold_in(run_key, state.update_count))

    # Rank 0 traces; the other rank runs the same update eagerly, its all-reduces pairing with
    # those in rank 0's graph (tracing costs more than the rest of these checks together).
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend=capture) if first else step
    state, run_key = common.init_state(learning_agent, random.key(4))
    eager = common.contiguous_copy(state)  # the update writes into its buffer's storage
    for _ in range(3):
        state, _ = compiled(state, run_key)
        eager, _ = step(eager, run_key)
    code = "\n".join(
        module.code for gm in graphs for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
    )
    if first:
        out["graphs"] = len(graphs)
        out["all_reduce_in_graph"] = "all_reduce" in code
        out["compiled_params"] = max_difference(state.params, eager.params)
    return out if first else None
