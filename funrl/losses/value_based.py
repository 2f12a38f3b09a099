"""Value-based losses: DQN (Huber or MSE), Double DQN, n-step targets, C51, QR-DQN.

Each algorithm is split rlax-style into a *target* function (no gradient; inputs from the target
network) and a *loss* function of the online network's outputs, so targets can be built however
the caller likes (one-step, n-step, double) and reused. Losses return ``(loss, metrics)`` for
``torch.func.grad_and_value(..., has_aux=True)``; targets are detached inside the losses.

Shapes: a batch ``[B]`` of transitions (any leading batch shape works, e.g. ``[T, N]``), ``A``
actions, ``K`` atoms (C51), ``Q`` quantiles (QR-DQN). Actions are integer tensors.

Loss conventions: ``"huber"`` equals ``torch.nn.functional.huber_loss`` (rlax ``huber_loss``; equal
to ``smooth_l1`` at ``delta = 1``), ``"mse"`` is ``mean((Q - y)^2)`` without a ``1/2`` (CleanRL's
DQN and TorchRL's ``loss_function="l2"``), so the TorchRL cross-check compares like with like.
"""

from __future__ import annotations

import torch

from funrl.losses._checks import (
    check_bool,
    check_choice,
    check_floating,
    check_integer,
    check_min_dim,
    check_positive,
    check_same_shape,
    check_scalar_or_broadcastable,
    check_unit_interval,
)
from funrl.losses.returns import n_step_returns

__all__ = [
    "q_learning_target",
    "double_q_learning_target",
    "n_step_q_targets",
    "dqn_loss",
    "categorical_projection",
    "categorical_q_learning_target",
    "c51_loss",
    "quantile_q_learning_target",
    "quantile_huber_loss",
    "qr_dqn_loss",
]

Scalar = float | torch.Tensor
Metrics = dict[str, torch.Tensor]


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_transitions(rewards: torch.Tensor, terminated: torch.Tensor, gamma: Scalar) -> None:
    check_floating("rewards", rewards)
    check_bool("terminated", terminated)
    check_same_shape("rewards", rewards, terminated=terminated)
    check_unit_interval("gamma", gamma)
    check_scalar_or_broadcastable("gamma", gamma, "rewards", rewards)


def _check_per_action(
    name: str, x: torch.Tensor, batch_name: str, batch: torch.Tensor, trailing: int
) -> None:
    """``x`` must be ``batch.shape + (A, ...)`` with ``trailing`` dims after the batch."""
    check_floating(name, x)
    if x.dim() != batch.dim() + trailing or x.shape[: batch.dim()] != batch.shape:
        raise ValueError(
            f"{name}: expected shape {tuple(batch.shape)} + {trailing} more dim(s) (batch shape of "
            f"{batch_name}), got {tuple(x.shape)}"
        )


def _huber(errors: torch.Tensor, delta: Scalar) -> torch.Tensor:
    """Elementwise Huber ``0.5 u^2`` for ``|u| <= δ``, else ``δ (|u| - δ/2)``.

    Written out rather than ``F.huber_loss``, whose batching rule resizes outputs under ``vmap``
    (a deprecated path that warns in torch 2.13).
    """
    magnitude = errors.abs()
    return torch.where(magnitude <= delta, 0.5 * errors**2, delta * (magnitude - 0.5 * delta))


