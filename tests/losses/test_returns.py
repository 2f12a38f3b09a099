"""Value estimators: funrl.testing's invariant batteries, further invariants (hypothesis),
reference loops written from the papers, transforms, bad input.

The reference functions below are written from the equations as per-step loops or explicit sums,
independently of funrl's scan-based recurrences.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl.control import compile as funrl_compile
from funrl.losses import (
    discounted_returns,
    gae,
    lambda_returns,
    n_step_returns,
    retrace,
    td_error,
    vtrace,
)
from funrl.testing import (
    advantage_estimator_invariants,
    assert_pure,
    assert_trees_close,
    assert_vmap_equals_loop,
    td_target_invariants,
)

DTYPE = torch.float64


# ------------------------------------------------------------------------------------------
# Data and references
# ------------------------------------------------------------------------------------------


def make_batch(seed: int, length: int, envs: int, p_term: float = 0.1, p_trunc: float = 0.1) -> dict:
    g = torch.Generator().manual_seed(seed)
    shape = (length, envs)
    terminated = torch.rand(shape, generator=g) < p_term
    truncated = (torch.rand(shape, generator=g) < p_trunc) & ~terminated
    return {
        "rewards": torch.randn(shape, generator=g, dtype=DTYPE),
        "values": torch.randn(shape, generator=g, dtype=DTYPE),
        "next_values": torch.randn(shape, generator=g, dtype=DTYPE),
        "terminated": terminated,
        "truncated": truncated,
        "log_rhos": 0.5 * torch.randn(shape, generator=g, dtype=DTYPE),
    }


def inv(flag: torch.Tensor) -> torch.Tensor:
    """``1 - flag`` in the test dtype (``gamma * ~flag`` alone would compute in float32)."""
    return (~flag).to(DTYPE)


def consistent_next_values(
    values: torch.Tensor, next_values: torch.Tensor, done: torch.Tensor
) -> torch.Tensor:
    """``next_values[t] = values[t + 1]`` inside an episode, as a rollout without resets gives."""
    out = next_values.clone()
    out[:-1] = torch.where(done[:-1], next_values[:-1], values[1:])
    return out


def ref_gae(r, v, nv, term, trunc, gamma, lmbda):
    adv = torch.zeros_like(r)
    running = torch.zeros_like(r[0])
    for t in reversed(range(r.shape[0])):
        delta = r[t] + gamma * inv(term[t]) * nv[t] - v[t]
        running = delta + gamma * lmbda * inv(term[t] | trunc[t]) * running
        adv[t] = running
    return adv


def ref_lambda_returns(r, nv, term, trunc, gamma, lmbda):
    out = torch.zeros_like(r)
    length = r.shape[0]
    for t in reversed(range(length)):
        cut = (term[t] | trunc[t]) | (t == length - 1)
        later = (
            nv[t] if t == length - 1 else torch.where(cut, nv[t], (1 - lmbda) * nv[t] + lmbda * out[t + 1])
        )
        out[t] = r[t] + gamma * inv(term[t]) * later
    return out


def ref_monte_carlo(r, nv, term, trunc, gamma):
    """G_t = sum_k gamma^k r_{t+k} until the episode ends, + bootstrap if it did not terminate."""
    length = r.shape[0]
    out = torch.zeros_like(r)
    for t in range(length):
        for env in range(r.shape[1]):
            total, discount = 0.0, 1.0
            for k in range(t, length):
                total += discount * r[k, env]
                discount *= gamma
                if term[k, env]:
                    break
                if trunc[k, env] or k == length - 1:
                    total += discount * nv[k, env]
                    break
            out[t, env] = total
    return out


def ref_n_step(r, nv, term, trunc, gamma, n):
    length = r.shape[0]
    out = torch.zeros_like(r)
    for t in range(length):
        for env in range(r.shape[1]):
            total, discount = 0.0, 1.0
            for k in range(t, min(t + n, length)):
                total += discount * r[k, env]
                discount *= gamma
                if term[k, env]:
                    break
                if trunc[k, env] or k == length - 1 or k == t + n - 1:
                    total += discount * nv[k, env]
                    break
            out[t, env] = total
    return out


def ref_vtrace(r, v, nv, term, trunc, log_rhos, gamma, lmbda, rho_bar, c_bar, pg_rho_bar):
    """IMPALA eq. (1) as a sum: v_s = V(x_s) + sum_t gamma^{t-s} (prod c_i) rho_t delta_t."""
    length, envs = r.shape
    rhos = log_rhos.exp()
    vs = torch.zeros_like(r)
    pg = torch.zeros_like(r)
    for env in range(envs):
        for s in range(length):
            total, weight = 0.0, 1.0
            for t in range(s, length):
                delta = r[t, env] + gamma * inv(term[t, env]) * nv[t, env] - v[t, env]
                total += weight * min(rhos[t, env], rho_bar) * delta
                if term[t, env] or trunc[t, env]:
                    break
                weight *= gamma * lmbda * min(rhos[t, env], c_bar)
            vs[s, env] = v[s, env] + total
    for env in range(envs):
        for s in range(length):
            cut = term[s, env] or trunc[s, env] or s == length - 1
            nxt = nv[s, env] if cut else vs[s + 1, env]
            q = r[s, env] + gamma * inv(term[s, env]) * nxt
            pg[s, env] = min(rhos[s, env], pg_rho_bar) * (q - v[s, env])
    return vs, pg


def ref_retrace(r, q, next_eq, term, trunc, log_rhos, gamma, lmbda):
    """Munos et al. (2016) eq. 3 written as a per-step backward loop."""
    length = r.shape[0]
    c = lmbda * log_rhos.exp().clamp(max=1.0)
    out = torch.zeros_like(r)
    for t in reversed(range(length)):
        target = r[t] + gamma * inv(term[t]) * next_eq[t]
        if t < length - 1:
            keep = inv(term[t] | trunc[t])
            target = target + gamma * keep * c[t + 1] * (out[t + 1] - q[t + 1])
        out[t] = target
    return out


batches = st.tuples(st.integers(0, 2**16), st.integers(1, 24), st.integers(1, 4))
rates = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])


# ------------------------------------------------------------------------------------------
# The batteries (funrl.testing): every estimator shaped like gae, and n-step returns as targets
# ------------------------------------------------------------------------------------------

BATTERY_EXAMPLES = 10  # hypothesis cases per invariant; each battery call stays within seconds


def lambda_return_advantages(rewards, values, next_values, terminated, truncated, gamma, lmbda):
    returns = lambda_returns(rewards, next_values, terminated, truncated, gamma, lmbda)
    return returns - values, returns


def on_policy_vtrace_advantages(rewards, values, next_values, terminated, truncated, gamma, lmbda):
    # On-policy (log ρ = 0) V-trace targets are TD(λ) returns (Espeholt et al. 2018, §4.1).
    vs, _ = vtrace(
        rewards, values, next_values, terminated, truncated, torch.zeros_like(rewards), gamma, lmbda
    )
    return vs - values, vs


@pytest.mark.parametrize("estimator", [gae, lambda_return_advantages, on_policy_vtrace_advantages])
def test_advantage_estimators_pass_the_advantage_battery(estimator):
    advantage_estimator_invariants(estimator, max_examples=BATTERY_EXAMPLES)


def n_step_returns_of_greedy_values(rewards, next_q_values, terminated, truncated, gamma, n):
    return n_step_returns(rewards, next_q_values.max(dim=-1).values, terminated, truncated, gamma, n)


def test_n_step_returns_pass_the_td_target_battery():
    td_target_invariants(n_step_returns_of_greedy_values, max_examples=BATTERY_EXAMPLES)


# ------------------------------------------------------------------------------------------
# GAE
# ------------------------------------------------------------------------------------------


@given(batches, rates, rates)
def test_gae_matches_reference_loop(batch, gamma, lmbda):
    d = make_batch(*batch)
    adv, ret = gae(d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda)
    expected = ref_gae(
        d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda
    )
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + d["values"])


@given(batches, rates)
def test_td_error_matches_its_equation(batch, gamma):
    d = make_batch(*batch)
    delta = td_error(d["rewards"], d["values"], d["next_values"], d["terminated"], gamma)
    torch.testing.assert_close(
        delta, d["rewards"] + gamma * inv(d["terminated"]) * d["next_values"] - d["values"]
    )


@given(batches, rates, rates)
def test_td_lambda_returns_minus_values_equal_gae(batch, gamma, lmbda):
    d = make_batch(*batch)
    nv = consistent_next_values(d["values"], d["next_values"], d["terminated"] | d["truncated"])
    adv, _ = gae(d["rewards"], d["values"], nv, d["terminated"], d["truncated"], gamma, lmbda)
    ret = lambda_returns(d["rewards"], nv, d["terminated"], d["truncated"], gamma, lmbda)
    torch.testing.assert_close(ret - d["values"], adv)


def test_gae_truncation_bootstraps_from_next_values_and_cuts_the_trace():
    rewards = torch.zeros(4, 1, dtype=DTYPE)
    values = torch.zeros(4, 1, dtype=DTYPE)
    next_values = torch.tensor([[0.0], [5.0], [0.0], [0.0]], dtype=DTYPE)
    truncated = torch.tensor([[False], [True], [False], [False]])
    terminated = torch.zeros_like(truncated)
    adv, _ = gae(rewards, values, next_values, terminated, truncated, 0.5, 1.0)
    # Steps 0-1 see the bootstrapped 5 (discounted); steps 2-3 belong to the next episode.
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.25, 2.5, 0.0, 0.0], dtype=DTYPE))
    adv_term, _ = gae(rewards, values, next_values, truncated, terminated, 0.5, 1.0)
    torch.testing.assert_close(adv_term[:, 0], torch.zeros(4, dtype=DTYPE))


def estimates(d: dict, gamma: float, lmbda: float) -> dict[str, torch.Tensor]:
    """Every estimator's output on one batch (Retrace reads ``values`` as Q(s, a))."""
    flags = (d["terminated"], d["truncated"])
    adv, ret = gae(d["rewards"], d["values"], d["next_values"], *flags, gamma, lmbda)
    vs, pg = vtrace(d["rewards"], d["values"], d["next_values"], *flags, d["log_rhos"], gamma, lmbda)
    return {
        "gae_advantages": adv,
        "gae_returns": ret,
        "lambda_returns": lambda_returns(d["rewards"], d["next_values"], *flags, gamma, lmbda),
        "discounted_returns": discounted_returns(d["rewards"], d["next_values"], *flags, gamma),
        "n_step_returns": n_step_returns(d["rewards"], d["next_values"], *flags, gamma, 3),
        "vtrace_vs": vs,
        "vtrace_pg_advantages": pg,
        "retrace": retrace(d["rewards"], d["values"], d["next_values"], *flags, d["log_rhos"], gamma, lmbda),
    }


