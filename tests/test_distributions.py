"""funrl.nets.distributions: pure-function distributions against torch.distributions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributions as td
from hypothesis import given
from hypothesis import strategies as st

from funrl import random
from funrl.nets import distributions as D

KEY = random.key(0)


def assert_close_to_reference(ours: torch.Tensor, reference: torch.Tensor, atol: float = 1e-5) -> None:
    """Same shape and values within ``atol`` (absolute, plus the same relative tolerance)."""
    assert ours.shape == reference.shape, (ours.shape, reference.shape)
    torch.testing.assert_close(ours, reference.to(ours.dtype), atol=atol, rtol=atol)


def _params(seed: int, shape: tuple[int, ...], dtype=torch.float32):
    k1, k2 = random.split(random.key(seed))
    loc = 2.0 * random.normal(k1, shape, dtype)
    scale = random.uniform(k2, shape, dtype, 0.05, 3.0)
    return loc, scale


def _tanh_normal_reference(loc, scale):
    return td.TransformedDistribution(
        td.Independent(td.Normal(loc, scale), 1), [td.TanhTransform()], validate_args=False
    )


def test_reference_checker_catches_planted_bugs():
    """The comparison helper rejects a log_prob that forgets tanh's log-det, and a wrong shape."""
    loc, scale = _params(1, (4, 3))
    value = torch.tanh(loc + 0.3)
    reference = _tanh_normal_reference(loc, scale).log_prob(value)
    assert_close_to_reference(D.tanh_normal.log_prob(loc, scale, value), reference)
    forgot_log_det = D.normal.log_prob(loc, scale, torch.atanh(value))
    with pytest.raises(AssertionError):
        assert_close_to_reference(forgot_log_det, reference)
    with pytest.raises(AssertionError):
        assert_close_to_reference(reference.unsqueeze(-1), reference)


# ---------------------------------------------------------------------------------------------
# categorical
# ---------------------------------------------------------------------------------------------


@given(
    batch=st.lists(st.integers(1, 4), max_size=2),
    classes=st.integers(1, 6),
    seed=st.integers(0, 2**40),
    masked=st.booleans(),
)
def test_categorical_matches_torch(batch, classes, seed, masked):
    shape = (*batch, classes)
    logits = 3.0 * random.normal(random.key(seed), shape)
    if masked and classes > 1:  # an illegal action: -inf logit contributes 0 to the entropy
        logits = logits.index_fill(-1, torch.tensor([0]), -math.inf)
    reference = td.Categorical(logits=logits)
    value = D.categorical.sample(random.key(seed + 1), logits)
    assert value.shape == tuple(batch) and value.dtype == torch.int64
    assert_close_to_reference(D.categorical.log_prob(logits, value), reference.log_prob(value))
    assert_close_to_reference(D.categorical.entropy(logits), reference.entropy())
    assert torch.isfinite(D.categorical.entropy(logits)).all()
    assert torch.equal(D.categorical.mode(logits), reference.mode)
    if masked and classes > 1:
        assert (value != 0).all()
    sampled, log_prob = D.categorical.sample_and_log_prob(random.key(seed + 1), logits)
    assert torch.equal(sampled, value)
    assert_close_to_reference(log_prob, reference.log_prob(value))


def test_categorical_log_prob_broadcasts_values_like_torch():
    logits = random.normal(KEY, (3, 5))
    values = torch.tensor([[0], [4]]).expand(2, 3)  # [2, 3] against batch [3]
    reference = td.Categorical(logits=logits).log_prob(values)
    assert_close_to_reference(D.categorical.log_prob(logits, values), reference)


def test_categorical_sample_frequencies():
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    n = 40_000
    samples = D.categorical.sample(KEY, logits.expand(n, 4))
    counts = torch.bincount(samples, minlength=4).double()
    expected = n * logits.exp().double()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 16.27, chi2  # chi-square, 3 degrees of freedom, p = 0.001


# ---------------------------------------------------------------------------------------------
# normal and tanh_normal
# ---------------------------------------------------------------------------------------------


