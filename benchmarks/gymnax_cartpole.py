"""gymnax CartPole-v1 random-policy steps per second: the JAX peer for env_throughput.py.

Runs in a separate Python that has ``jax`` and ``gymnax`` (never a funrl dependency), e.g.
``python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install gymnax six``; env_throughput.py
calls it with ``--gymnax-python /tmp/jaxvenv/bin/python`` so both are measured in the same run.
The loop is gymnax's own recipe and the same shape as funrl's benchmark: ``chunk`` steps per call
as one ``jax.lax.scan`` under ``jax.jit``, ``jax.vmap`` over envs, a fresh key per step split into
the action key (``jax.random.randint``) and one key per env for ``env.step`` (auto-reset inside).

    /tmp/jaxvenv/bin/python benchmarks/gymnax_cartpole.py --num-envs 256 4096 --steps 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[256, 4096])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make("CartPole-v1")
    results = {}
    for n in args.num_envs:
        step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

        @jax.jit
        def run(key, obs, state, n=n, step=step):
            def one(carry, t):
                obs, state, total = carry
                k_act, k_env = jax.random.split(jax.random.fold_in(key, t))
                action = jax.random.randint(k_act, (n,), 0, 2)
                obs, state, reward, *_ = step(jax.random.split(k_env, n), state, action, params)
                return (obs, state, total + reward.sum()), t

            (obs, state, total), _ = jax.lax.scan(one, (obs, state, jnp.zeros(())), jnp.arange(args.chunk))
            return obs, state, total

        key = jax.random.PRNGKey(0)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, n), params)
        t0 = time.perf_counter()
        obs, state, total = jax.block_until_ready(run(jax.random.fold_in(key, 1), obs, state))
        first = time.perf_counter() - t0
        calls = max(1, args.steps // args.chunk)
        rates = []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            for c in range(calls):
                obs, state, total = run(jax.random.fold_in(key, 2 + r * calls + c), obs, state)
            jax.block_until_ready(total)
            rates.append(n * args.chunk * calls / (time.perf_counter() - t0))
        results[n] = {"steps_per_s": statistics.median(rates), "first_call_s": first}
    print(json.dumps({"jax": jax.__version__, "results": results}))


if __name__ == "__main__":
    main()