def with_episode_end(d: dict, step: int, flag: str) -> dict:
    """``d`` with the episode ending at ``step`` by ``flag`` (``"terminated"`` or ``"truncated"``)."""
    d = {k: v.clone() for k, v in d.items()}
    other = "truncated" if flag == "terminated" else "terminated"
    d[flag][step], d[other][step] = True, False
    return d


def with_other_future(d: dict, step: int, seed: int) -> dict:
    """``d`` with every input after ``step`` (flags too) replaced by other numbers."""
    other = make_batch(seed, *d["rewards"].shape)
    return {k: torch.cat([v[: step + 1], other[k][step + 1 :]]) for k, v in d.items()}


@given(batches, rates, rates, st.sampled_from(["terminated", "truncated"]), st.data())
def test_nothing_flows_back_across_an_episode_end(batch, gamma, lmbda, flag, data):
    # done = terminated | truncated cuts every trace: what comes after step k cannot reach k or
    # earlier. After a termination V(s'_k) is not read either.
    d = make_batch(*batch)
    step = data.draw(st.integers(0, d["rewards"].shape[0] - 1))
    d = with_episode_end(d, step, flag)
    changed = with_other_future(d, step, batch[0] + 1)
    if flag == "terminated":
        changed["next_values"][step] += 100.0
    before, after = estimates(d, gamma, lmbda), estimates(changed, gamma, lmbda)
    for name in before:
        torch.testing.assert_close(after[name][: step + 1], before[name][: step + 1], msg=name)