@given(
    batch=st.lists(st.integers(1, 4), max_size=2),
    dim=st.integers(1, 4),
    seed=st.integers(0, 2**40),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_normal_matches_independent_normal(batch, dim, seed, dtype):
    loc, scale = _params(seed, (*batch, dim), dtype)
    reference = td.Independent(td.Normal(loc, scale), 1)
    value = D.normal.sample(random.key(seed + 1), loc, scale)
    assert value.shape == loc.shape and value.dtype == dtype
    assert_close_to_reference(D.normal.log_prob(loc, scale, value), reference.log_prob(value))
    assert_close_to_reference(D.normal.entropy(loc, scale), reference.entropy())
    assert torch.equal(D.normal.mode(loc, scale), loc)
    sampled, log_prob = D.normal.sample_and_log_prob(random.key(seed + 1), loc, scale)
    torch.testing.assert_close(sampled, value)
    assert_close_to_reference(log_prob, reference.log_prob(value))


def test_normal_broadcasts_a_shared_scale():
    loc = random.normal(KEY, (5, 3))
    scale = torch.tensor([0.5, 1.0, 2.0])  # a state-independent log-std parameter, exp'ed
    reference = td.Independent(td.Normal(loc, scale), 1)
    assert_close_to_reference(D.normal.entropy(loc, scale), reference.entropy())
    assert D.normal.sample(KEY, loc, scale).shape == (5, 3)
    assert D.normal.mode(loc, scale).shape == (5, 3)


def test_normal_samples_have_the_right_moments_and_are_reparameterised():
    loc = torch.tensor([1.0, -2.0], requires_grad=True)
    scale = torch.tensor([0.5, 3.0], requires_grad=True)
    n = 50_000
    samples = D.normal.sample(KEY, loc.expand(n, 2), scale.expand(n, 2))
    torch.testing.assert_close(samples.mean(0), loc.detach(), atol=4 * 3.0 / math.sqrt(n), rtol=0)
    torch.testing.assert_close(samples.std(0), scale.detach(), rtol=0.02, atol=0)
    samples.sum().backward()
    torch.testing.assert_close(loc.grad, torch.full((2,), float(n)))  # d(loc + scale * eps) / d loc = 1


@given(
    batch=st.lists(st.integers(1, 4), max_size=2),
    dim=st.integers(1, 4),
    seed=st.integers(0, 2**40),
)
def test_tanh_normal_log_prob_matches_transformed_distribution(batch, dim, seed):
    loc, scale = _params(seed, (*batch, dim), torch.float64)
    loc = loc / 4.0  # keep samples away from +-1, where atanh of a float loses precision
    reference = _tanh_normal_reference(loc, scale)
    value = D.tanh_normal.sample(random.key(seed + 1), loc, scale)
    assert value.shape == loc.shape and (value.abs() <= 1).all()
    assert_close_to_reference(D.tanh_normal.log_prob(loc, scale, value), reference.log_prob(value))
    sampled, log_prob = D.tanh_normal.sample_and_log_prob(random.key(seed + 1), loc, scale)
    torch.testing.assert_close(sampled, value)
    assert_close_to_reference(log_prob, reference.log_prob(value))
    assert torch.equal(D.tanh_normal.mode(loc, scale), torch.tanh(loc))


def test_tanh_normal_float32_matches_reference_and_is_stable_at_saturation():
    loc, scale = _params(3, (64, 2))
    loc = loc / 4.0
    value = D.tanh_normal.sample(KEY, loc, scale)
    reference = _tanh_normal_reference(loc, scale)
    interior = (value.abs() < 0.999).all(-1)  # float32 atanh is ill-conditioned right next to +-1
    assert interior.sum() > 32
    assert_close_to_reference(
        D.tanh_normal.log_prob(loc, scale, value)[interior], reference.log_prob(value)[interior], atol=1e-4
    )
    # A saturated policy: tanh(u) rounds to 1, but the log-prob from the pre-tanh sample is exact.
    far = torch.full((4, 2), 12.0)
    tight = torch.full((4, 2), 0.1)
    actions, log_prob = D.tanh_normal.sample_and_log_prob(KEY, far, tight)
    assert (actions == 1.0).all() and torch.isfinite(log_prob).all()
    u = far.double() + tight.double() * random.normal(KEY, (4, 2)).double()  # the same eps
    exact = td.Independent(td.Normal(far.double(), tight.double()), 1).log_prob(u)
    exact = exact - (2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))).sum(-1)
    torch.testing.assert_close(log_prob.double(), exact, rtol=1e-5, atol=1e-4)


def _entropy_by_dense_integration(loc: float, scale: float) -> float:
    """H of tanh(N(loc, scale^2)) by the trapezoid rule on 400k points (float64)."""
    u = torch.linspace(loc - 14 * scale, loc + 14 * scale, 400_001, dtype=torch.float64)
    density = torch.exp(-0.5 * ((u - loc) / scale) ** 2) / (scale * math.sqrt(2 * math.pi))
    log_det = 2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))
    gaussian_entropy = 0.5 + 0.5 * math.log(2 * math.pi) + math.log(scale)
    return gaussian_entropy + torch.trapezoid(density * log_det, u).item()


