"""Record reference vectors from ``jax.random`` into ``tests/test_random_jax_vectors.json``.

Not part of the package and not run in CI (pytest does not collect it; JAX is never a funrl
dependency). It was run once in a scratch virtual environment::

    python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install jax jaxlib
    /tmp/jaxvenv/bin/python tests/data/record_jax_vectors.py

Everything is recorded under JAX's default ``jax_threefry_partitionable=True`` and with
``jax_enable_x64=True`` so that 64-bit seeds keep their high word (without x64, JAX truncates a
seed to 32 bits) and float64 uniforms are available. 32-bit words are stored as ints.
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402  (after the x64 switch, as JAX requires)
from jax.extend.random import threefry_2x32  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parents[1] / "test_random_jax_vectors.json"

SEEDS = [0, 1, 42, 12345, 2**31 - 1, 2**32 - 1, 2**32, 2**40 + 7, 2**63 - 1, -1, -(2**40) - 3]
SPLIT_SEEDS = [0, 1, 42, 2**40 + 7]
FOLD_DATA = [0, 1, 7, 42, 2**31 - 1, 2**32 - 1]
BITS_SHAPES = [[], [1], [7], [3, 4], [2, 3, 5]]
UNIFORM_CASES = [  # (seed, shape, minval, maxval)
    (0, [8], 0.0, 1.0),
    (1, [3, 5], 0.0, 1.0),
    (42, [16], -2.5, 3.0),
    (7, [4, 4], -0.3, 0.7),
    (2**40 + 7, [10], 10.0, 1000.0),
]
NORMAL_CASES = [(0, [16]), (3, [4, 8]), (2**32 + 5, [32])]


def words(x: jax.Array) -> list:
    return np.asarray(x, dtype=np.uint32).astype(np.int64).tolist()


def main() -> None:
    assert jax.config.jax_threefry_partitionable is True, "record under JAX's default layout"
    raw_cases = [
        ([0, 0], [0, 0]),
        ([0xFFFFFFFF, 0xFFFFFFFF], [0xFFFFFFFF, 0xFFFFFFFF]),
        ([0x13198A2E, 0x03707344], [0x243F6A88, 0x85A308D3]),
        ([1, 2], [3, 4]),
        ([0xDEADBEEF, 0x0BADF00D], [0x12345678, 0x9ABCDEF0]),
    ]
    threefry = []
    for k, c in raw_cases:
        out = threefry_2x32(jnp.array(k, dtype=jnp.uint32), jnp.array(c, dtype=jnp.uint32))
        threefry.append({"key": k, "counter": c, "out": words(out)})
    # Vectorised counters: one key, an array of counter words (the layout bits() uses).
    counters = np.arange(6, dtype=np.uint32)
    out = threefry_2x32(
        jnp.array([42, 7], dtype=jnp.uint32),
        jnp.concatenate([jnp.zeros(6, jnp.uint32), jnp.asarray(counters)]),
    )
    threefry_vector = {"key": [42, 7], "counter_hi": [0] * 6, "counter_lo": counters.tolist()}
    threefry_vector["out_hi"], threefry_vector["out_lo"] = words(out[:6]), words(out[6:])

    prng_key = [{"seed": s, "key": words(jax.random.PRNGKey(s))} for s in SEEDS]
    split = [
        {"seed": s, "num": n, "keys": words(jax.random.split(jax.random.PRNGKey(s), n))}
        for s in SPLIT_SEEDS
        for n in (2, 3, 5)
    ]
    fold_in = [
        {"seed": s, "data": d, "key": words(jax.random.fold_in(jax.random.PRNGKey(s), d))}
        for s in (0, 42)
        for d in FOLD_DATA
    ]
    bits = [
        {
            "seed": s,
            "shape": shape,
            "bits": words(jax.random.bits(jax.random.PRNGKey(s), tuple(shape), jnp.uint32)),
        }
        for s in (0, 5)
        for shape in BITS_SHAPES
    ]
    uniform = []
    for dtype in ("float32", "float64"):
        for s, shape, lo, hi in UNIFORM_CASES:
            u = jax.random.uniform(jax.random.PRNGKey(s), tuple(shape), dtype, lo, hi)
            u = np.asarray(u)
            assert u.dtype == np.dtype(dtype)
            # float.hex keeps every bit through JSON.
            values = [float(v).hex() for v in u.reshape(-1)]
            uniform.append(
                {"seed": s, "shape": shape, "dtype": dtype, "minval": lo, "maxval": hi, "hex": values}
            )
    normal = []
    for s, shape in NORMAL_CASES:
        z = np.asarray(jax.random.normal(jax.random.PRNGKey(s), tuple(shape), jnp.float32))
        assert z.dtype == np.float32
        normal.append(
            {"seed": s, "shape": shape, "dtype": "float32", "hex": [float(v).hex() for v in z.reshape(-1)]}
        )
    record = {
        "jax_version": jax.__version__,
        "jax_threefry_partitionable": bool(jax.config.jax_threefry_partitionable),
        "jax_enable_x64": True,
        "threefry2x32": threefry,
        "threefry2x32_vector": threefry_vector,
        "prng_key": prng_key,
        "split": split,
        "fold_in": fold_in,
        "bits_uint32": bits,
        "uniform": uniform,
        "normal": normal,
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