@given(batches, rates, rates, st.data())
def test_a_truncated_step_bootstraps_from_next_values(batch, gamma, lmbda, data):
    d = make_batch(*batch)
    step = data.draw(st.integers(0, d["rewards"].shape[0] - 1))
    d = with_episode_end(d, step, "truncated")
    bumped = {k: v.clone() for k, v in d.items()}
    bumped["next_values"][step] += 1.0
    before, after = estimates(d, gamma, lmbda), estimates(bumped, gamma, lmbda)
    # V(s'_k) enters step k's target once, discounted by γ (and nothing later flows into k).
    for name in ("gae_advantages", "lambda_returns", "discounted_returns", "n_step_returns", "retrace"):
        difference = after[name][step] - before[name][step]
        torch.testing.assert_close(difference, torch.full_like(difference, gamma), msg=name)


@given(batches, rates, rates, st.floats(-3.0, 3.0))
def test_gae_and_lambda_returns_are_linear_in_rewards_and_values(batch, gamma, lmbda, scale):
    d, e = make_batch(*batch), make_batch(batch[0] + 1, *batch[1:])
    flags = (d["terminated"], d["truncated"])

    def advantages(source):
        return gae(source["rewards"], source["values"], source["next_values"], *flags, gamma, lmbda)[0]

    def returns(source):
        return lambda_returns(source["rewards"], source["next_values"], *flags, gamma, lmbda)

    mixed = {k: scale * d[k] + e[k] for k in ("rewards", "values", "next_values")}
    for estimator in (advantages, returns):
        torch.testing.assert_close(estimator(mixed), scale * estimator(d) + estimator(e))


