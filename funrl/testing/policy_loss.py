"""Invariants of PPO's clipped surrogate loss (Schulman et al. 2017, eq. 7).

``fn`` is shaped like :func:`funrl.losses.ppo_clip_loss`::

    loss, metrics = fn(log_prob, old_log_prob, advantages, clip_eps)   # or just the loss

on flat batches ``[B]``, with ``L = -mean_i min(r_i A_i, clip(r_i, 1 - ε, 1 + ε) A_i)`` and
``r = exp(log_prob - old_log_prob)``. Gradients are taken with respect to ``log_prob``, where
``∂L/∂log_prob_i = -r_i A_i / B`` unless the clip holds the ratio. Elements within ``1e-6`` of a
clip edge are left out of the gradient checks (the derivative jumps there). The invariants:

- ``zero gradient where the clipped ratio saturates``: ``r > 1 + ε`` with ``A > 0``, or
  ``r < 1 - ε`` with ``A < 0``;
- ``the surrogate gradient where the clip is inactive``: ``-r A / B`` everywhere else (a loss
  without the ``min`` clips a ratio that moves against the advantage, and its gradient is lost);
- ``on-policy ratio 1 gives the vanilla policy gradient``: at ``log_prob = old_log_prob``,
  ``∂L/∂log_prob = -A / B``, the gradient of ``-mean(log π(a|s) A)``;
- ``scale of advantages``: ``L(c A) = c L(A)`` and the gradient scales by ``c`` for ``c > 0``;
- ``the clipped objective is a pessimistic bound``: ``-L <= mean(r A)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from hypothesis import strategies as st

from funrl.testing.battery import Invariant, expect_close, run_battery
from funrl.testing.strategies import clip_epsilons

__all__ = ["PolicyBatch", "policy_loss_invariants"]

_EDGE = 1e-6  # how close to 1 ± ε a ratio may come before the gradient checks skip it


class PolicyBatch(NamedTuple):
    """One drawn case: ``log_prob``, ``old_log_prob``, ``advantages`` (float64 ``[B]``), ``clip_eps``."""

    log_prob: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    clip_eps: float


def _floats(draw: st.DrawFn, size: int, low: float, high: float) -> torch.Tensor:
    return torch.tensor(
        draw(st.lists(st.floats(low, high), min_size=size, max_size=size)), dtype=torch.float64
    )


@st.composite
def _policy_batches(draw: st.DrawFn, max_batch: int) -> PolicyBatch:
    size = draw(st.integers(1, max_batch))
    old_log_prob = _floats(draw, size, -3.0, 0.0)
    log_ratio = _floats(draw, size, -1.0, 1.0)
    return PolicyBatch(
        old_log_prob + log_ratio, old_log_prob, _floats(draw, size, -5.0, 5.0), draw(clip_epsilons())
    )


def _loss_and_grad(fn: Callable[..., Any], batch: PolicyBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn``'s loss and its gradient with respect to ``log_prob`` (zeros if it does not depend on it)."""
    log_prob = batch.log_prob.clone().requires_grad_(True)
    out = fn(log_prob, batch.old_log_prob, batch.advantages, batch.clip_eps)
    loss = out[0] if isinstance(out, tuple) else out
    (grad,) = torch.autograd.grad(loss, log_prob, allow_unused=True)
    return loss.detach(), torch.zeros_like(log_prob) if grad is None else grad


def _ratio(batch: PolicyBatch) -> torch.Tensor:
    return torch.exp(batch.log_prob - batch.old_log_prob)


def _away_from_edges(batch: PolicyBatch) -> torch.Tensor:
    ratio = _ratio(batch)
    return ((ratio - (1 + batch.clip_eps)).abs() > _EDGE) & ((ratio - (1 - batch.clip_eps)).abs() > _EDGE)


