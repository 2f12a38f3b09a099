"""Tests for funrl.random: known answers, JAX agreement, vmap/compile invariance, statistics, errors.

Statistical tests run on fixed keys, so they are deterministic; each threshold is the critical
value of the named test at a small significance level (stated next to it), not a tuned number.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.func import vmap

import funrl.random as R
from funrl import control

FIXTURE = json.loads((pathlib.Path(__file__).parent / "test_random_jax_vectors.json").read_text())
FLOATS = [torch.float32, torch.float64]


def _word_tensor(words: list[int]) -> torch.Tensor:
    return torch.tensor(words, dtype=torch.int64)


def _from_hex(values: list[str], dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    return torch.tensor([float.fromhex(v) for v in values], dtype=dtype).reshape(shape)


# ---------------------------------------------------------------------------------------------
# Statistical helpers (no scipy: the critical values below are standard closed forms)
# ---------------------------------------------------------------------------------------------


def ks_statistic(samples: torch.Tensor, cdf) -> float:
    """Kolmogorov-Smirnov distance between the empirical CDF of ``samples`` and ``cdf``."""
    x, _ = torch.sort(samples.double().flatten())
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - f).max().item(), (f - (i - 1) / n).max().item())


def ks_critical(n: int, alpha: float = 1e-3) -> float:
    """Asymptotic Kolmogorov critical value: ``sqrt(-ln(alpha / 2) / 2) / sqrt(n)``."""
    return math.sqrt(-math.log(alpha / 2) / 2) / math.sqrt(n)


# Upper 1e-4 quantiles of chi-square, from scipy.stats.chi2.isf(1e-4, dof) (scipy is not a test
# dependency, so they are tabulated for the degrees of freedom used here).
_CHI2_CRITICAL_1E4 = {
    3: 21.1075,
    4: 23.5127,
    5: 25.7448,
    6: 27.8563,
    9: 33.7199,
    16: 45.9249,
    96: 156.2589,
}


def chi2_critical(dof: int) -> float:
    """The chi-square statistic exceeded with probability 1e-4 under the null hypothesis."""
    return _CHI2_CRITICAL_1E4[dof]


def chi2_statistic(counts: torch.Tensor, expected: torch.Tensor) -> float:
    counts, expected = counts.double(), expected.double()
    return (((counts - expected) ** 2) / expected).sum().item()


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def test_statistical_helpers_reject_planted_bias():
    """The checkers themselves must fail on a wrong distribution, else the tests below prove nothing."""
    key = R.key(0)
    u = R.uniform(key, (20_000,), torch.float64)
    assert ks_statistic(u, lambda x: x) < ks_critical(u.numel())
    assert ks_statistic(u**1.1, lambda x: x) > ks_critical(u.numel())  # slightly skewed
    z = R.normal(key, (20_000,), torch.float64)
    assert ks_statistic(z, normal_cdf) < ks_critical(z.numel())
    assert ks_statistic(z + 0.05, normal_cdf) > ks_critical(z.numel())  # shifted by 0.05 sigma
    counts = torch.bincount(R.randint(key, (60_000,), 0, 6), minlength=6)
    expected = torch.full((6,), 10_000.0)
    assert chi2_statistic(counts, expected) < chi2_critical(5)
    loaded = counts.clone()
    loaded[0] += 400
    loaded[1] -= 400
    assert chi2_statistic(loaded, expected) > chi2_critical(5)


# ---------------------------------------------------------------------------------------------
# Known answers: Random123 and JAX
# ---------------------------------------------------------------------------------------------

RANDOM123_KAT = [  # threefry2x32_20 from Random123's kat_vectors (also REFERENCES.md)
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize(("key_words", "counter", "expected"), RANDOM123_KAT)
def test_threefry_random123_known_answers(key_words, counter, expected):
    k = tuple(torch.tensor(w, dtype=torch.int64) for w in key_words)
    c = tuple(torch.tensor(w, dtype=torch.int64) for w in counter)
    out = R.threefry2x32(k, c)
    assert (out[0].item(), out[1].item()) == expected


def test_fixture_recorded_under_jax_default_layout():
    assert FIXTURE["jax_threefry_partitionable"] is True
    assert FIXTURE["jax_enable_x64"] is True


@pytest.mark.parametrize("case", FIXTURE["threefry2x32"], ids=lambda c: hex(c["key"][0]))
def test_threefry_matches_jax(case):
    k = tuple(torch.tensor(w, dtype=torch.int64) for w in case["key"])
    c = tuple(torch.tensor(w, dtype=torch.int64) for w in case["counter"])
    out = R.threefry2x32(k, c)
    assert [out[0].item(), out[1].item()] == case["out"]


def test_threefry_vectorised_counters_match_jax():
    case = FIXTURE["threefry2x32_vector"]
    k = tuple(torch.tensor(w, dtype=torch.int64) for w in case["key"])
    y0, y1 = R.threefry2x32(k, (_word_tensor(case["counter_hi"]), _word_tensor(case["counter_lo"])))
    assert y0.tolist() == case["out_hi"]
    assert y1.tolist() == case["out_lo"]


@pytest.mark.parametrize("case", FIXTURE["prng_key"], ids=lambda c: str(c["seed"]))
def test_key_matches_jax_prngkey(case):
    k = R.key(case["seed"])
    assert k.dtype == torch.int64 and k.shape == (2,)
    assert k.tolist() == case["key"]
    # A tensor seed gives the same key.
    assert R.key(torch.tensor(case["seed"], dtype=torch.int64)).tolist() == case["key"]


@pytest.mark.parametrize("case", FIXTURE["split"], ids=lambda c: f"{c['seed']}-{c['num']}")
def test_split_matches_jax(case):
    keys = R.split(R.key(case["seed"]), case["num"])
    assert keys.shape == (case["num"], 2) and keys.dtype == torch.int64
    assert keys.tolist() == case["keys"]


@pytest.mark.parametrize("case", FIXTURE["fold_in"], ids=lambda c: f"{c['seed']}-{c['data']}")
def test_fold_in_matches_jax(case):
    k = R.key(case["seed"])
    assert R.fold_in(k, case["data"]).tolist() == case["key"]
    assert R.fold_in(k, torch.tensor(case["data"], dtype=torch.int64)).tolist() == case["key"]


@pytest.mark.parametrize("case", FIXTURE["bits_uint32"], ids=lambda c: f"{c['seed']}-{c['shape']}")
def test_bits_match_jax(case):
    b = R.bits(R.key(case["seed"]), case["shape"])
    assert b.shape == tuple(case["shape"]) and b.dtype == torch.int64
    assert b.tolist() == case["bits"]


@pytest.mark.parametrize(
    "case", FIXTURE["uniform"], ids=lambda c: f"{c['dtype']}-{c['seed']}-{c['minval']}-{c['maxval']}"
)
def test_uniform_matches_jax(case):
    dtype = getattr(torch, case["dtype"])
    lo, hi = case["minval"], case["maxval"]
    u = R.uniform(R.key(case["seed"]), case["shape"], dtype, lo, hi)
    ref = _from_hex(case["hex"], dtype, case["shape"])
    assert u.dtype == dtype and u.shape == ref.shape
    if (lo, hi) == (0.0, 1.0):
        assert torch.equal(u, ref)
    else:
        # XLA fuses u * (hi - lo) + lo into one multiply-add; torch rounds twice: one ulp at most.
        ulp = torch.finfo(dtype).eps * torch.maximum(ref.abs(), torch.tensor(abs(lo), dtype=dtype))
        assert torch.all((u - ref).abs() <= ulp)
    if dtype == torch.float32:
        # Exactly JAX's value once the multiply-add is rounded once (float64 holds it exactly).
        unit = R.uniform(R.key(case["seed"]), case["shape"], dtype)
        span = torch.tensor(hi, dtype=dtype) - torch.tensor(lo, dtype=dtype)
        fused = (unit.double() * span.double() + torch.tensor(lo, dtype=dtype).double()).float()
        assert torch.equal(torch.maximum(fused, torch.tensor(lo, dtype=dtype)), ref)


@pytest.mark.parametrize("case", FIXTURE["normal"], ids=lambda c: f"{c['seed']}-{c['shape']}")
def test_normal_close_to_jax(case):
    z = R.normal(R.key(case["seed"]), case["shape"])
    ref = _from_hex(case["hex"], torch.float32, case["shape"])
    # Same uniforms; erfinv implementations differ by a couple of ulps.
    torch.testing.assert_close(z, ref, rtol=5e-7, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Purity, vmap over keys equals a loop, compile equals eager
# ---------------------------------------------------------------------------------------------

LOGITS = torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0]])

SAMPLERS = {
    "split": lambda k: R.split(k, 3),
    "fold_in": lambda k: R.fold_in(k, 7),
    "fold_in_tensor": lambda k: R.fold_in(k, torch.tensor(12345)),
    "bits": lambda k: R.bits(k, (3, 4)),
    "block_words": lambda k: torch.stack(R.block_words(k, (3, 2))),
    "uniform32": lambda k: R.uniform(k, (5,), torch.float32, -2.0, 3.0),
    "uniform64": lambda k: R.uniform(k, (5,), torch.float64, -2.0, 3.0),
    "uniform_tensor_bounds": lambda k: R.uniform(k, (3,), minval=torch.tensor([0.0, 1.0, 2.0]), maxval=5.0),
    "normal32": lambda k: R.normal(k, (2, 3)),
    "normal64": lambda k: R.normal(k, (2, 3), torch.float64),
    "truncated_normal32": lambda k: R.truncated_normal(k, -1.0, 2.0, (6,)),
    "truncated_normal64": lambda k: R.truncated_normal(k, -1.0, 2.0, (6,), torch.float64),
    "randint": lambda k: R.randint(k, (7,), -3, 11),
    "bernoulli": lambda k: R.bernoulli(k, 0.3, (8,)),
    "bernoulli_tensor_p": lambda k: R.bernoulli(k, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)),
    "gumbel32": lambda k: R.gumbel(k, (4,)),
    "gumbel64": lambda k: R.gumbel(k, (4,), torch.float64),
    "exponential": lambda k: R.exponential(k, (4,), torch.float64),
    "categorical": lambda k: R.categorical(k, LOGITS),
    "categorical_shape": lambda k: R.categorical(k, LOGITS, shape=(3,)),
    "categorical_dim0": lambda k: R.categorical(k, LOGITS, dim=0),
    "permutation": lambda k: R.permutation(k, 9),
    "permutation_rows": lambda k: R.permutation(k, torch.arange(12).reshape(4, 3)),
    "choice_replace": lambda k: R.choice(k, 10, (6,)),
    "choice_no_replace": lambda k: R.choice(k, 10, (6,), replace=False),
    "choice_p": lambda k: R.choice(k, 4, (6,), p=torch.tensor([0.1, 0.2, 0.3, 0.4])),
    "choice_p_no_replace": lambda k: R.choice(
        k, 4, (3,), replace=False, p=torch.tensor([0.1, 0.2, 0.3, 0.4])
    ),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_vmap_over_keys_equals_loop(name):
    sampler = SAMPLERS[name]
    keys = R.split(R.key(2024), 5)
    batched = vmap(sampler)(keys)
    looped = torch.stack([sampler(k) for k in keys])
    assert batched.dtype == looped.dtype
    assert torch.equal(batched, looped)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_are_pure_and_key_dependent(name):
    sampler = SAMPLERS[name]
    a, b = R.split(R.key(7), 2)
    assert torch.equal(sampler(a), sampler(a.clone()))
    # A different key changes the draw; 4 unrelated keys all colliding would be a bug.
    draws = [sampler(k) for k in R.split(R.key(8), 4)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])


def test_nested_vmap_over_a_grid_of_keys():
    keys = vmap(lambda k: R.split(k, 3))(R.split(R.key(3), 2))  # [2, 3, 2]
    grid = vmap(vmap(lambda k: R.normal(k, (4,))))(keys)
    for i in range(2):
        for j in range(3):
            assert torch.equal(grid[i, j], R.normal(keys[i, j], (4,)))


def test_vmap_fold_in_over_data_equals_loop():
    k = R.key(11)
    data = torch.arange(6)
    batched = vmap(R.fold_in, in_dims=(None, 0))(k, data)
    assert torch.equal(batched, torch.stack([R.fold_in(k, i) for i in range(6)]))


def test_vmap_with_the_batch_dim_last_and_counters_broadcast_equals_loop():
    keys = R.split(R.key(12), 4)
    by_columns = vmap(lambda k: R.normal(k, (2, 3)), in_dims=1)(keys.t())
    assert torch.equal(by_columns, torch.stack([R.normal(k, (2, 3)) for k in keys]))
    # Counter words of two shapes broadcast against each batched key.
    counters = (torch.zeros(2, 1, dtype=torch.int64), torch.arange(3))

    def block(k: torch.Tensor) -> torch.Tensor:
        return torch.stack(R.threefry2x32((k[0], k[1]), counters))

    assert torch.equal(vmap(block)(keys), torch.stack([block(k) for k in keys]))


def test_keys_under_grad():
    """A draw inside a differentiated function is a constant of it: the gradient of ``x * noise``
    is the noise, for one key and, under vmap, for a batch of keys (grad inside vmap)."""

    def loss(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        k_noise, _ = R.split(R.fold_in(k, 3))
        return (x * R.normal(k_noise, (3,))).sum()

    def noise(k: torch.Tensor) -> torch.Tensor:
        return R.normal(R.split(R.fold_in(k, 3))[0], (3,))

    x = torch.ones(3)
    k = R.key(4)
    assert torch.equal(torch.func.grad(loss)(x, k), noise(k))
    keys = R.split(R.key(5), 4)
    per_key = vmap(torch.func.grad(loss), in_dims=(None, 0))(x, keys)
    assert torch.equal(per_key, torch.stack([noise(k) for k in keys]))
    # Keys derived inside the transform from a batched step counter, as a training loop does.
    steps = torch.arange(4)
    folded = vmap(
        torch.func.grad(lambda x, i: (x * R.uniform(R.fold_in(k, i), (3,))).sum()), in_dims=(None, 0)
    )
    assert torch.equal(folded(x, steps), torch.stack([R.uniform(R.fold_in(k, i), (3,)) for i in range(4)]))


def test_traced_graphs_follow_the_key():
    """make_fx, with and without functionalization, records the rounds as ops: the traced function
    computes from its input key (a value read on the host would be baked in as a constant)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def draw(k: torch.Tensor) -> torch.Tensor:
        return R.split(k, 3)

    for graph in (make_fx(draw)(R.key(0)), make_fx(torch.func.functionalize(draw))(R.key(0))):
        assert sum("xor" in str(node.target) for node in graph.graph.nodes) >= 20  # one per round
        assert torch.equal(graph(R.key(7)), R.split(R.key(7), 3))


