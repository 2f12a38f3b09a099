"""DPO and GRPO on per-token log-probs and masks: invariants and references from the papers."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from funrl.losses import sequence as S
from funrl.testing import assert_vmap_equals_loop

seeds = st.integers(0, 2**16)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mask(g: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Right-padded response masks with at least one token per row."""
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    return (torch.arange(length) < lengths.unsqueeze(-1)).double()


def _log_probs(g: torch.Generator, batch: int, length: int) -> torch.Tensor:
    return -torch.rand(batch, length, generator=g, dtype=torch.float64) * 3.0


def _dpo_inputs(seed: int, batch: int = 4, len_w: int = 5, len_l: int = 7) -> dict:
    g = _gen(seed)
    return {
        "policy_chosen": _log_probs(g, batch, len_w),
        "policy_rejected": _log_probs(g, batch, len_l),
        "reference_chosen": _log_probs(g, batch, len_w),
        "reference_rejected": _log_probs(g, batch, len_l),
        "chosen_mask": _mask(g, batch, len_w),
        "rejected_mask": _mask(g, batch, len_l),
    }


# ----------------------------------------------------------------------------------------------
# DPO.


@given(seed=seeds, beta=st.floats(0.0, 2.0))
def test_dpo_loss_is_log_two_when_policy_equals_reference(seed, beta):
    d = _dpo_inputs(seed)
    d["reference_chosen"], d["reference_rejected"] = d["policy_chosen"].clone(), d["policy_rejected"].clone()
    loss, metrics = S.dpo_loss(**d, beta=beta)
    assert loss.item() == pytest.approx(math.log(2.0), rel=1e-12)
    assert metrics["reward_margin"].item() == 0.0


@given(seed=seeds, beta=st.floats(0.01, 2.0), smoothing=st.floats(0.0, 0.49))
def test_dpo_loss_matches_reference_formula(seed, beta, smoothing):
    d = _dpo_inputs(seed)
    loss, metrics = S.dpo_loss(**d, beta=beta, label_smoothing=smoothing)
    total = 0.0
    for b in range(4):
        seq = lambda name, mask, b=b: sum(  # noqa: E731
            x * m for x, m in zip(d[name][b].tolist(), d[mask][b].tolist(), strict=True)
        )
        h = beta * (
            (seq("policy_chosen", "chosen_mask") - seq("reference_chosen", "chosen_mask"))
            - (seq("policy_rejected", "rejected_mask") - seq("reference_rejected", "rejected_mask"))
        )
        log_sig = lambda x: -math.log1p(math.exp(-x)) if x > 0 else x - math.log1p(math.exp(x))  # noqa: E731
        total += -(1 - smoothing) * log_sig(h) - smoothing * log_sig(-h)
    assert loss.item() == pytest.approx(total / 4, rel=1e-9, abs=1e-12)
    assert 0.0 <= metrics["reward_accuracy"].item() <= 1.0


def test_dpo_gradient_raises_chosen_and_lowers_rejected_and_ignores_padding():
    d = _dpo_inputs(1)
    chosen = d["policy_chosen"].clone().requires_grad_(True)
    rejected = d["policy_rejected"].clone().requires_grad_(True)
    loss, _ = S.dpo_loss(**{**d, "policy_chosen": chosen, "policy_rejected": rejected}, beta=0.5)
    g_chosen, g_rejected = torch.autograd.grad(loss, (chosen, rejected))
    assert (g_chosen[d["chosen_mask"] > 0] < 0).all() and (g_rejected[d["rejected_mask"] > 0] > 0).all()
    assert (g_chosen[d["chosen_mask"] == 0] == 0).all() and (g_rejected[d["rejected_mask"] == 0] == 0).all()


@given(seed=seeds)
def test_dpo_batch_order_invariance_and_vmap_equals_loop(seed):
    d = _dpo_inputs(seed)
    perm = torch.randperm(4, generator=_gen(seed + 1))
    loss, _ = S.dpo_loss(**d)
    torch.testing.assert_close(
        loss, S.dpo_loss(**{k: v[perm] for k, v in d.items()})[0], rtol=1e-12, atol=1e-12
    )
    many = [_dpo_inputs(seed + i) for i in range(3)]
    stacked = {k: torch.stack([m[k] for m in many]) for k in d}
    assert_vmap_equals_loop(lambda x: S.dpo_loss(**x), 0, stacked, rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------------------------
# GRPO.


@given(seed=seeds, groups=st.integers(1, 6), size=st.integers(2, 9), normalize=st.booleans())
def test_grpo_advantages_have_zero_mean_per_group(seed, groups, size, normalize):
    rewards = torch.randn(groups, size, generator=_gen(seed), dtype=torch.float64) * 5 + 3
    adv = S.group_relative_advantages(rewards, normalize_std=normalize)
    torch.testing.assert_close(adv.mean(dim=1), torch.zeros(groups, dtype=torch.float64), rtol=0, atol=1e-12)
    if normalize:
        expected_std = rewards.std(dim=1) / (rewards.std(dim=1) + 1e-4)
        torch.testing.assert_close(adv.std(dim=1), expected_std, rtol=1e-9, atol=1e-12)
    else:
        torch.testing.assert_close(adv, rewards - rewards.mean(1, keepdim=True))


def test_grpo_advantages_of_a_constant_group_are_zero():
    adv = S.group_relative_advantages(torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]))
    assert (adv[0] == 0).all() and adv[1, 0] < 0 < adv[1, 2]


