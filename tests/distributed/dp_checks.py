"""The ranks' side of ``test_data_parallel.py`` (2 ranks, :func:`launch.run_ranks`): data-parallel
PPO against one process holding every environment.

Rank 0 also trains the single-process agent itself (no collectives), so one launch compares
both; :func:`findings` returns them on rank 0 (None on the others) for the test to assert on.

- ``pendulum_*``: continuous PPO (observation and reward normalisation) on Pendulum, eager,
  3 updates of 4 envs on 2 ranks against 4 envs in one process: params and statistics.
- ``graphs`` / ``all_reduce_in_graph`` / ``compiled_*``: CartPole PPO's update traced by dynamo
  with ``fullgraph=True`` (a graph break raises) and run as captured: how many graphs, whether the
  all-reduce is among their ops (scan bodies included), and the result against eager.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from funrl import distributed, random, tree
from funrl.agents import common, ppo

TINY = dict(
    total_steps=3 * 4 * 16, num_envs=4, num_steps=16, update_epochs=2, num_minibatches=2, hidden_sizes=(16,)
)


def max_difference(a: Any, b: Any, relative: bool = False) -> float:
    """The largest ``|a - b|`` over the leaves, divided by ``max(|b|, 1)`` when ``relative``."""
    pairs = zip(tree.leaves(a), tree.leaves(b), strict=True)
    scale = (lambda y: y.double().abs().clamp_min(1.0)) if relative else (lambda y: 1.0)
    return max(float(((x.double() - y.double()).abs() / scale(y)).max()) for x, y in pairs)


def rms_stats(state: ppo.PPOTrainState) -> list[torch.Tensor]:
    """Every running statistic (mean, var, count) in the env state, outermost wrapper first."""
    found, env_state = [], state.env_state
    while hasattr(env_state, "env_state"):
        for name in ("obs_rms", "return_rms"):
            if hasattr(env_state, name):
                found.extend(getattr(env_state, name))
        env_state = env_state.env_state
    return found


def findings() -> dict[str, Any] | None:
    distributed.init("cpu")
    first = distributed.is_first()
    out: dict[str, Any] = {}

    config = ppo.PPOConfig(env_id="Pendulum-v1", **TINY)
    dp_state, dp_metrics = common.train(
        ppo.make_train(config, data_parallel=distributed.data_parallel()), random.key(3), compile=False
    )
    shares = distributed.gather_to_first(dp_state.params)
    if first:
        one_state, one_metrics = common.train(ppo.make_train(config), random.key(3), compile=False)
        out["pendulum_params"] = max_difference(dp_state.params, one_state.params)
        out["pendulum_ranks_agree"] = max_difference(shares[0], shares[1])
        # relative: the return variance is large, and the pooled sums round at its scale
        out["pendulum_stats"] = max_difference(rms_stats(dp_state), rms_stats(one_state), relative=True)
        out["pendulum_loss"] = max_difference(dp_metrics["loss"], one_metrics["loss"])
        out["pendulum_stats_moved"] = max_difference(
            rms_stats(one_state), rms_stats(ppo.make_train(config).init(random.key(0)))
        )
    dist.barrier()

    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    agent = ppo.make_train(ppo.PPOConfig(**TINY), data_parallel=distributed.data_parallel())

    def step(state: Any, run_key: torch.Tensor) -> Any:
        return agent.update(state, random.fold_in(run_key, state.update_count))

    # Rank 0 traces; the other rank runs the same update eagerly, its all-reduces pairing with
    # those in rank 0's graph (tracing costs more than the rest of these checks together).
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend=capture) if first else step
    state, run_key = common.init_state(agent, random.key(4))
    eager = state
    for _ in range(2):
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