def _saturated(batch: PolicyBatch) -> torch.Tensor:
    ratio, adv = _ratio(batch), batch.advantages
    return ((ratio > 1 + batch.clip_eps) & (adv > 0)) | ((ratio < 1 - batch.clip_eps) & (adv < 0))


def policy_loss_invariants(
    fn: Callable[..., Any],
    *,
    max_examples: int = 50,
    only: Sequence[str] | None = None,
    shrink: bool = True,
    max_batch: int = 8,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Check ``fn`` (shaped like :func:`funrl.losses.ppo_clip_loss`) against PPO's invariants.

    Each invariant (see the module docstring) is searched with ``max_examples`` hypothesis cases:
    float64 batches of up to ``max_batch`` samples, log-ratios in ``[-1, 1]``, advantages in
    ``[-5, 5]``, ``ε`` from :func:`funrl.testing.strategies.clip_epsilons`. Results reproduce.

    ``only`` names the invariants to check (all by default); ``shrink=False`` reports the first
    counter-example found instead of the smallest, much faster when only detection matters.

    Raises:
        AssertionError: naming every invariant that broke, the first element that differed and
            the smallest counter-example hypothesis found.
    """

    def zero_gradient_where_saturated(batch: PolicyBatch) -> None:
        _, grad = _loss_and_grad(fn, batch)
        checked = _saturated(batch) & _away_from_edges(batch)
        expect_close(
            torch.where(checked, grad, 0.0), torch.zeros_like(grad), "d loss / d log_prob", rtol, atol
        )

    def surrogate_gradient_elsewhere(batch: PolicyBatch) -> None:
        _, grad = _loss_and_grad(fn, batch)
        checked = ~_saturated(batch) & _away_from_edges(batch)
        surrogate = -_ratio(batch) * batch.advantages / batch.advantages.numel()
        expect_close(torch.where(checked, grad, surrogate), surrogate, "d loss / d log_prob", rtol, atol)

    def on_policy_vanilla_gradient(batch: PolicyBatch) -> None:
        on_policy = batch._replace(log_prob=batch.old_log_prob.clone())
        _, grad = _loss_and_grad(fn, on_policy)
        vanilla = -batch.advantages / batch.advantages.numel()
        expect_close(grad, vanilla, "d loss / d log_prob at ratio 1", rtol, atol)

    def scale_of_advantages(case: tuple[PolicyBatch, float]) -> None:
        batch, scale = case
        loss, grad = _loss_and_grad(fn, batch)
        scaled_loss, scaled_grad = _loss_and_grad(fn, batch._replace(advantages=scale * batch.advantages))
        expect_close(scaled_loss, scale * loss, f"loss with advantages scaled by {scale}", rtol, atol)
        expect_close(
            scaled_grad, scale * grad, f"d loss / d log_prob with advantages scaled by {scale}", rtol, atol
        )

    def pessimistic_bound(batch: PolicyBatch) -> None:
        loss, _ = _loss_and_grad(fn, batch)
        unclipped = (_ratio(batch) * batch.advantages).mean()
        if not bool(-loss <= unclipped + atol + rtol * unclipped.abs()):
            raise AssertionError(
                f"-loss = {-loss.item()} exceeds the unclipped objective mean(r A) = {unclipped.item()}"
            )

    batches = _policy_batches(max_batch)
    invariants = [
        Invariant("zero gradient where the clipped ratio saturates", batches, zero_gradient_where_saturated),
        Invariant("the surrogate gradient where the clip is inactive", batches, surrogate_gradient_elsewhere),
        Invariant("on-policy ratio 1 gives the vanilla policy gradient", batches, on_policy_vanilla_gradient),
        Invariant("scale of advantages", st.tuples(batches, st.floats(0.01, 100.0)), scale_of_advantages),
        Invariant("the clipped objective is a pessimistic bound", batches, pessimistic_bound),
    ]
    run_battery("policy_loss_invariants", invariants, max_examples, only, shrink)