class _CountTorchCalls(torch.overrides.TorchFunctionMode):
    """Counts the torch functions and tensor methods called (each one eager dispatch), not the
    attribute reads (``.dtype``, ``.shape``) of the input checks."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += getattr(func, "__name__", "") != "__get__"
        return func(*args, **(kwargs or {}))


# Threefry's 20 rounds at 6 ops each (add, mask, two for the rotation's halves, the add joining
# them, xor), 20 more for the 5 key injections, and a few to set up and finish.
_EAGER_CALL_BUDGET = {
    "split": (lambda k: R.split(k), 152),
    "fold_in": (lambda k: R.fold_in(k, 3), 148),
    "uniform": (lambda k: R.uniform(k, (256,)), 155),
}


@pytest.mark.parametrize("name", sorted(_EAGER_CALL_BUDGET))
def test_eager_calls_stay_within_their_op_budget(name):
    """Eagerly each op is one dispatch, and dispatches are nearly all a small call costs: the op
    count is the call's cost, and a round written with more ops than it needs fails here."""
    call, budget = _EAGER_CALL_BUDGET[name]
    k = R.key(0)
    with _CountTorchCalls() as counter:
        call(k)
    assert counter.calls <= budget


def test_key_from_tensor_seeds_equals_int_seeds():
    seeds = [0, 1, 2**33 + 5, -7]
    batch = R.key(torch.tensor(seeds))
    assert batch.shape == (4, 2)
    assert torch.equal(batch, torch.stack([R.key(s) for s in seeds]))


