"""Input validation shared by every loss and value estimator.

Every check here is *static*: it reads shapes, dtypes and Python numbers, never a tensor's values,
so it costs nothing under ``torch.compile`` (dynamo evaluates it once while tracing) and works
under ``torch.func.vmap`` (where shapes are per-example). A value-range check on a tensor would
need a host sync (``.item()``), so tensors given for ``gamma``/``lmbda``/... are checked for dtype
and shape only; Python numbers are range-checked.

Conventions the checks enforce (documented once here, used by all losses):

* Float inputs (rewards, values, log-probs, advantages, ...) must be floating-point tensors. A
  ``bool`` or integer tensor passed where a float is expected is an error, not a silent cast.
* Episode flags (``terminated``, ``truncated``) must be ``bool`` tensors, as environments return
  them. A float 0/1 mask passed as a flag is an error: it is ambiguous (is 0.5 a flag?) and a
  common sign that ``1 - done`` was passed instead of ``done``.
* Float masks (``mask`` weights of a loss) must be floating-point; a ``bool`` mask must be
  converted by the caller (``mask.float()``), so that a flag is never mistaken for a weight.

All failures raise ``ValueError`` with the argument's name, what was expected and what came.
"""

from __future__ import annotations

import numbers

import torch

__all__ = [
    "check_tensor",
    "check_floating",
    "check_bool",
    "check_integer",
    "check_same_shape",
    "check_min_dim",
    "check_shape",
    "check_unit_interval",
    "check_nonnegative",
    "check_positive",
    "check_scalar_or_broadcastable",
    "check_weight",
    "check_ensemble",
    "check_choice",
]

Scalar = float | int | torch.Tensor


def check_tensor(name: str, x: object) -> None:
    """``x`` must be a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


def check_floating(name: str, x: object) -> None:
    """``x`` must be a floating-point tensor (a bool or integer tensor is refused, not cast)."""
    check_tensor(name, x)
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")


def check_bool(name: str, x: object) -> None:
    """``x`` must be a ``torch.bool`` tensor (an episode flag), not a float 0/1 mask."""
    check_tensor(name, x)
    if x.dtype != torch.bool:
        raise ValueError(
            f"{name}: expected a torch.bool tensor (episode flag), got dtype {x.dtype}; "
            f"pass flags as environments return them, e.g. `{name}.bool()`"
        )


def check_integer(name: str, x: object) -> None:
    """``x`` must be an integer tensor (e.g. discrete actions)."""
    check_tensor(name, x)
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise ValueError(f"{name}: expected an integer tensor, got dtype {x.dtype}")


def check_same_shape(reference_name: str, reference: torch.Tensor, **others: torch.Tensor) -> None:
    """Every tensor in ``others`` must have exactly ``reference``'s shape (no broadcasting)."""
    for name, x in others.items():
        check_tensor(name, x)
        if x.shape != reference.shape:
            raise ValueError(
                f"{name}: expected shape {tuple(reference.shape)} (the shape of {reference_name}), "
                f"got {tuple(x.shape)}"
            )


def check_min_dim(name: str, x: torch.Tensor, min_dim: int, what: str = "") -> None:
    """``x`` must have at least ``min_dim`` dimensions (e.g. 1 for time-major ``[T, ...]``)."""
    if x.dim() < min_dim:
        layout = f" ({what})" if what else ""
        raise ValueError(
            f"{name}: expected at least {min_dim} dimension(s){layout}, got shape {tuple(x.shape)}"
        )


def check_shape(name: str, x: torch.Tensor, shape: tuple[int, ...], what: str = "") -> None:
    """``x`` must have exactly ``shape``."""
    if tuple(x.shape) != tuple(shape):
        layout = f" ({what})" if what else ""
        raise ValueError(f"{name}: expected shape {tuple(shape)}{layout}, got {tuple(x.shape)}")


def _check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real | torch.Tensor):
        raise ValueError(f"{name}: expected a float or a floating-point tensor, got {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        check_floating(name, value)


def check_unit_interval(name: str, value: Scalar) -> None:
    """A Python number must lie in [0, 1]; a tensor must be floating (values unchecked: no sync)."""
    _check_number(name, value)
    if not isinstance(value, torch.Tensor) and not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name}: expected a value in [0, 1], got {value!r}")


def check_nonnegative(name: str, value: Scalar) -> None:
    """A Python number must be >= 0; a tensor must be floating (values unchecked: no sync)."""
    _check_number(name, value)
    if not isinstance(value, torch.Tensor) and not float(value) >= 0.0:
        raise ValueError(f"{name}: expected a value >= 0, got {value!r}")


def check_positive(name: str, value: Scalar) -> None:
    """A Python number must be > 0; a tensor must be floating (values unchecked: no sync)."""
    _check_number(name, value)
    if not isinstance(value, torch.Tensor) and not float(value) > 0.0:
        raise ValueError(f"{name}: expected a value > 0, got {value!r}")


def check_scalar_or_broadcastable(name: str, value: Scalar, target_name: str, target: torch.Tensor) -> None:
    """A tensor hyper-parameter must broadcast to ``target`` without enlarging it.

    This lets ``gamma`` be a per-environment ``[N]``-shaped tensor against ``[T, N]`` data, or a
    scalar tensor under ``vmap`` over a sweep, and refuses a shape that would silently broadcast
    the data to something bigger.
    """
    if not isinstance(value, torch.Tensor):
        return
    try:
        shape = torch.broadcast_shapes(value.shape, target.shape)
    except RuntimeError:
        shape = None
    if shape != target.shape:
        raise ValueError(
            f"{name}: expected a Python number or a tensor broadcastable to {tuple(target.shape)} "
            f"(the shape of {target_name}), got shape {tuple(value.shape)}"
        )


def check_weight(name: str, value: Scalar, like_name: str, like: torch.Tensor) -> None:
    """A loss weight or temperature: a Python number >= 0, or a float tensor broadcastable to ``like``."""
    check_nonnegative(name, value)
    check_scalar_or_broadcastable(name, value, like_name, like)


def check_ensemble(name: str, q_values: object, batch_name: str, batch: torch.Tensor) -> None:
    """``q_values`` must be a float ``[E, *batch.shape]`` ensemble (E critics over ``batch``'s shape)."""
    check_floating(name, q_values)
    if q_values.dim() != batch.dim() + 1 or q_values.shape[1:] != batch.shape:
        raise ValueError(
            f"{name}: expected shape [E, {', '.join(map(str, batch.shape))}] (an ensemble over the "
            f"shape of {batch_name}), got {tuple(q_values.shape)}"
        )


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """``value`` must be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
