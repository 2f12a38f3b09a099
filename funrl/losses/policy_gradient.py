"""On-policy policy-gradient losses: PPO (clipped surrogate, clipped value loss), A2C, REINFORCE.

Each loss is a plain function of tensors returning ``(loss, metrics)`` so that
``torch.func.grad_and_value(loss_fn, has_aux=True)`` applies directly. Inputs are flat batches
``[B]`` or any shape (time-major ``[T, N]`` works too); losses are means over every element.
Advantages and return targets are treated as data: they are detached, so a gradient never flows
into the critic through the policy term (rlax's ``use_stop_gradient=True``). Metrics are detached
scalars.

Conventions (and where they differ from TorchRL, tested in ``tests/losses/test_torchrl_crosscheck_a.py``):

* value losses are ``0.5 * mean((V - G)^2)`` (CleanRL, PureJaxRL, rlax ``l2_loss``); TorchRL's
  ``loss_critic_type="l2"`` has no ``0.5``, so its ``critic_coef=c`` matches ``vf_coef=2c`` here;
* advantage normalisation uses the unbiased standard deviation and ``eps=1e-8`` (CleanRL);
* ``approx_kl`` is ``mean((r - 1) - log r)`` (Schulman's low-variance unbiased estimator "k3"),
  ``clip_fraction`` the share of samples with ``|r - 1| > clip_eps``.
"""

from __future__ import annotations

import torch

from funrl.losses._checks import (
    check_floating,
    check_nonnegative,
    check_positive,
    check_same_shape,
)

__all__ = [
    "normalize_advantages",
    "ppo_clip_loss",
    "ppo_value_loss",
    "ppo_loss",
    "a2c_loss",
    "reinforce_loss",
]

Scalar = float | torch.Tensor

Metrics = dict[str, torch.Tensor]


def _check_floats(**tensors: torch.Tensor) -> None:
    (ref_name, ref), *_ = tensors.items()
    for name, x in tensors.items():
        check_floating(name, x)
    if ref.numel() == 0:
        raise ValueError(f"{ref_name}: expected at least one element, got shape {tuple(ref.shape)}")
    check_same_shape(ref_name, ref, **tensors)