@given(batches, rates, rates, st.sampled_from(["float", "scalar_tensor", "per_env", "per_step"]))
def test_gae_gamma_as_float_or_tensor_matches_reference_loop(batch, gamma, lmbda, gamma_kind):
    d = make_batch(*batch)
    length, envs = d["rewards"].shape
    gammas = {
        "float": gamma,
        "scalar_tensor": torch.tensor(gamma, dtype=DTYPE),
        "per_env": torch.full((envs,), gamma, dtype=DTYPE),
        "per_step": torch.full((length, 1), gamma, dtype=DTYPE),
    }
    flags = (d["terminated"], d["truncated"])
    adv, ret = gae(d["rewards"], d["values"], d["next_values"], *flags, gammas[gamma_kind], lmbda)
    expected = ref_gae(d["rewards"], d["values"], d["next_values"], *flags, gamma, lmbda)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + d["values"])


# ------------------------------------------------------------------------------------------
# Other estimators
# ------------------------------------------------------------------------------------------


@given(batches, rates, rates)
def test_lambda_returns_match_reference_loop(batch, gamma, lmbda):
    d = make_batch(*batch)
    got = lambda_returns(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda)
    expected = ref_lambda_returns(
        d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda
    )
    torch.testing.assert_close(got, expected)


@given(batches, rates)
def test_discounted_returns_are_monte_carlo_returns(batch, gamma):
    d = make_batch(*batch)
    got = discounted_returns(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma)
    expected = ref_monte_carlo(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma)
    torch.testing.assert_close(got, expected)


@given(batches, rates, st.integers(1, 6))
def test_n_step_returns_match_reference(batch, gamma, n):
    d = make_batch(*batch)
    got = n_step_returns(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, n)
    expected = ref_n_step(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, n)
    torch.testing.assert_close(got, expected)


@given(batches, rates, st.integers(0, 5))
def test_n_step_with_n_at_least_T_is_monte_carlo_return(batch, gamma, extra):
    d = make_batch(*batch)
    length = d["rewards"].shape[0]
    got = n_step_returns(
        d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma, length + extra
    )
    expected = ref_monte_carlo(d["rewards"], d["next_values"], d["terminated"], d["truncated"], gamma)
    torch.testing.assert_close(got, expected)


@given(batches, rates, rates, st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.5, 1.0, 3.0]))
def test_vtrace_matches_reference(batch, gamma, lmbda, rho_bar, c_bar):
    d = make_batch(*batch)
    args = (d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], d["log_rhos"])
    vs, pg = vtrace(*args, gamma, lmbda, rho_bar, c_bar, rho_bar)
    ref_vs, ref_pg = ref_vtrace(*args, gamma, lmbda, rho_bar, c_bar, rho_bar)
    torch.testing.assert_close(vs, ref_vs)
    torch.testing.assert_close(pg, ref_pg)