@given(seed=seeds, aggregation=st.sampled_from(S.AGGREGATIONS))
def test_grpo_loss_at_ratio_one_with_reference_equal_policy_is_minus_mean_advantage(seed, aggregation):
    g = _gen(seed)
    lp, mask = _log_probs(g, 6, 8), _mask(g, 6, 8)
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    loss, metrics = S.grpo_loss(lp, lp.clone(), lp.clone(), adv, mask, aggregation=aggregation)
    if aggregation == "sequence_mean":
        expected = -adv.mean()
    else:  # every token of response b carries A_b: a token-weighted mean
        expected = -(adv * mask.sum(1)).sum() / mask.sum()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    assert metrics["kl"].item() == 0.0 and metrics["clip_fraction"].item() == 0.0


@given(seed=seeds, clip_eps=st.floats(0.05, 0.5), kl_coef=st.floats(0.0, 0.5))
def test_grpo_loss_matches_per_token_reference(seed, clip_eps, kl_coef):
    g = _gen(seed)
    lp, old, ref = _log_probs(g, 4, 6), _log_probs(g, 4, 6), _log_probs(g, 4, 6)
    mask, adv = _mask(g, 4, 6), torch.randn(4, generator=g, dtype=torch.float64)
    loss, _ = S.grpo_loss(lp, old, ref, adv, mask, clip_eps, kl_coef)
    total = 0.0
    for b in range(4):
        per_seq, count = 0.0, 0
        for t in range(6):
            if mask[b, t] == 0:
                continue
            rho = math.exp(lp[b, t].item() - old[b, t].item())
            a = adv[b].item()
            surrogate = min(rho * a, min(max(rho, 1 - clip_eps), 1 + clip_eps) * a)
            r = ref[b, t].item() - lp[b, t].item()
            per_seq += -(surrogate - kl_coef * (math.exp(r) - r - 1))
            count += 1
        total += per_seq / count
    assert loss.item() == pytest.approx(total / 4, rel=1e-9, abs=1e-12)


def test_grpo_gradient_is_zero_for_tokens_clipped_on_the_pessimistic_side():
    lp = torch.log(torch.tensor([[0.5, 0.5, 0.5]], dtype=torch.float64)).requires_grad_(True)
    old = torch.log(torch.tensor([[0.25, 0.5, 0.5]], dtype=torch.float64))  # ratio 2 on token 0, 1 elsewhere
    mask = torch.ones(1, 3, dtype=torch.float64)
    loss, metrics = S.grpo_loss(
        lp, old, lp.detach(), torch.tensor([1.0], dtype=torch.float64), mask, 0.2, 0.0
    )
    (grad,) = torch.autograd.grad(loss, (lp,))
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() < 0.0
    assert metrics["clip_fraction"].item() == pytest.approx(1 / 3)


@given(seed=seeds)
def test_kl_k3_is_nonnegative_and_zero_only_at_equality(seed):
    g = _gen(seed)
    lp, ref = _log_probs(g, 3, 5), _log_probs(g, 3, 5)
    kl = S.kl_k3(lp, ref)
    assert (kl >= 0).all() and (kl[lp != ref] > 0).all()
    assert (S.kl_k3(lp, lp) == 0).all()


def test_grpo_padding_tokens_do_not_change_the_loss():
    g = _gen(3)
    lp, old, ref = _log_probs(g, 3, 5), _log_probs(g, 3, 5), _log_probs(g, 3, 5)
    mask, adv = _mask(g, 3, 5), torch.randn(3, generator=g, dtype=torch.float64)
    noisy = torch.where(mask > 0, lp, torch.full_like(lp, -50.0))
    for agg in S.AGGREGATIONS:
        torch.testing.assert_close(
            S.grpo_loss(lp, old, ref, adv, mask, aggregation=agg)[0],
            S.grpo_loss(noisy, old, ref, adv, mask, aggregation=agg)[0],
        )


def test_sequence_bad_inputs_raise_value_errors_naming_the_argument():
    d = _dpo_inputs(0)
    with pytest.raises(ValueError, match="chosen_mask"):
        S.dpo_loss(**{**d, "chosen_mask": d["chosen_mask"].bool()})
    with pytest.raises(ValueError, match="reference_rejected"):
        S.dpo_loss(**{**d, "reference_rejected": d["reference_rejected"][:, :3]})
    with pytest.raises(ValueError, match="label_smoothing"):
        S.dpo_loss(**d, label_smoothing=0.5)
    with pytest.raises(ValueError, match="beta"):
        S.dpo_loss(**d, beta=-0.1)
    with pytest.raises(ValueError, match="rewards"):
        S.group_relative_advantages(torch.ones(4))
    lp, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="advantages"):
        S.grpo_loss(lp, lp, lp, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="clip_eps"):
        S.grpo_loss(lp, lp, lp, torch.zeros(2), mask, clip_eps=-0.2)
    with pytest.raises(ValueError, match="aggregation"):
        S.grpo_loss(lp, lp, lp, torch.zeros(2), mask, aggregation="sum")