def test_block_words_xor_to_bits():
    """``block_words`` is the pair of words behind ``bits``: their xor is JAX's word."""
    for shape in [(), (3,), (2, 5), (17,)]:
        y0, y1 = R.block_words(R.key(5), shape)
        assert y0.shape == y1.shape == shape and y0.dtype == torch.int64
        assert torch.equal(y0 ^ y1, R.bits(R.key(5), shape))
        assert not torch.equal(y0, y1)
        assert int(torch.cat([y0.reshape(-1), y1.reshape(-1)]).max()) < 2**32
    with pytest.raises(TypeError, match=r"^key: expected dtype torch.int64"):
        R.block_words(torch.zeros(2), (3,))
    with pytest.raises(TypeError, match=r"^shape: expected an int or a sequence of ints"):
        R.block_words(R.key(0), "3")


@pytest.mark.parametrize("low, high", [(0, 1), (0, 2), (-4, 4), (3, 3 + 2**20), (0, 2**32), (0, 2**33)])
def test_randint_power_of_two_span_equals_the_general_path(low, high):
    """Python-int power-of-two spans take the masked path; tensor bounds take the remainder path."""
    k = R.key(11)
    fast = R.randint(k, (4096,), low, high)
    general = R.randint(k, (4096,), torch.tensor(low), torch.tensor(high))
    assert fast.dtype == general.dtype == torch.int64
    assert torch.equal(fast, general)
    assert fast.min() >= low and fast.max() < high