@given(batches, rates)
def test_vtrace_on_policy_equals_td_lambda_one_returns(batch, gamma):
    d = make_batch(*batch)
    nv = consistent_next_values(d["values"], d["next_values"], d["terminated"] | d["truncated"])
    zeros = torch.zeros_like(d["rewards"])
    vs, pg = vtrace(d["rewards"], d["values"], nv, d["terminated"], d["truncated"], zeros, gamma)
    td1 = lambda_returns(d["rewards"], nv, d["terminated"], d["truncated"], gamma, 1.0)
    torch.testing.assert_close(vs, td1)
    # On-policy pg advantages are the one-step-lookahead advantages r + γ v_{t+1} - V.
    expected_pg = d["rewards"] + gamma * inv(d["terminated"]) * torch.cat([vs[1:], nv[-1:]]) - d["values"]
    cut = d["terminated"] | d["truncated"]
    expected_pg = torch.where(
        cut, d["rewards"] + gamma * inv(d["terminated"]) * nv - d["values"], expected_pg
    )
    torch.testing.assert_close(pg, expected_pg)


@given(batches, rates, rates)
def test_retrace_matches_reference(batch, gamma, lmbda):
    d = make_batch(*batch)
    q = d["values"]
    next_eq = d["next_values"]
    got = retrace(d["rewards"], q, next_eq, d["terminated"], d["truncated"], d["log_rhos"], gamma, lmbda)
    expected = ref_retrace(
        d["rewards"], q, next_eq, d["terminated"], d["truncated"], d["log_rhos"], gamma, lmbda
    )
    torch.testing.assert_close(got, expected)


@given(batches, rates)
def test_retrace_with_zero_traces_is_expected_sarsa_target(batch, gamma):
    d = make_batch(*batch)
    never = torch.full_like(d["rewards"], -float("inf"))  # π(a|s) = 0: every trace is cut
    got = retrace(d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], never, gamma)
    torch.testing.assert_close(got, d["rewards"] + gamma * inv(d["terminated"]) * d["next_values"])


# ------------------------------------------------------------------------------------------
# Purity and transforms
# ------------------------------------------------------------------------------------------


def test_gae_is_pure_and_leaves_inputs_untouched():
    d = make_batch(3, 16, 4)
    assert_pure(gae, d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], 0.99, 0.95)


def test_vmap_over_gamma_and_lambda_equals_loop():
    d = make_batch(7, 12, 3)
    gammas = torch.tensor([0.0, 0.9, 0.99, 1.0], dtype=DTYPE)
    lmbdas = torch.tensor([0.95, 0.5, 1.0, 0.0], dtype=DTYPE)

    def advantages(gamma, lmbda):
        return gae(
            d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], gamma, lmbda
        )[0]

    assert_vmap_equals_loop(advantages, 0, gammas, lmbdas)


@pytest.mark.parametrize("name", ["gae", "lambda_returns", "n_step_returns", "vtrace", "retrace"])
def test_vmap_over_leading_batch_equals_loop(name):
    runs = [make_batch(seed, 10, 3) for seed in range(4)]
    stacked = {k: torch.stack([r[k] for r in runs]) for k in runs[0]}

    def estimator(rewards, values, next_values, terminated, truncated, log_rhos):
        if name == "gae":
            return gae(rewards, values, next_values, terminated, truncated, 0.9, 0.8)[0]
        if name == "lambda_returns":
            return lambda_returns(rewards, next_values, terminated, truncated, 0.9, 0.8)
        if name == "n_step_returns":
            return n_step_returns(rewards, next_values, terminated, truncated, 0.9, 3)
        if name == "vtrace":
            return vtrace(rewards, values, next_values, terminated, truncated, log_rhos, 0.9, 0.8)[1]
        return retrace(rewards, values, next_values, terminated, truncated, log_rhos, 0.9, 0.8)

    keys = ["rewards", "values", "next_values", "terminated", "truncated", "log_rhos"]
    assert_vmap_equals_loop(estimator, 0, *[stacked[k] for k in keys])


