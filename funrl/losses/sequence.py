"""Sequence-level policy optimisation for language-model fine-tuning: DPO and GRPO.

These losses take what a language model gives: per-token log-probabilities of the sampled (or
preferred / rejected) response tokens, ``[B, T]``, and a float mask ``[B, T]`` that is 1 on response
tokens and 0 on prompt and padding tokens (a ``bool`` mask is refused: convert it with
``mask.float()``, see ``funrl.losses._checks``). Nothing here runs the model, so any model works.

References: DPO (Rafailov et al. 2023, eq. 7; conservative DPO label smoothing as in TRL's
``sigmoid`` loss), GRPO (Shao et al. 2024, DeepSeekMath, eq. 3-4: group-relative advantages, PPO's
clipped ratio per token, the ``k3`` KL estimator to a reference policy).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from funrl.losses._checks import (
    check_choice,
    check_floating,
    check_nonnegative,
    check_same_shape,
    check_shape,
    check_unit_interval,
)

__all__ = [
    "sequence_log_prob",
    "dpo_loss",
    "group_relative_advantages",
    "kl_k3",
    "grpo_loss",
    "AGGREGATIONS",
]

Scalar = float | torch.Tensor

AGGREGATIONS = ("sequence_mean", "token_mean")


def _check_tokens(reference_name: str, reference: torch.Tensor, **others: torch.Tensor) -> None:
    check_floating(reference_name, reference)
    if reference.dim() != 2:
        raise ValueError(f"{reference_name}: expected shape [B, T], got {tuple(reference.shape)}")
    for name, value in others.items():
        check_floating(name, value)
    check_same_shape(reference_name, reference, **others)


def sequence_log_prob(token_log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log pi(y|x) = sum_t mask_t log pi(y_t | x, y_<t)``: ``[B, T] -> [B]``."""
    _check_tokens("token_log_prob", token_log_prob, mask=mask)
    return (token_log_prob * mask).sum(dim=-1)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    chosen_mask: torch.Tensor,
    rejected_mask: torch.Tensor,
    beta: Scalar = 0.1,
    label_smoothing: Scalar = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Direct Preference Optimisation loss on per-token log-probs.

    ``h = beta [(log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))]`` per pair, with
    sequence log-probs summed over masked tokens, and
    ``loss = mean [-(1 - eps) log sigmoid(h) - eps log sigmoid(-h)]`` (``eps = label_smoothing``, 0 in
    the paper). When the policy equals the reference, ``h = 0`` and the loss is ``log 2``.

    Args:
      policy_chosen, reference_chosen: ``[B, T_w]`` token log-probs of the preferred responses
        (the reference ones are constants).
      policy_rejected, reference_rejected: ``[B, T_l]`` of the rejected responses.
      chosen_mask, rejected_mask: float masks of the same shapes.
      beta: KL strength >= 0; label_smoothing: in [0, 0.5).

    Returns:
      ``(loss, metrics)``: ``reward_chosen``, ``reward_rejected`` (the implicit rewards
      ``beta * log pi/pi_ref``, batch means), ``reward_accuracy``, ``reward_margin``.
    """
    _check_tokens("policy_chosen", policy_chosen, reference_chosen=reference_chosen, chosen_mask=chosen_mask)
    _check_tokens(
        "policy_rejected", policy_rejected, reference_rejected=reference_rejected, rejected_mask=rejected_mask
    )
    if policy_chosen.shape[0] != policy_rejected.shape[0]:
        raise ValueError(
            f"policy_rejected: expected batch size {policy_chosen.shape[0]} (that of policy_chosen), "
            f"got {policy_rejected.shape[0]}"
        )
    check_nonnegative("beta", beta)
    check_unit_interval("label_smoothing", label_smoothing)
    if not isinstance(label_smoothing, torch.Tensor) and not label_smoothing < 0.5:
        raise ValueError(f"label_smoothing: expected a value in [0, 0.5), got {label_smoothing!r}")
    chosen_ratio = sequence_log_prob(policy_chosen, chosen_mask) - sequence_log_prob(
        reference_chosen.detach(), chosen_mask
    )
    rejected_ratio = sequence_log_prob(policy_rejected, rejected_mask) - sequence_log_prob(
        reference_rejected.detach(), rejected_mask
    )
    logits = beta * (chosen_ratio - rejected_ratio)
    losses = -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    reward_chosen, reward_rejected = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
    metrics = {
        "reward_chosen": reward_chosen.mean(),
        "reward_rejected": reward_rejected.mean(),
        "reward_accuracy": (reward_chosen > reward_rejected).to(logits.dtype).mean(),
        "reward_margin": (reward_chosen - reward_rejected).mean(),
    }
    return losses.mean(), metrics


def group_relative_advantages(
    rewards: torch.Tensor, normalize_std: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """GRPO advantages: each reward minus its group's mean, over the group's std (+ eps).

    Args:
      rewards: ``[num_groups, group_size]`` (one row: the responses sampled for one prompt).
      normalize_std: divide by the (unbiased) group std plus ``eps`` (GRPO, TRL); ``False`` keeps
        only the mean baseline (Dr. GRPO, Liu et al. 2025).
      eps: > 0, guards groups whose rewards are all equal (their advantages are then 0).

    Returns:
      ``[num_groups, group_size]`` advantages with zero mean in every group. Flatten them to
      ``[B]`` in the same order as the responses.
    """
    check_floating("rewards", rewards)
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(
            "rewards: expected shape [num_groups, group_size] with group_size >= 2, "
            f"got {tuple(rewards.shape)}"
        )
    check_nonnegative("eps", eps)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not normalize_std:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def kl_k3(log_prob: torch.Tensor, reference_log_prob: torch.Tensor) -> torch.Tensor:
    """Per-token ``KL(pi || pi_ref)`` estimator ``exp(r) - r - 1`` with ``r = log pi_ref - log pi``.

    Unbiased for samples from ``pi`` and never negative (Schulman 2020, "k3"); GRPO eq. 4.
    """
    check_floating("log_prob", log_prob)
    check_floating("reference_log_prob", reference_log_prob)
    check_same_shape("log_prob", log_prob, reference_log_prob=reference_log_prob)
    log_ratio = reference_log_prob.detach() - log_prob
    return torch.exp(log_ratio) - log_ratio - 1.0


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    if aggregation == "sequence_mean":
        # GRPO eq. 3: the mean over each response's tokens, then over responses.
        return ((per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)).mean()
    # DAPO (Yu et al. 2025): one mean over all response tokens of the batch.
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def grpo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    reference_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: Scalar = 0.2,
    kl_coef: Scalar = 0.04,
    aggregation: str = "sequence_mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO objective (negated, to minimise) on per-token log-probs.

    Per token: ``rho = exp(log pi - log pi_old)``, surrogate ``min(rho A, clip(rho, 1-e, 1+e) A)``,
    penalty ``kl_coef * kl_k3(log pi, log pi_ref)``; the loss is ``-(surrogate - penalty)``
    aggregated over masked tokens (``"sequence_mean"``: GRPO's per-response mean then batch mean;
    ``"token_mean"``: DAPO's mean over all tokens).

    Args:
      log_prob: ``[B, T]`` token log-probs under the current policy (differentiated).
      old_log_prob: ``[B, T]`` under the sampling policy; reference_log_prob: ``[B, T]`` under the
        reference policy (both constants).
      advantages: ``[B]`` one per response (``group_relative_advantages(...).flatten()``).
      mask: ``[B, T]`` float response mask.
      clip_eps: in [0, 1]; kl_coef: >= 0 (DeepSeekMath: 0.04).

    Returns:
      ``(loss, metrics)``: ``kl`` (mean per token), ``clip_fraction``, ``ratio_mean``.
    """
    _check_tokens(
        "log_prob", log_prob, old_log_prob=old_log_prob, reference_log_prob=reference_log_prob, mask=mask
    )
    check_floating("advantages", advantages)
    check_shape("advantages", advantages, (log_prob.shape[0],), "[B], one per response")
    check_unit_interval("clip_eps", clip_eps)
    check_nonnegative("kl_coef", kl_coef)
    check_choice("aggregation", aggregation, AGGREGATIONS)
    advantage = advantages.detach().unsqueeze(-1)
    ratio = torch.exp(log_prob - old_log_prob.detach())
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantage)
    kl = kl_k3(log_prob, reference_log_prob)
    loss = _aggregate(-(surrogate - kl_coef * kl), mask, aggregation)
    clipped = ((ratio - 1.0).abs() > clip_eps).to(log_prob.dtype)
    metrics = {
        "kl": _aggregate(kl.detach(), mask, aggregation),
        "clip_fraction": _aggregate(clipped, mask, aggregation),
        "ratio_mean": _aggregate(ratio.detach(), mask, aggregation),
    }
    return loss, metrics