def _several_samplers(k: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # Kept to five Threefry blocks, each a few seconds of inductor's time. uniform, randint and
    # categorical of the same key and shape share one block (traced once).
    k1, k2 = R.split(k, 2)
    return (
        k1,
        R.uniform(k1, (16,), torch.float32, -1.0, 4.0),
        R.randint(k1, (16,), -3, 10),
        R.categorical(k1, torch.linspace(-1.0, 1.0, 16)),
        R.normal(R.fold_in(k2, 3), (16,), torch.float64),
        vmap(lambda kk: R.bits(kk, (2,)))(keys),
    )


@pytest.mark.slow
def test_compile_equals_eager():
    compiled = control.compile(_several_samplers)
    for seed in (0, 2**40 + 3):
        k, keys = R.key(seed), R.split(R.key(seed + 1), 3)
        eager_out, compiled_out = _several_samplers(k, keys), compiled(k, keys)
        for e, c in zip(eager_out, compiled_out, strict=True):
            assert e.dtype == c.dtype and e.shape == c.shape
            if e.dtype.is_floating_point:
                # Inductor's erfinv may differ by an ulp or two, and a backend may fuse the bounds'
                # multiply-add (one ulp of the largest bound, 4.0).
                eps = torch.finfo(e.dtype).eps
                torch.testing.assert_close(c, e, rtol=4 * eps, atol=4 * eps)
            else:
                assert torch.equal(c, e)


# ---------------------------------------------------------------------------------------------
# Dtypes and shapes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_samplers_return_requested_dtype_and_shape(dtype):
    k = R.key(0)
    for fn in (R.uniform, R.normal, R.gumbel, R.exponential):
        out = fn(k, (2, 3), dtype=dtype)
        assert out.dtype == dtype and out.shape == (2, 3)
    out = R.truncated_normal(k, -1.0, 1.0, (2, 3), dtype)
    assert out.dtype == dtype and out.shape == (2, 3)
    assert R.uniform(k, dtype=dtype).shape == ()
    assert R.uniform(k, 4, dtype).shape == (4,)


def test_float64_uniform_uses_52_bits():
    # float32 draws sit on a 2**-23 grid; float64 draws use the 64-bit word and are finer.
    u32 = R.uniform(R.key(5), (1000,), torch.float32).double()
    u64 = R.uniform(R.key(5), (1000,), torch.float64)
    assert torch.equal(u32 * 2**23, torch.floor(u32 * 2**23))
    assert not torch.equal(u64 * 2**23, torch.floor(u64 * 2**23))
    assert torch.equal(u64 * 2**52, torch.floor(u64 * 2**52))


def test_empty_shapes():
    k = R.key(0)
    assert R.uniform(k, (0,)).shape == (0,)
    assert R.bits(k, (3, 0)).shape == (3, 0)
    assert R.permutation(k, 0).shape == (0,)


# ---------------------------------------------------------------------------------------------
# Statistical sanity on fixed keys
# ---------------------------------------------------------------------------------------------

N = 100_000


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_ks_and_moments(dtype):
    u = R.uniform(R.key(100), (N,), dtype)
    assert ks_statistic(u, lambda x: x) < ks_critical(N)
    # Mean 1/2 (sd 1/sqrt(12 N)) and variance 1/12 (sd ~ 1/sqrt(180 N)); 5 standard errors.
    assert abs(u.double().mean().item() - 0.5) < 5 / math.sqrt(12 * N)
    assert abs(u.double().var().item() - 1 / 12) < 5 / math.sqrt(180 * N)


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_ks_and_moments(dtype):
    z = R.normal(R.key(101), (N,), dtype).double()
    assert ks_statistic(z, normal_cdf) < ks_critical(N)
    m = z.mean().item()
    c = z - m
    var = (c**2).mean().item()
    skew = (c**3).mean().item() / var**1.5
    kurt = (c**4).mean().item() / var**2 - 3
    # Standard errors: mean 1/sqrt(N), var sqrt(2/N), skewness sqrt(6/N), excess kurtosis sqrt(24/N).
    assert abs(m) < 5 / math.sqrt(N)
    assert abs(var - 1) < 5 * math.sqrt(2 / N)
    assert abs(skew) < 5 * math.sqrt(6 / N)
    assert abs(kurt) < 5 * math.sqrt(24 / N)


def test_split_streams_are_uncorrelated():
    a, b = R.split(R.key(102), 2)
    x, y = R.normal(a, (N,), torch.float64), R.normal(b, (N,), torch.float64)
    corr = torch.corrcoef(torch.stack([x, y]))[0, 1].item()
    assert abs(corr) < 5 / math.sqrt(N)
    # fold_in streams too.
    x2 = R.normal(R.fold_in(a, 1), (N,), torch.float64)
    assert abs(torch.corrcoef(torch.stack([x, x2]))[0, 1].item()) < 5 / math.sqrt(N)


def test_bits_are_uniform_per_bit():
    b = R.bits(R.key(103), (N,))
    ones = torch.stack([((b >> i) & 1).sum() for i in range(32)]).double()
    # Each bit ~ Binomial(N, 1/2): 5 standard errors.
    assert torch.all((ones - N / 2).abs() < 5 * math.sqrt(N / 4))


@pytest.mark.parametrize(("low", "high"), [(0, 10), (-5, 2), (3, 100)])
def test_randint_chi_square(low, high):
    x = R.randint(R.key(104), (N,), low, high)
    assert x.min().item() >= low and x.max().item() < high
    k = high - low
    counts = torch.bincount(x - low, minlength=k)
    assert chi2_statistic(counts, torch.full((k,), N / k)) < chi2_critical(k - 1)


def test_categorical_chi_square():
    logits = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0])
    x = R.categorical(R.key(105), logits, shape=(N,))
    counts = torch.bincount(x, minlength=5)
    assert chi2_statistic(counts, N * torch.softmax(logits.double(), 0)) < chi2_critical(4)