def test_tensor_gamma_per_environment_equals_separate_calls():
    d = make_batch(11, 9, 3)
    gamma = torch.tensor([0.5, 0.9, 1.0], dtype=DTYPE)
    adv, _ = gae(d["rewards"], d["values"], d["next_values"], d["terminated"], d["truncated"], gamma, 0.9)
    for env in range(3):
        column = {k: v[:, env : env + 1] for k, v in d.items()}
        single, _ = gae(
            column["rewards"],
            column["values"],
            column["next_values"],
            column["terminated"],
            column["truncated"],
            float(gamma[env]),
            0.9,
        )
        torch.testing.assert_close(adv[:, env : env + 1], single)


def test_gradients_flow_and_are_finite():
    d = make_batch(5, 20, 2)
    values = d["values"].clone().requires_grad_(True)
    next_values = d["next_values"].clone().requires_grad_(True)
    adv, ret = gae(d["rewards"], values, next_values, d["terminated"], d["truncated"], 0.99, 0.95)
    (adv.sum() + ret.square().sum()).backward()
    assert torch.isfinite(values.grad).all() and torch.isfinite(next_values.grad).all()
    assert next_values.grad.abs().sum() > 0


@pytest.mark.slow
def test_compiled_gae_equals_eager():
    # Compiled, the recurrence runs as torch's scan loop op; eagerly as a Python loop.
    d = make_batch(13, 9, 4)
    d32 = {k: (v.float() if v.dtype == DTYPE else v) for k, v in d.items()}
    args = (d32["rewards"], d32["values"], d32["next_values"], d32["terminated"], d32["truncated"])
    gamma, lmbda = torch.tensor(0.99), torch.tensor(0.95)
    got = funrl_compile(gae, dynamic=False)(*args, gamma, lmbda)
    assert_trees_close(got, gae(*args, gamma, lmbda), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


def _gae_args(**overrides):
    d = make_batch(0, 5, 2)
    args = {k: d[k] for k in ["rewards", "values", "next_values", "terminated", "truncated"]}
    args.update(gamma=0.99, lmbda=0.95)
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"values": torch.zeros(4, 2, dtype=DTYPE)}, "values: expected shape \\(5, 2\\)"),
        ({"next_values": torch.zeros(5, 3, dtype=DTYPE)}, "next_values: expected shape"),
        ({"terminated": torch.zeros(5, 2)}, "terminated: expected a torch.bool tensor"),
        ({"truncated": torch.zeros(5, 2, dtype=torch.int64)}, "truncated: expected a torch.bool"),
        ({"rewards": torch.zeros(5, 2, dtype=torch.bool)}, "rewards: expected a floating-point"),
        ({"gamma": 1.5}, "gamma: expected a value in \\[0, 1\\]"),
        ({"gamma": -0.1}, "gamma: expected a value in \\[0, 1\\]"),
        ({"lmbda": 1.01}, "lmbda: expected a value in \\[0, 1\\]"),
        (
            {"gamma": torch.tensor([0.9, 0.9, 0.9])},
            "gamma: expected a Python number or a tensor broadcastable",
        ),
        ({"gamma": torch.tensor(1)}, "gamma: expected a floating-point tensor"),
        ({"gamma": True}, "gamma: expected a float"),
        ({"rewards": torch.zeros(5, 2, dtype=DTYPE).numpy()}, "rewards: expected a torch.Tensor"),
    ],
)
def test_gae_bad_input_raises_value_error_naming_the_argument(overrides, match):
    with pytest.raises(ValueError, match=match):
        gae(**_gae_args(**overrides))


def test_estimators_bad_input():
    d = make_batch(0, 5, 2)
    with pytest.raises(ValueError, match="n: expected an int >= 1"):
        n_step_returns(d["rewards"], d["next_values"], d["terminated"], d["truncated"], 0.9, 0)
    with pytest.raises(ValueError, match="rewards: expected at least 1 dimension"):
        td_error(torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0), torch.tensor(True), 0.9)
    with pytest.raises(ValueError, match="rewards: expected at least one time step"):
        empty = torch.zeros(0, 2)
        lambda_returns(empty, empty, empty.bool(), empty.bool(), 0.9, 0.9)
    with pytest.raises(ValueError, match="log_rhos: expected shape"):
        vtrace(
            *[d[k] for k in ["rewards", "values", "next_values", "terminated", "truncated"]],
            d["log_rhos"][:3],
            0.9,
        )
    with pytest.raises(ValueError, match="clip_c_threshold: expected a value >= 0"):
        args = [d[k] for k in ["rewards", "values", "next_values", "terminated", "truncated", "log_rhos"]]
        vtrace(*args, 0.9, clip_c_threshold=-1.0)
    with pytest.raises(ValueError, match="lmbda: expected a value in"):
        args = [d[k] for k in ["rewards", "values", "next_values", "terminated", "truncated", "log_rhos"]]
        retrace(*args, 0.9, 2.0)