def test_tanh_normal_entropy_matches_numerical_integration():
    locs = [0.0, 0.3, -3.0, 10.0]
    scales = [0.01, 0.5, 1.0, 1.01, 2.0, 10.0, 50.0]
    grid = [(m, s) for m in locs for s in scales]
    loc = torch.tensor([[m] for m, _ in grid], dtype=torch.float64)
    scale = torch.tensor([[s] for _, s in grid], dtype=torch.float64)
    ours = D.tanh_normal.entropy(loc, scale)
    exact = torch.tensor([_entropy_by_dense_integration(m, s) for m, s in grid], dtype=torch.float64)
    torch.testing.assert_close(ours, exact, rtol=0, atol=1e-9)
    # Summed over the event dim, in float32 too.
    two = D.tanh_normal.entropy(torch.tensor([[0.3, -3.0]]), torch.tensor([[0.5, 10.0]]))
    expected = _entropy_by_dense_integration(0.3, 0.5) + _entropy_by_dense_integration(-3.0, 10.0)
    assert two.shape == (1,) and abs(two.item() - expected) < 1e-5


def test_tanh_normal_entropy_agrees_with_monte_carlo_and_has_finite_gradients():
    loc = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    scale = torch.tensor([0.3, 1.0, 4.0], dtype=torch.float64, requires_grad=True)
    n = 200_000
    samples = _tanh_normal_reference(loc.detach(), scale.detach()).base_dist.base_dist
    u = samples.loc + samples.scale * random.normal(KEY, (n, 3), torch.float64)
    log_prob = td.Normal(samples.loc, samples.scale).log_prob(u) - 2 * (
        math.log(2) - u - torch.nn.functional.softplus(-2 * u)
    )
    monte_carlo = -log_prob.sum(-1)
    estimate = D.tanh_normal.entropy(loc, scale)
    assert abs(estimate.item() - monte_carlo.mean().item()) < 4 * monte_carlo.std().item() / math.sqrt(n)
    estimate.backward()
    assert torch.isfinite(loc.grad).all() and torch.isfinite(scale.grad).all()
    # Wider Gaussians push more mass into saturation: d H / d scale -> 1/s - 2 sqrt(2/pi) < 0.
    assert scale.grad[2] < 0 < scale.grad[0]


# ---------------------------------------------------------------------------------------------
# deterministic
# ---------------------------------------------------------------------------------------------


def test_deterministic():
    loc = random.normal(KEY, (4, 2))
    assert torch.equal(D.deterministic.sample(KEY, loc), loc)
    assert torch.equal(D.deterministic.mode(loc), loc)
    assert torch.equal(D.deterministic.entropy(loc), torch.zeros(4))
    other = loc.clone()
    other[1, 0] += 1.0
    log_prob = D.deterministic.log_prob(loc, other)
    assert torch.equal(log_prob, torch.tensor([0.0, -math.inf, 0.0, 0.0]))
    value, log_prob = D.deterministic.sample_and_log_prob(KEY, loc)
    assert torch.equal(value, loc) and torch.equal(log_prob, torch.zeros(4))


# ---------------------------------------------------------------------------------------------
# Purity, vmap, compile, errors
# ---------------------------------------------------------------------------------------------

