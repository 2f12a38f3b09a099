"""Where an update's time goes: torch ops per eager call, and graph nodes per funrl function.

    OMP_NUM_THREADS=1 python benchmarks/eager_profile.py --algo ppo [--updates 5] [--top 25]
    OMP_NUM_THREADS=1 python benchmarks/eager_profile.py --algo ppo --trace

Builds the agent's default config (PPO: CartPole-v1, 4 envs x 128 steps, 4 epochs of 4
minibatches), runs one update to warm up, then times ``--updates`` updates (median, ms) and,
for one more update each:

- ``torch.profiler``: the number of torch ops dispatched (``aten::`` calls seen from Python) and
  the ops with the most calls;
- ``cProfile``: the Python functions with the most cumulative time (``--top`` rows).

The same for one rollout step (the policy draw plus one batched env step) and for the pieces the
update is built from: a key split, a fold-in, a uniform draw, ``nets.apply`` of the policy, one
optimiser update.

``--trace`` instead captures the update step with dynamo (``fullgraph=True``, a backend that keeps
the graph and compiles nothing) and prints how long the capture took and how many graph nodes,
loop bodies included, each funrl function contributed (the innermost funrl frame of a node's
stack trace): dynamo's and the compiler's time grow with that count.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from funrl import nets, optim, random
from funrl.agents import dqn, ppo, sac, td3
from funrl.agents.common import make_step
from funrl.nets import distributions

MAKERS = {"ppo": (ppo.make_train, ppo.PPOConfig), "dqn": (dqn.make_train, dqn.DQNConfig),
          "sac": (sac.make_train, sac.SACConfig), "td3": (td3.make_train, td3.TD3Config)}  # fmt: skip


def op_counts(fn: Callable[[], Any]) -> tuple[int, Counter]:
    """Total aten ops one call of ``fn`` dispatches, and the count per op name."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    counts = Counter({e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")})
    top_level = sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)
    return top_level, counts


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def report(name: str, fn: Callable[[], Any], repeats: int, top: int, python: bool) -> None:
    fn()  # warm-up
    ms = median_ms(fn, repeats)
    ops, counts = op_counts(fn)
    print(f"\n## {name}: {ms:.2f} ms (median of {repeats}), {ops} top-level aten ops")
    print("most called:", ", ".join(f"{k} {v}" for k, v in counts.most_common(12)))
    if python:
        profiler = cProfile.Profile()
        profiler.enable()
        fn()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
        print(text.getvalue())


def graph_nodes_by_function(gm: torch.fx.GraphModule, counts: Counter) -> None:
    """Count ``gm``'s op nodes (its subgraphs' too) by the innermost funrl function that made them."""
    for node in gm.graph.nodes:
        sub = getattr(gm, str(node.target), None) if node.op == "get_attr" else None
        if isinstance(sub, torch.fx.GraphModule):
            graph_nodes_by_function(sub, counts)
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', node.meta.get("stack_trace") or "")
        ours = [(path.split("/funrl/")[1], name) for path, name in frames if "/funrl/" in path]
        counts[f"{ours[-1][0]}:{ours[-1][1]}" if ours else "(outside funrl)"] += 1


def trace_report(step: Callable[..., Any], state: Any, run_key: torch.Tensor, top: int) -> None:
    graphs: list[torch.fx.GraphModule] = []

    def keep_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    captured = torch.compile(step, backend=keep_graph, fullgraph=True, dynamic=False)
    start = time.perf_counter()
    captured(state, run_key)
    seconds = time.perf_counter() - start
    counts: Counter = Counter()
    for gm in graphs:
        graph_nodes_by_function(gm, counts)
    files: Counter = Counter()
    for name, n in counts.items():
        files[name.split(":")[0]] += n
    print(f"dynamo capture: {seconds:.1f} s, {sum(counts.values())} graph nodes")
    print("by file:", ", ".join(f"{k} {v}" for k, v in files.most_common()))
    for name, n in counts.most_common(top):
        print(f"{n:6d}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", default="ppo", choices=sorted(MAKERS))
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-python", action="store_true", help="skip the cProfile tables")
    parser.add_argument("--trace", action="store_true", help="graph nodes per funrl function instead")
    args = parser.parse_args()
    torch.manual_seed(0)
    make_train, config_type = MAKERS[args.algo]
    agent = make_train(config_type())
    run_key = random.key(0)
    state = agent.init(random.key(1))
    step = make_step(agent, batched=False, compile=False)
    if args.trace:
        trace_report(step, state, run_key, args.top)
        return
    holder = {"state": state}

    def one_update() -> None:
        holder["state"], _ = step(holder["state"], run_key)

    python = not args.no_python
    report(f"{args.algo} eager update", one_update, args.updates, args.top, python)
    if args.algo != "ppo":
        return
    # The pieces of PPO's update, on its own shapes.
    module = nets.ActorCritic(4, 2, (64, 64), "tanh")
    params = nets.init(module, random.key(2))
    obs = torch.zeros(4, 4)
    benv = agent.env
    env_state = holder["state"].env_state
    key = random.key(3)

    def rollout_step() -> None:
        logits, _ = nets.apply(module, params, obs)
        action, _ = distributions.categorical.sample_and_log_prob(key, logits)
        benv.step(key, env_state, action, agent.env_params)

    report("one rollout step (policy + draw + env step)", rollout_step, 50, args.top, python)
    report("random.split", lambda: random.split(key), 50, 0, False)
    report("random.fold_in", lambda: random.fold_in(key, 7), 50, 0, False)
    report("random.uniform(key, (256,))", lambda: random.uniform(key, (256,)), 50, 0, False)
    report("nets.apply(ActorCritic, obs [4, 4])", lambda: nets.apply(module, params, obs), 50, 0, False)
    tx = optim.chain(optim.clip_by_global_norm(0.5), optim.adam(2.5e-4, eps=1e-5))
    opt_state = tx.init(params)
    grads = {k: torch.ones_like(v) for k, v in params.items()}
    report("optimiser update + apply_updates", lambda: optim.apply_updates(
        params, tx.update(grads, opt_state, params)[0]), 50, 0, False)  # fmt: skip


if __name__ == "__main__":
    main()