def _take(per_action: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """``per_action[..., a, *rest]`` at each sample's action; ``per_action`` is ``[B..., A, *rest]``."""
    batch_dims = actions.dim()
    index = actions.reshape(*actions.shape, 1, *([1] * (per_action.dim() - batch_dims - 1)))
    index = index.expand(*actions.shape, 1, *per_action.shape[batch_dims + 1 :])
    return per_action.gather(batch_dims, index).squeeze(batch_dims)


def _check_actions(
    actions: torch.Tensor, per_action_name: str, per_action: torch.Tensor, trailing: int
) -> None:
    check_integer("actions", actions)
    if per_action.dim() != actions.dim() + trailing or per_action.shape[: actions.dim()] != actions.shape:
        raise ValueError(
            f"actions: expected shape {tuple(per_action.shape[: per_action.dim() - trailing])} (the batch "
            f"shape of {per_action_name}), got {tuple(actions.shape)}"
        )


# --------------------------------------------------------------------------------------------
# DQN
# --------------------------------------------------------------------------------------------


def q_learning_target(
    rewards: torch.Tensor,
    next_q_values: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """Q-learning target ``y = r + γ (1 - terminated) max_a Q_target(s', a)`` (Mnih et al. 2015).

    Args:
        rewards: ``[B...]`` floats.
        next_q_values: ``[B..., A]`` target-network values at ``s'`` (``final_obs`` if truncated).
        terminated: ``[B...]`` bool.
        gamma: discount in [0, 1].

    Returns:
        ``[B...]`` targets (detached).
    """
    _check_transitions(rewards, terminated, gamma)
    _check_per_action("next_q_values", next_q_values, "rewards", rewards, 1)
    bootstrap = next_q_values.max(dim=-1).values
    return (rewards + gamma * (~terminated).to(rewards.dtype) * bootstrap).detach()


def double_q_learning_target(
    rewards: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """Double DQN target ``y = r + γ (1 - term) Q_target(s', argmax_a Q_online(s', a))`` (van Hasselt 2016).

    Args:
        rewards: ``[B...]``.
        next_q_online: ``[B..., A]`` online-network values at ``s'`` (select the action).
        next_q_target: ``[B..., A]`` target-network values at ``s'`` (evaluate it).
        terminated: ``[B...]`` bool.
        gamma: in [0, 1].

    Returns:
        ``[B...]`` targets (detached).
    """
    _check_transitions(rewards, terminated, gamma)
    _check_per_action("next_q_online", next_q_online, "rewards", rewards, 1)
    check_same_shape("next_q_online", next_q_online, next_q_target=next_q_target)
    greedy = next_q_online.argmax(dim=-1)
    bootstrap = _take(next_q_target, greedy)
    return (rewards + gamma * (~terminated).to(rewards.dtype) * bootstrap).detach()


def n_step_q_targets(
    rewards: torch.Tensor,
    next_q_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    n: int,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """n-step Q-learning targets over a time-major window (Sutton & Barto 2018 §7.1; Rainbow).

    ``y_t = Σ_{k<n} γ^k r_{t+k} + γ^n max_a Q_target(s'_{t+n-1}, a)``, cut at episode and window
    ends like :func:`funrl.losses.n_step_returns`. With ``next_q_online``, the bootstrap action is
    chosen by the online network (Double DQN).

    Args:
        rewards: ``[T, N...]``.
        next_q_values: ``[T, N..., A]`` target-network values at ``s'_t``.
        terminated, truncated: ``[T, N...]`` bool.
        gamma: in [0, 1].
        n: steps, >= 1.
        next_q_online: optional ``[T, N..., A]`` online values at ``s'_t``.

    Returns:
        ``[T, N...]`` targets (detached).
    """
    check_floating("rewards", rewards)
    check_min_dim("rewards", rewards, 1, "time-major [T, ...]")
    _check_per_action("next_q_values", next_q_values, "rewards", rewards, 1)
    if next_q_online is None:
        bootstrap = next_q_values.max(dim=-1).values
    else:
        check_same_shape("next_q_values", next_q_values, next_q_online=next_q_online)
        bootstrap = _take(next_q_values, next_q_online.argmax(dim=-1))
    return n_step_returns(rewards, bootstrap, terminated, truncated, gamma, n).detach()


def dqn_loss(
    q_values: torch.Tensor,
    actions: torch.Tensor,
    targets: torch.Tensor,
    loss_type: str = "huber",
    huber_delta: Scalar = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """DQN regression of ``Q(s, a)`` onto fixed targets (Mnih et al. 2015).

    Args:
        q_values: ``[B..., A]`` online-network values at ``s``.
        actions: ``[B...]`` integer actions taken.
        targets: ``[B...]`` from :func:`q_learning_target`, :func:`double_q_learning_target` or
            :func:`n_step_q_targets` (detached here).
        loss_type: ``"huber"`` or ``"mse"`` (see the module docstring).
        huber_delta: Huber threshold δ > 0.

    Returns:
        ``(loss, metrics)`` with ``td_error_abs`` (mean ``|y - Q|``) and ``q_taken`` (mean Q).
    """
    check_floating("targets", targets)
    _check_actions(actions, "q_values", q_values, 1)
    _check_per_action("q_values", q_values, "targets", targets, 1)
    check_choice("loss_type", loss_type, ("huber", "mse"))
    check_positive("huber_delta", huber_delta)
    q_taken = _take(q_values, actions)
    targets = targets.detach()
    if loss_type == "huber":
        loss = _huber(targets - q_taken, huber_delta).mean()
    else:
        loss = ((targets - q_taken) ** 2).mean()
    with torch.no_grad():
        metrics = {"td_error_abs": (targets - q_taken).abs().mean(), "q_taken": q_taken.mean()}
    return loss, metrics


# --------------------------------------------------------------------------------------------
# C51
# --------------------------------------------------------------------------------------------


def _support(v_min: float, v_max: float, num_atoms: int, like: torch.Tensor) -> torch.Tensor:
    return torch.linspace(v_min, v_max, num_atoms, dtype=like.dtype, device=like.device)


def _check_support(v_min: float, v_max: float) -> None:
    for name, value in (("v_min", v_min), ("v_max", v_max)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name}: expected a Python float, got {type(value).__name__}")
    if not v_min < v_max:
        raise ValueError(f"v_max: expected a value > v_min ({v_min!r}), got {v_max!r}")


def categorical_projection(
    values: torch.Tensor,
    probs: torch.Tensor,
    v_min: float,
    v_max: float,
) -> torch.Tensor:
    """Project a distribution onto the evenly spaced support ``linspace(v_min, v_max, K)``.

    The C51 projection Φ (Bellemare et al. 2017, Algorithm 1; rlax ``categorical_l2_project`` on
    an even grid): each mass ``probs[j]`` at ``values[j]`` (clipped to ``[v_min, v_max]``) is split
    between its two neighbouring atoms in proportion to closeness,

    ``Φ(p)_i = Σ_j p_j max(0, 1 - |clip(values_j) - z_i| / Δz)``.

    Written as this triangle kernel (``O(K^2)`` per sample, branch-free) rather than
    floor/ceil scatter: it also handles a value landing exactly on an atom, where the
    floor == ceil shortcut of some implementations drops the mass.

    Args:
        values: ``[B..., K']`` positions of the masses, e.g. ``r + γ (1 - term) z``.
        probs: ``[B..., K']`` their probabilities (same shape).
        v_min, v_max: support bounds (Python floats, ``v_min < v_max``).

    Returns:
        ``[B..., K]`` probabilities on the support, ``K = K'``; mass is conserved.
    """
    check_floating("values", values)
    check_floating("probs", probs)
    check_same_shape("values", values, probs=probs)
    _check_support(v_min, v_max)
    num_atoms = values.shape[-1]
    if num_atoms < 2:
        raise ValueError(
            f"values: expected at least 2 atoms in the last dim, got shape {tuple(values.shape)}"
        )
    atoms = _support(v_min, v_max, num_atoms, values)
    delta = (v_max - v_min) / (num_atoms - 1)
    clipped = values.clamp(v_min, v_max)
    # weight[..., i, j]: share of mass j that goes to atom i.
    weight = (1.0 - (clipped.unsqueeze(-2) - atoms.unsqueeze(-1)).abs() / delta).clamp(min=0.0)
    return (weight * probs.unsqueeze(-2)).sum(dim=-1)


def categorical_q_learning_target(
    rewards: torch.Tensor,
    next_logits: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
    v_min: float,
    v_max: float,
    next_logits_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """C51 target distribution: ``Φ(r + γ (1 - term) z, p_target(s', a*))`` (Bellemare et al. 2017).

    ``a* = argmax_a E[Z(s', a)]`` under the target network, or under the online network when
    ``next_logits_online`` is given (double C51, as in Rainbow).

    Args:
        rewards: ``[B...]``.
        next_logits: ``[B..., A, K]`` target-network logits at ``s'``.
        terminated: ``[B...]`` bool.
        gamma: in [0, 1].
        v_min, v_max: support bounds.
        next_logits_online: optional ``[B..., A, K]`` online logits at ``s'``.

    Returns:
        ``[B..., K]`` target probabilities (detached).
    """
    _check_transitions(rewards, terminated, gamma)
    _check_per_action("next_logits", next_logits, "rewards", rewards, 2)
    _check_support(v_min, v_max)
    atoms = _support(v_min, v_max, next_logits.shape[-1], next_logits)
    next_probs = torch.softmax(next_logits, dim=-1)
    if next_logits_online is None:
        selector = next_probs
    else:
        check_same_shape("next_logits", next_logits, next_logits_online=next_logits_online)
        selector = torch.softmax(next_logits_online, dim=-1)
    greedy = (selector * atoms).sum(dim=-1).argmax(dim=-1)
    chosen = _take(next_probs, greedy)
    discount = (gamma * (~terminated).to(rewards.dtype)).unsqueeze(-1)
    target_values = rewards.unsqueeze(-1) + discount * atoms
    return categorical_projection(target_values, chosen, v_min, v_max).detach()


def c51_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    target_probs: torch.Tensor,
) -> tuple[torch.Tensor, Metrics]:
    """C51 loss: cross-entropy ``-Σ_i Φ_i log p_θ(s, a)_i``, averaged over the batch.

    Args:
        logits: ``[B..., A, K]`` online logits at ``s``.
        actions: ``[B...]`` integer actions taken.
        target_probs: ``[B..., K]`` from :func:`categorical_q_learning_target` (detached here).

    Returns:
        ``(loss, metrics)`` with ``cross_entropy``.
    """
    _check_actions(actions, "logits", logits, 2)
    check_floating("target_probs", target_probs)
    expected = (*actions.shape, logits.shape[-1])
    if tuple(target_probs.shape) != expected:
        raise ValueError(f"target_probs: expected shape {expected}, got {tuple(target_probs.shape)}")
    log_probs = torch.log_softmax(_take(logits, actions), dim=-1)
    loss = -(target_probs.detach() * log_probs).sum(dim=-1).mean()
    return loss, {"cross_entropy": loss.detach()}


# --------------------------------------------------------------------------------------------
# QR-DQN
# --------------------------------------------------------------------------------------------


def quantile_q_learning_target(
    rewards: torch.Tensor,
    next_quantiles: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """QR-DQN target quantiles ``r + γ (1 - term) θ_target(s', a*)``, ``a* = argmax_a mean_j θ_j``.

    Args:
        rewards: ``[B...]``.
        next_quantiles: ``[B..., A, Q]`` target-network quantiles at ``s'``.
        terminated: ``[B...]`` bool.
        gamma: in [0, 1].

    Returns:
        ``[B..., Q]`` target quantile samples (detached).
    """
    _check_transitions(rewards, terminated, gamma)
    _check_per_action("next_quantiles", next_quantiles, "rewards", rewards, 2)
    greedy = next_quantiles.mean(dim=-1).argmax(dim=-1)
    chosen = _take(next_quantiles, greedy)
    discount = (gamma * (~terminated).to(rewards.dtype)).unsqueeze(-1)
    return (rewards.unsqueeze(-1) + discount * chosen).detach()


def quantile_huber_loss(
    quantiles: torch.Tensor,
    targets: torch.Tensor,
    huber_delta: Scalar = 1.0,
) -> torch.Tensor:
    """Quantile Huber loss (Dabney et al. 2017, QR-DQN, eq. 9-10), per sample.

    With midpoints ``τ̂_i = (2i + 1) / (2Q)`` and ``u_ij = targets_j - quantiles_i``:
    ``Σ_i mean_j |τ̂_i - 1{u_ij < 0}| L_δ(u_ij) / δ``, ``L_δ`` the Huber loss
    (``δ → 0`` approaches the plain quantile loss).

    Args:
        quantiles: ``[B..., Q]`` predicted quantiles (carry the gradient).
        targets: ``[B..., M]`` target samples (detached here).
        huber_delta: δ > 0.

    Returns:
        ``[B...]`` losses.
    """
    check_floating("quantiles", quantiles)
    check_floating("targets", targets)
    check_positive("huber_delta", huber_delta)
    if quantiles.shape[:-1] != targets.shape[:-1] or quantiles.dim() < 1:
        raise ValueError(
            f"targets: expected the batch shape {tuple(quantiles.shape[:-1])} of quantiles, "
            f"got {tuple(targets.shape)}"
        )
    num_quantiles = quantiles.shape[-1]
    tau = (2 * torch.arange(num_quantiles, dtype=quantiles.dtype, device=quantiles.device) + 1) / (
        2 * num_quantiles
    )
    errors = targets.detach().unsqueeze(-2) - quantiles.unsqueeze(-1)  # [B..., Q, M]
    huber = _huber(errors, huber_delta) / huber_delta
    weights = (tau.unsqueeze(-1) - (errors < 0).to(errors.dtype)).abs()
    return (weights * huber).mean(dim=-1).sum(dim=-1)


def qr_dqn_loss(
    quantiles: torch.Tensor,
    actions: torch.Tensor,
    target_quantiles: torch.Tensor,
    huber_delta: Scalar = 1.0,
) -> tuple[torch.Tensor, Metrics]:
    """QR-DQN loss: :func:`quantile_huber_loss` of the taken action's quantiles, batch mean.

    Args:
        quantiles: ``[B..., A, Q]`` online quantiles at ``s``.
        actions: ``[B...]`` integer actions.
        target_quantiles: ``[B..., M]`` from :func:`quantile_q_learning_target`.
        huber_delta: δ > 0.

    Returns:
        ``(loss, metrics)`` with ``q_taken`` (mean of the taken action's quantile means).
    """
    _check_actions(actions, "quantiles", quantiles, 2)
    check_floating("target_quantiles", target_quantiles)
    if target_quantiles.shape[:-1] != actions.shape or target_quantiles.dim() != actions.dim() + 1:
        raise ValueError(
            f"target_quantiles: expected shape {tuple(actions.shape)} + (M,), "
            f"got {tuple(target_quantiles.shape)}"
        )
    taken = _take(quantiles, actions)
    loss = quantile_huber_loss(taken, target_quantiles, huber_delta).mean()
    return loss, {"q_taken": taken.mean(dim=-1).mean().detach()}