_CASES = {
    "categorical": (D.categorical, lambda: (random.normal(KEY, (5, 4)),)),
    "normal": (D.normal, lambda: _params(2, (5, 3))),
    "tanh_normal": (D.tanh_normal, lambda: _params(2, (5, 3))),
    "deterministic": (D.deterministic, lambda: (random.normal(KEY, (5, 3)),)),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_sampling_is_pure_and_vmaps_over_keys(name):
    dist, make_params = _CASES[name]
    params = make_params()
    torch.manual_seed(0)
    a = dist.sample(KEY, *params)
    torch.manual_seed(1)
    assert torch.equal(a, dist.sample(KEY, *params))
    keys = random.split(KEY, 4)
    batched = torch.func.vmap(lambda k: dist.sample_and_log_prob(k, *params), randomness="error")(keys)
    loop = [dist.sample_and_log_prob(k, *params) for k in keys]
    torch.testing.assert_close(batched[0], torch.stack([v for v, _ in loop]))
    torch.testing.assert_close(batched[1], torch.stack([lp for _, lp in loop]))
    if name != "deterministic":
        assert not torch.equal(batched[0][0], batched[0][1])


@pytest.mark.slow
def test_compiled_log_prob_and_entropy_equal_eager():
    """One graph of the key-free functions (sampling compiles through funrl.random, tested there)."""
    logits = random.normal(KEY, (6, 4))
    loc, scale = _params(5, (6, 2))
    actions = torch.tensor([0, 1, 2, 3, 0, 1])

    def policy_terms(logits, actions, loc, scale, value):
        return (
            D.categorical.log_prob(logits, actions),
            D.categorical.entropy(logits),
            D.tanh_normal.log_prob(loc, scale, value),
            D.tanh_normal.entropy(loc, scale),
        )

    compiled = torch.compile(policy_terms, fullgraph=True)
    for seed in (0, 1):
        value = D.tanh_normal.sample(random.key(seed), loc, scale)
        got = compiled(logits, actions, loc, scale, value)
        want = policy_terms(logits, actions, loc, scale, value)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_errors_name_the_argument():
    logits = torch.zeros(3, 4)
    with pytest.raises(TypeError, match="logits: expected a floating dtype, got torch.int64"):
        D.categorical.entropy(torch.zeros(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"logits: expected shape \[\.\.\., K\], got a scalar"):
        D.categorical.mode(torch.tensor(1.0))
    with pytest.raises(
        TypeError, match="value: expected an integer tensor of class indices, got torch.float32"
    ):
        D.categorical.log_prob(logits, torch.zeros(3))
    with pytest.raises(ValueError, match=r"value, logits: shapes \[2\] and \[3\] do not broadcast"):
        D.categorical.log_prob(logits, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="key: expected dtype torch.int64"):
        D.categorical.sample(torch.zeros(2), logits)
    with pytest.raises(ValueError, match=r"loc, scale: shapes \[3, 2\] and \[3\] do not broadcast"):
        D.normal.sample(KEY, torch.zeros(3, 2), torch.ones(3))
    with pytest.raises(ValueError, match="loc, scale: expected at least one dimension"):
        D.tanh_normal.entropy(torch.tensor(0.0), torch.tensor(1.0))
    with pytest.raises(TypeError, match="scale: expected a floating tensor, got float"):
        D.normal.entropy(torch.zeros(2), 1.0)
    with pytest.raises(TypeError, match="value: expected a floating dtype"):
        D.normal.log_prob(torch.zeros(2), torch.ones(2), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="value: expected at least one dimension"):
        D.tanh_normal.log_prob(torch.zeros(2), torch.ones(2), torch.tensor(0.0))
    with pytest.raises(ValueError, match="loc: expected at least one dimension"):
        D.deterministic.entropy(torch.tensor(0.0))
    with pytest.raises(ValueError, match=r"loc, value: shapes \[2\] and \[3\] do not broadcast"):
        D.deterministic.log_prob(torch.zeros(2), torch.zeros(3))


def test_noise_drawn_apart_gives_the_samples_of_the_key():
    # A rollout draws every step's noise before its loop: the samples must be those of the key.
    key = random.key(4)
    logits = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    noise = D.categorical.noise(key, logits.shape)
    assert torch.equal(D.categorical.sample_from_noise(noise, logits), random.categorical(key, logits))
    value, log_prob = D.categorical.sample_and_log_prob_from_noise(noise, logits)
    assert torch.equal(value, D.categorical.sample(key, logits))
    assert torch.equal(log_prob, D.categorical.log_prob(logits, value))
    loc, scale = torch.randn(5, 2), torch.full((2,), 0.5)
    eps = D.normal.noise(key, (5, 2))
    assert torch.equal(eps, random.normal(key, (5, 2)))
    drawn = D.normal.sample_and_log_prob_from_noise(eps, loc, scale)
    assert all(torch.equal(a, b) for a, b in zip(drawn, D.normal.sample_and_log_prob(key, loc, scale), strict=True))
    assert torch.equal(D.normal.sample_from_noise(eps, loc, scale), drawn[0])
    squashed = D.tanh_normal.sample_and_log_prob_from_noise(D.tanh_normal.noise(key, (5, 2)), loc, scale)
    from_key = D.tanh_normal.sample_and_log_prob(key, loc, scale)
    assert all(torch.equal(a, b) for a, b in zip(squashed, from_key, strict=True))
    assert torch.equal(squashed[0], D.tanh_normal.sample(key, loc, scale))