def test_categorical_with_minus_inf_logits_never_picks_them():
    logits = torch.tensor([0.0, -math.inf, 1.0, -math.inf])
    x = R.categorical(R.key(106), logits, shape=(5000,))
    assert set(x.unique().tolist()) == {0, 2}


def test_permutation_positions_chi_square():
    n, draws = 5, 20_000
    perms = vmap(lambda k: R.permutation(k, n))(R.split(R.key(107), draws))
    assert torch.equal(torch.sort(perms, dim=1).values, torch.arange(n).expand(draws, n))
    # counts[i, v]: how often value v lands in position i; uniform -> draws / n each.
    counts = torch.stack([torch.bincount(perms[:, i], minlength=n) for i in range(n)])
    assert chi2_statistic(counts, torch.full((n, n), draws / n)) < chi2_critical((n - 1) ** 2)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9])
def test_bernoulli_rate(p):
    x = R.bernoulli(R.key(108), p, (N,))
    assert x.dtype == torch.bool
    rate = x.double().mean().item()
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / N)


@pytest.mark.parametrize(("lower", "upper"), [(-1.0, 2.0), (0.0, math.inf), (-math.inf, -0.5), (1.0, 1.5)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_truncated_normal_bounds_and_ks(lower, upper, dtype):
    x = R.truncated_normal(R.key(109), lower, upper, (N,), dtype)
    assert torch.isfinite(x).all()
    assert (x > lower).all() and (x < upper).all()
    lo, hi = (
        normal_cdf(torch.tensor(lower, dtype=torch.float64)),
        normal_cdf(torch.tensor(upper, dtype=torch.float64)),
    )
    assert ks_statistic(x, lambda t: (normal_cdf(t) - lo) / (hi - lo)) < ks_critical(N)


def test_gumbel_and_exponential_means():
    g = R.gumbel(R.key(110), (N,), torch.float64)
    # Gumbel: mean = Euler's gamma, variance pi^2 / 6.
    assert abs(g.mean().item() - 0.5772156649) < 5 * math.pi / math.sqrt(6 * N)
    e = R.exponential(R.key(111), (N,), torch.float64)
    assert (e >= 0).all()
    assert abs(e.mean().item() - 1.0) < 5 / math.sqrt(N)


def test_choice_without_replacement_has_no_repeats():
    for seed in range(20):
        x = R.choice(R.key(seed), 10, (10,), replace=False)
        assert sorted(x.tolist()) == list(range(10))
        y = R.choice(R.key(seed), 50, (4, 5), replace=False)
        assert y.shape == (4, 5) and y.unique().numel() == 20
        p = torch.tensor([0.05, 0.05, 0.1, 0.2, 0.6])
        z = R.choice(R.key(seed), 5, (4,), replace=False, p=p)
        assert z.unique().numel() == 4


def test_choice_with_p_chi_square():
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    x = R.choice(R.key(112), 4, (N,), p=p)
    counts = torch.bincount(x, minlength=4)
    assert chi2_statistic(counts, N * p) < chi2_critical(3)


def test_choice_without_replacement_weighted_first_pick_follows_p():
    # Gumbel-top-k: the first item drawn follows p exactly.
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    first = vmap(lambda k: R.choice(k, 4, (2,), replace=False, p=p)[0])(R.split(R.key(113), 20_000))
    counts = torch.bincount(first, minlength=4)
    assert chi2_statistic(counts, 20_000 * p) < chi2_critical(3)


# ---------------------------------------------------------------------------------------------
# Invariants (hypothesis, derandomized)
# ---------------------------------------------------------------------------------------------

seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(seed=seeds)
def test_key_words_are_32_bit_and_reconstruct_seed(seed):
    k = R.key(seed)
    hi, lo = k.tolist()
    assert 0 <= hi < 2**32 and 0 <= lo < 2**32
    assert (hi << 32) | lo == seed % 2**64


@given(seed=seeds, num=st.integers(1, 16))
def test_split_keys_are_distinct_words(seed, num):
    keys = R.split(R.key(seed), num)
    assert keys.shape == (num, 2)
    assert ((keys >= 0) & (keys < 2**32)).all()
    assert len({tuple(k) for k in keys.tolist()}) == num
    # split is a prefix-stable function of num: keys[i] depends on i only.
    assert torch.equal(R.split(R.key(seed), num + 1)[:num], keys)


@given(seed=seeds, a=finite, width=st.floats(1e-3, 1e6), dtype=st.sampled_from(FLOATS))
def test_uniform_in_half_open_interval(seed, a, width, dtype):
    lo = torch.tensor(a, dtype=dtype).item()
    hi = torch.tensor(a + width, dtype=dtype).item()
    if not hi > lo:
        return
    u = R.uniform(R.key(seed), (64,), dtype, lo, hi)
    assert (u >= lo).all() and (u < hi).all()


@given(seed=seeds, n=st.integers(0, 300), dtype=st.sampled_from(FLOATS))
def test_unit_uniform_shortcut_equals_the_scaled_and_clamped_draw(seed, n, dtype):
    # Python bounds 0 and 1 return the unit draw as it is; tensor bounds take the general path.
    unit = R.uniform(R.key(seed), (n,), dtype)
    general = R.uniform(
        R.key(seed), (n,), dtype, torch.tensor(0.0, dtype=dtype), torch.tensor(1.0, dtype=dtype)
    )
    assert unit.dtype == general.dtype == dtype
    assert torch.equal(unit, general) and torch.equal(R.uniform(R.key(seed), (n,), dtype, 0, 1), unit)
    assert (unit >= 0).all() and (unit < 1).all()


@given(seed=seeds, low=st.integers(-(2**40), 2**40), span=st.integers(1, 2**40))
def test_randint_in_half_open_range(seed, low, span):
    x = R.randint(R.key(seed), (64,), low, low + span)
    assert x.dtype == torch.int64
    assert (x >= low).all() and (x < low + span).all()


@given(seed=seeds, n=st.integers(0, 200))
def test_permutation_is_a_permutation(seed, n):
    perm = R.permutation(R.key(seed), n)
    assert perm.dtype == torch.int64
    assert sorted(perm.tolist()) == list(range(n))


@given(seed=seeds, a=st.floats(-3, 3), width=st.floats(0.05, 3))
def test_truncated_normal_inside_bounds(seed, a, width):
    x = R.truncated_normal(R.key(seed), a, a + width, (64,))
    assert (x > torch.tensor(a, dtype=torch.float32)).all()
    assert (x < torch.tensor(a + width, dtype=torch.float32)).all()


@given(seed=seeds, data=st.integers(0, 2**32 - 1))
def test_fold_in_int_equals_tensor_data(seed, data):
    k = R.key(seed)
    assert torch.equal(R.fold_in(k, data), R.fold_in(k, torch.tensor(data)))


# ---------------------------------------------------------------------------------------------
# Bad input: the message names the argument
# ---------------------------------------------------------------------------------------------

KEY = R.key(0)

BAD_INPUTS = [
    ("wrong key dtype", lambda: R.uniform(KEY.to(torch.int32), (2,)), TypeError, "key"),
    ("float key", lambda: R.split(KEY.float()), TypeError, "key"),
    ("key not a tensor", lambda: R.normal([0, 0], (2,)), TypeError, "key"),
    ("batched key without vmap", lambda: R.bits(R.split(KEY, 3), (2,)), ValueError, "key"),
    ("key of wrong length", lambda: R.fold_in(torch.zeros(3, dtype=torch.int64), 1), ValueError, "key"),
    ("float seed", lambda: R.key(1.5), TypeError, "seed"),
    ("bool seed", lambda: R.key(True), TypeError, "seed"),
    ("string seed", lambda: R.key("0"), TypeError, "seed"),
    ("float tensor seed", lambda: R.key(torch.tensor(1.0)), TypeError, "seed"),
    ("seed too large", lambda: R.key(2**64), ValueError, "seed"),
    ("seed too small", lambda: R.key(-(2**63) - 1), ValueError, "seed"),
    ("num zero", lambda: R.split(KEY, 0), ValueError, "num"),
    ("num float", lambda: R.split(KEY, 2.0), ValueError, "num"),
    ("negative shape", lambda: R.uniform(KEY, (2, -1)), ValueError, "shape"),
    ("shape not ints", lambda: R.normal(KEY, "ab"), TypeError, "shape"),
    ("shape None", lambda: R.bits(KEY, None), TypeError, "shape"),
    ("integer dtype", lambda: R.uniform(KEY, (2,), torch.int64), TypeError, "dtype"),
    ("normal integer dtype", lambda: R.normal(KEY, (2,), torch.int32), TypeError, "dtype"),
    ("float data", lambda: R.fold_in(KEY, 1.5), TypeError, "data"),
    ("float tensor data", lambda: R.fold_in(KEY, torch.tensor(1.0)), TypeError, "data"),
    ("vector data", lambda: R.fold_in(KEY, torch.arange(3)), ValueError, "data"),
    ("integer logits", lambda: R.categorical(KEY, torch.tensor([1, 2, 3])), TypeError, "logits"),
    ("list logits", lambda: R.categorical(KEY, [0.1, 0.2]), TypeError, "logits"),
    ("scalar logits", lambda: R.categorical(KEY, torch.tensor(0.5)), ValueError, "logits"),
    ("randint high <= low", lambda: R.randint(KEY, (2,), 5, 5), ValueError, "high"),
    ("negative permutation n", lambda: R.permutation(KEY, -1), ValueError, "n"),
    ("scalar tensor permutation", lambda: R.permutation(KEY, torch.tensor(3)), ValueError, "n"),
    ("choice n zero", lambda: R.choice(KEY, 0), ValueError, "n"),
    ("choice too many", lambda: R.choice(KEY, 3, (4,), replace=False), ValueError, "shape"),
    ("choice p shape", lambda: R.choice(KEY, 3, (2,), p=torch.ones(4) / 4), ValueError, "p"),
]


@pytest.mark.parametrize(("case", "call", "error", "argument"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_naming_the_argument(case, call, error, argument):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(f"{argument}:"), str(info.value)