# ------------------------------------------------------------------------------------------
# The shared checks (funrl.losses._checks): each accepts good input and names the argument
# ------------------------------------------------------------------------------------------


def test_shared_checks_accept_good_and_reject_bad_input_by_name():
    from funrl.losses import _checks as c

    x = torch.zeros(3, 2)
    good = [
        lambda: c.check_tensor("x", x),
        lambda: c.check_floating("x", x),
        lambda: c.check_bool("flag", x.bool()),
        lambda: c.check_integer("actions", x.long()),
        lambda: c.check_same_shape("x", x, y=x.clone()),
        lambda: c.check_min_dim("x", x, 2),
        lambda: c.check_shape("x", x, (3, 2)),
        lambda: c.check_unit_interval("gamma", 0.0),
        lambda: c.check_unit_interval("gamma", torch.tensor(5.0)),  # tensor values are not read
        lambda: c.check_nonnegative("tau", 0.0),
        lambda: c.check_positive("eps", 1e-9),
        lambda: c.check_scalar_or_broadcastable("gamma", torch.ones(2), "x", x),
        lambda: c.check_scalar_or_broadcastable("gamma", 0.5, "x", x),
        lambda: c.check_weight("alpha", 0.0, "x", x),
        lambda: c.check_weight("alpha", torch.ones(2), "x", x),
        lambda: c.check_ensemble("q_values", torch.zeros(4, 3, 2), "x", x),
        lambda: c.check_choice("kind", "a", ("a", "b")),
    ]
    for call in good:
        call()
    bad = [
        (lambda: c.check_tensor("x", [1.0]), "x: expected a torch.Tensor, got list"),
        (
            lambda: c.check_floating("x", x.long()),
            "x: expected a floating-point tensor, got dtype torch.int64",
        ),
        (lambda: c.check_bool("flag", x), "flag: expected a torch.bool tensor"),
        (lambda: c.check_integer("actions", x.bool()), "actions: expected an integer tensor"),
        (lambda: c.check_same_shape("x", x, y=x.T), "y: expected shape \\(3, 2\\) \\(the shape of x\\)"),
        (lambda: c.check_min_dim("x", x[0, 0], 1), "x: expected at least 1 dimension"),
        (lambda: c.check_shape("x", x, (2, 3)), "x: expected shape \\(2, 3\\), got \\(3, 2\\)"),
        (lambda: c.check_unit_interval("gamma", 1.0001), "gamma: expected a value in \\[0, 1\\]"),
        (lambda: c.check_unit_interval("gamma", float("nan")), "gamma: expected a value in \\[0, 1\\]"),
        (lambda: c.check_unit_interval("gamma", "0.9"), "gamma: expected a float"),
        (lambda: c.check_nonnegative("tau", -1e-9), "tau: expected a value >= 0"),
        (lambda: c.check_positive("eps", 0), "eps: expected a value > 0"),
        (lambda: c.check_scalar_or_broadcastable("gamma", torch.ones(3), "x", x), "gamma: expected a Python"),
        (lambda: c.check_scalar_or_broadcastable("gamma", torch.ones(4, 3, 2), "x", x), "gamma: expected"),
        (lambda: c.check_weight("alpha", -0.5, "x", x), "alpha: expected a value >= 0"),
        (lambda: c.check_weight("alpha", torch.ones(3), "x", x), "alpha: expected a Python number"),
        (
            lambda: c.check_ensemble("q_values", torch.zeros(3, 2), "x", x),
            "q_values: expected shape \\[E, 3, 2\\] \\(an ensemble over the shape of x\\), got \\(3, 2\\)",
        ),
        (lambda: c.check_choice("kind", "c", ("a", "b")), "kind: expected one of \\('a', 'b'\\), got 'c'"),
    ]
    for call, match in bad:
        with pytest.raises(ValueError, match=match):
            call()