def normalize_advantages(advantages: torch.Tensor, eps: Scalar = 1e-8) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)`` over all elements (unbiased std, as CleanRL)."""
    check_floating("advantages", advantages)
    return (advantages - advantages.mean()) / (advantages.std() + eps)


def ppo_clip_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: Scalar,
    normalize: bool = False,
) -> tuple[torch.Tensor, Metrics]:
    """PPO clipped surrogate loss (Schulman et al. 2017, eq. 7), negated for minimisation.

    ``L = -mean(min(r A, clip(r, 1 - ε, 1 + ε) A))`` with ``r = exp(log_prob - old_log_prob)``.

    Args:
        log_prob: ``[B...]`` log π_θ(a|s) (carries the gradient).
        old_log_prob: ``[B...]`` log π_old(a|s) of the behaviour policy (detached).
        advantages: ``[B...]`` advantage estimates (detached).
        clip_eps: ε > 0.
        normalize: normalise advantages over the batch first.

    Returns:
        ``(loss, metrics)`` with metrics ``policy_loss``, ``approx_kl``, ``clip_fraction``,
        ``ratio_mean``.
    """
    _check_floats(log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    check_positive("clip_eps", clip_eps)
    advantages = advantages.detach()
    if normalize:
        advantages = normalize_advantages(advantages)
    log_ratio = log_prob - old_log_prob.detach()
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -torch.minimum(unclipped, clipped).mean()
    with torch.no_grad():
        metrics = {
            "policy_loss": loss.detach(),
            "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
            "clip_fraction": ((ratio - 1.0).abs() > clip_eps).to(ratio.dtype).mean(),
            "ratio_mean": ratio.mean(),
        }
    return loss, metrics


def ppo_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_eps: Scalar | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """PPO critic loss, ``0.5 * mean((V - G)^2)``, optionally clipped (as in OpenAI baselines).

    With ``clip_eps``: ``0.5 * mean(max((V - G)^2, (V_old + clip(V - V_old, -ε, ε) - G)^2))``, a
    pessimistic bound that keeps the new value function near the one that collected the data.

    Args:
        values: ``[B...]`` V_θ(s) (carries the gradient).
        old_values: ``[B...]`` values at collection time (detached).
        returns: ``[B...]`` targets, e.g. GAE returns (detached).
        clip_eps: ε > 0, or ``None`` for the unclipped loss.

    Returns:
        ``(loss, metrics)`` with ``value_loss`` and ``value_clip_fraction``.
    """
    _check_floats(values=values, old_values=old_values, returns=returns)
    returns = returns.detach()
    squared = (values - returns) ** 2
    if clip_eps is None:
        loss = 0.5 * squared.mean()
        clip_fraction = torch.zeros((), dtype=values.dtype, device=values.device)
    else:
        check_positive("clip_eps", clip_eps)
        old_values = old_values.detach()
        clipped_values = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
        squared_clipped = (clipped_values - returns) ** 2
        loss = 0.5 * torch.maximum(squared, squared_clipped).mean()
        clip_fraction = ((values - old_values).abs() > clip_eps).to(values.dtype).mean().detach()
    return loss, {"value_loss": loss.detach(), "value_clip_fraction": clip_fraction}


def ppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    clip_eps: Scalar = 0.2,
    vf_coef: Scalar = 0.5,
    ent_coef: Scalar = 0.01,
    value_clip_eps: Scalar | None = None,
    normalize: bool = True,
) -> tuple[torch.Tensor, Metrics]:
    """PPO total loss: ``policy + vf_coef * value - ent_coef * mean(entropy)`` (CleanRL's form).

    Args:
        log_prob, old_log_prob, advantages: as :func:`ppo_clip_loss`.
        values, old_values, returns: as :func:`ppo_value_loss`.
        entropy: ``[B...]`` policy entropy per sample.
        clip_eps: policy ratio clip ε.
        vf_coef, ent_coef: >= 0 weights.
        value_clip_eps: value clip, or ``None``.
        normalize: normalise advantages over the batch.

    Returns:
        ``(loss, metrics)``: the metrics of both parts, plus ``entropy`` and ``loss``.
    """
    _check_floats(log_prob=log_prob, entropy=entropy)
    check_nonnegative("vf_coef", vf_coef)
    check_nonnegative("ent_coef", ent_coef)
    policy_loss, policy_metrics = ppo_clip_loss(log_prob, old_log_prob, advantages, clip_eps, normalize)
    value_loss, value_metrics = ppo_value_loss(values, old_values, returns, value_clip_eps)
    mean_entropy = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    metrics = {**policy_metrics, **value_metrics, "entropy": mean_entropy.detach(), "loss": loss.detach()}
    return loss, metrics


def a2c_loss(
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    vf_coef: Scalar = 0.5,
    ent_coef: Scalar = 0.01,
) -> tuple[torch.Tensor, Metrics]:
    """Advantage actor-critic loss (Mnih et al. 2016, A3C's synchronous form).

    ``-mean(log π(a|s) A) + vf_coef * 0.5 * mean((V - G)^2) - ent_coef * mean(H)``.

    Args:
        log_prob: ``[B...]`` log π_θ(a|s).
        advantages: ``[B...]`` (detached), e.g. from :func:`funrl.losses.gae`.
        values: ``[B...]`` V_θ(s).
        returns: ``[B...]`` critic targets (detached).
        entropy: ``[B...]`` policy entropy.
        vf_coef, ent_coef: >= 0 weights.

    Returns:
        ``(loss, metrics)`` with ``policy_loss``, ``value_loss``, ``entropy``, ``loss``.
    """
    _check_floats(log_prob=log_prob, advantages=advantages, values=values, returns=returns, entropy=entropy)
    check_nonnegative("vf_coef", vf_coef)
    check_nonnegative("ent_coef", ent_coef)
    policy_loss = -(log_prob * advantages.detach()).mean()
    value_loss = 0.5 * ((values - returns.detach()) ** 2).mean()
    mean_entropy = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * mean_entropy
    metrics = {
        "policy_loss": policy_loss.detach(),
        "value_loss": value_loss.detach(),
        "entropy": mean_entropy.detach(),
        "loss": loss.detach(),
    }
    return loss, metrics


def reinforce_loss(
    log_prob: torch.Tensor,
    returns: torch.Tensor,
    baseline: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """REINFORCE (Williams 1992): ``-mean(log π(a_t|s_t) (G_t - b_t))``.

    Args:
        log_prob: ``[B...]`` log π_θ(a|s).
        returns: ``[B...]`` returns-to-go, e.g. :func:`funrl.losses.discounted_returns` (detached).
        baseline: optional ``[B...]`` baseline (detached; it reduces variance, not bias).

    Returns:
        ``(loss, metrics)`` with ``policy_loss``.
    """
    _check_floats(log_prob=log_prob, returns=returns)
    weights = returns.detach()
    if baseline is not None:
        _check_floats(log_prob=log_prob, baseline=baseline)
        weights = weights - baseline.detach()
    loss = -(log_prob * weights).mean()
    return loss, {"policy_loss": loss.detach()}
