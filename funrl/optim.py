"""Functional optimisers: optax-style ``(init, update)`` pairs with torch.optim's numerics.

An optimiser is a pair of pure functions (optax's ``GradientTransformation``)::

    opt = funrl.optim.adam(3e-4)
    state = opt.init(params)                              # a NamedTuple of tensors
    updates, state = opt.update(grads, state, params)     # nothing is mutated
    params = funrl.optim.apply_updates(params, updates)   # optax sign: params + updates

Every state holds its step ``count`` as an int64 scalar tensor, so learning-rate schedules and
Adam's bias correction are tensor arithmetic: no host sync, and the same code runs eagerly, under
``torch.func.vmap`` (ensembles, seeds, per-member learning rates) and inside ``torch.compile``.

Numerics follow torch.optim wherever it has a counterpart -- Adam's bias correction, AdamW's
decoupled decay ``lr * weight_decay``, RMSprop's ``eps`` outside the square root, SGD's
dampening / Nesterov and first-step momentum buffer, ``clip_grad_norm_``'s ``1e-6`` -- so a
functional run tracks the stateful one step for step (``tests/test_optim.py`` checks 200 steps).

``learning_rate`` is a float, a 0-dim floating tensor, or a schedule ``count -> learning rate``.
A tensor rate made inside a vmapped function gives every ensemble member its own rate::

    def train_member(params, grads, lr):
        opt = funrl.optim.adam(lr)                        # lr: this member's 0-dim rate
        updates, state = opt.update(grads, opt.init(params), params)
        return funrl.optim.apply_updates(params, updates), state

    torch.func.vmap(train_member)(stacked_params, stacked_grads, torch.tensor([1e-3, 3e-4]))

``inject_hyperparams(adam)(learning_rate=...)`` keeps the numeric hyper-parameters in the state
instead, as optax does, so a train state can carry them: anneal one with ``state._replace`` or
vmap over states that hold different values; a compiled update sees data, not constants.

Each update is plain torch arithmetic, leaf by leaf, so the one code path runs eagerly, under
every ``torch.func`` transform and inside ``torch.compile`` (where inductor fuses the leaves).

References: optax (``optax/_src/base.py``, ``transform.py``, ``alias.py``) for the shape of the
API and the schedules; torch.optim (``adam.py``, ``sgd.py``, ``rmsprop.py``) for the equations.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import optree
import torch

from funrl import tree

__all__ = [
    "Optimizer",
    "GradientTransformation",
    "Schedule",
    "EmptyState",
    "ScaleByScheduleState",
    "SgdState",
    "AdamState",
    "RmsPropState",
    "InjectHyperparamsState",
    "apply_updates",
    "global_norm",
    "chain",
    "scale",
    "scale_by_schedule",
    "scale_by_learning_rate",
    "scale_by_adam",
    "add_decayed_weights",
    "clip_by_global_norm",
    "sgd",
    "adam",
    "adamw",
    "rmsprop",
    "inject_hyperparams",
    "value_and_grad_step",
    "constant_schedule",
    "linear_schedule",
    "cosine_decay_schedule",
    "warmup_cosine_decay_schedule",
    "piecewise_constant_schedule",
    "join_schedules",
]

Params = Any
Updates = Any
OptState = Any
Scalar = float | torch.Tensor
Schedule = Callable[[torch.Tensor], Scalar]
LearningRate = float | torch.Tensor | Schedule


class Optimizer(NamedTuple):
    """A pair of pure functions (optax's ``GradientTransformation``).

    ``init(params) -> state``; ``update(updates, state, params=None) -> (updates, state)``. The
    incoming ``updates`` are gradients for the first transformation of a chain.
    """

    init: Callable[[Params], OptState]
    update: Callable[..., tuple[Updates, OptState]]


GradientTransformation = Optimizer


class EmptyState(NamedTuple):
    """State of a stateless transformation, and the stand-in for a buffer an optimiser does not
    keep (``torch.func.vmap`` outputs may not contain ``None``)."""


class ScaleByScheduleState(NamedTuple):
    count: torch.Tensor  # int64 [], updates applied so far


class SgdState(NamedTuple):
    count: torch.Tensor  # int64 []
    momentum: Params | EmptyState  # torch's ``momentum_buffer``s; EmptyState() without momentum


class AdamState(NamedTuple):
    count: torch.Tensor  # int64 []
    mu: Params  # first moment (torch's ``exp_avg``)
    nu: Params  # second moment (torch's ``exp_avg_sq``)


class RmsPropState(NamedTuple):
    count: torch.Tensor  # int64 []
    square_avg: Params
    grad_avg: Params | EmptyState  # running mean of gradients if ``centered``, else EmptyState()
    momentum: Params | EmptyState  # momentum buffers if ``momentum > 0``, else EmptyState()


# --------------------------------------------------------------------------------------------
# Input checks (static: structure, types, dtypes; never a value read from a tensor)


def _tensor_leaves(values: Any, name: str) -> tuple[list[torch.Tensor], optree.PyTreeSpec]:
    """Flatten ``values``; raise TypeError naming ``name`` unless every leaf is a floating tensor."""
    try:
        leaves, spec = tree.flatten(values)
    except Exception as err:  # optree refuses some objects outright
        raise TypeError(f"{name}: expected a pytree of tensors, got {type(values).__name__}") from err
    if all(isinstance(leaf, torch.Tensor) and leaf.dtype.is_floating_point for leaf in leaves):
        return leaves, spec
    # Slow path, errors only: find the offending leaf and its path.
    for path, leaf in zip(optree.tree_paths(values, namespace="funrl"), leaves, strict=True):
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(
                f"{name}: expected a pytree of floating-point tensors, got a "
                f"{type(leaf).__name__} leaf at path {path}"
            )
        if not leaf.dtype.is_floating_point:
            raise TypeError(
                f"{name}: expected floating-point tensor leaves, got dtype {leaf.dtype} at path {path}"
            )
    raise AssertionError("unreachable: some leaf failed the check above")


def _check_structure(expected: optree.PyTreeSpec, values: Any, name: str) -> list[torch.Tensor]:
    leaves, spec = _tensor_leaves(values, name)
    if spec != expected:
        raise ValueError(f"{name}: expected tree structure {expected}, got {spec}")
    return leaves


def _check_params(params: Any, expected: optree.PyTreeSpec, needed_for: str) -> list[torch.Tensor]:
    if params is None:
        raise ValueError(f"params: {needed_for} needs the current params, got None")
    return _check_structure(expected, params, "params")


def _check_state(state: Any, state_type: type, name: str = "state") -> None:
    if not isinstance(state, state_type):
        raise TypeError(f"{name}: expected {state_type.__name__}, got {type(state).__name__}")


def _check_hyper(
    value: Any, name: str, low: float, high: float = math.inf, high_open: bool = False
) -> Scalar:
    """Validate a float hyper-parameter in ``[low, high]`` (``[low, high)`` if ``high_open``).

    A 0-dim floating tensor is accepted as it is (``inject_hyperparams`` passes them): its value
    is data that may change between calls, so only its shape and dtype are checked here.
    """
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.dtype.is_floating_point:
            raise TypeError(
                f"{name}: expected a float or a 0-dim floating tensor, got a tensor of shape "
                f"{tuple(value.shape)} and dtype {value.dtype}"
            )
        return value
    return _check_float(value, name, low, high, high_open, "a float or a 0-dim floating tensor")


def _check_float(
    value: Any,
    name: str,
    low: float,
    high: float = math.inf,
    high_open: bool = False,
    expected: str = "a float",
) -> float:
    """Validate a float in ``[low, high]`` (``[low, high)`` if ``high_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")
    value = float(value)
    in_range = low <= value < high if high_open else low <= value <= high
    if not in_range:
        bracket = ")" if high_open else "]"
        raise ValueError(f"{name}: expected a value in [{low}, {high}{bracket}, got {value}")
    return value


def _is_on(value: Scalar) -> bool:
    """Whether an optional term (weight decay, momentum) is part of the update.

    A tensor may hold any value at a later step, so its term is always there.
    """
    return isinstance(value, torch.Tensor) or value != 0.0


def _as_schedule(learning_rate: LearningRate, name: str = "learning_rate") -> Schedule:
    """Turn a float, 0-dim tensor or schedule into a function of the step count."""
    if isinstance(learning_rate, torch.Tensor):
        if not learning_rate.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating-point tensor, got dtype {learning_rate.dtype}")
        if learning_rate.dim() != 0:
            raise ValueError(
                f"{name}: expected a 0-dim tensor, got shape {tuple(learning_rate.shape)}; for one "
                "rate per ensemble member build the optimiser inside torch.func.vmap"
            )
        return lambda count: learning_rate
    if callable(learning_rate):
        return learning_rate
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
        raise TypeError(
            f"{name}: expected a float, a 0-dim tensor or a schedule callable, "
            f"got {type(learning_rate).__name__}"
        )
    if not math.isfinite(learning_rate) or learning_rate < 0:
        raise ValueError(f"{name}: expected a finite value >= 0, got {learning_rate}")
    constant = float(learning_rate)
    return lambda count: constant


def _zero_count(leaves: Sequence[torch.Tensor]) -> torch.Tensor:
    device = leaves[0].device if leaves else torch.device("cpu")
    return torch.zeros((), dtype=torch.int64, device=device)


def _zeros_like(leaves: Sequence[torch.Tensor], spec: optree.PyTreeSpec) -> Params:
    return tree.unflatten(spec, [torch.zeros_like(x) for x in leaves])


def _scalar_dtype(leaves: Sequence[torch.Tensor]) -> torch.dtype:
    """Precision for per-step scalars (bias corrections): float64 if any leaf is, else float32."""
    return torch.float64 if any(x.dtype == torch.float64 for x in leaves) else torch.float32


# --------------------------------------------------------------------------------------------
# The equations, one tensor at a time; updates map them over the leaves.


def _moving_average(average: torch.Tensor, value: torch.Tensor, decay: Scalar) -> torch.Tensor:
    """``decay * average + (1 - decay) * value``, as torch.optim's ``lerp_(value, 1 - decay)``."""
    return torch.lerp(average, value, 1 - decay)


def _moving_average_of_square(average: torch.Tensor, value: torch.Tensor, decay: Scalar) -> torch.Tensor:
    """``decay * average + (1 - decay) * value^2`` (Adam's and RMSprop's second moment)."""
    return average * decay + (1 - decay) * value * value


def _bias_correction(beta: Scalar, step: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - beta ** step`` as ``-expm1(step * log(beta))``: accurate to an ulp even in float32.

    The direct form loses digits when ``beta`` is close to 1 (``1 - 0.999`` in float32 is off by
    1e-5 relative), which would break agreement with torch.optim's double-precision host scalars.
    A float ``beta`` takes its logarithm in double precision; ``beta = 0`` gives ``log = -inf``
    and a correction of 1, since ``step >= 1``.
    """
    if isinstance(beta, torch.Tensor):
        log_beta = torch.log(beta)
    else:
        log_beta = math.log(beta) if beta > 0.0 else -math.inf
    return -torch.expm1(step.to(dtype) * log_beta)


# --------------------------------------------------------------------------------------------
# Applying updates, norms, composition


def apply_updates(params: Params, updates: Updates) -> Params:
    """``params + updates`` leaf-wise (optax's sign convention), keeping each param's dtype.

    Raises ValueError if ``updates`` has a different tree structure than ``params`` and TypeError
    for a leaf that is not a floating-point tensor.
    """
    param_leaves, spec = _tensor_leaves(params, "params")
    update_leaves = _check_structure(spec, updates, "updates")
    for i, (p, u) in enumerate(zip(param_leaves, update_leaves, strict=True)):
        if p.shape != u.shape:
            raise ValueError(f"updates: expected shape {tuple(p.shape)} for leaf {i}, got {tuple(u.shape)}")
    return tree.unflatten(spec, [p + u.to(p.dtype) for p, u in zip(param_leaves, update_leaves, strict=True)])


def global_norm(updates: Updates) -> torch.Tensor:
    """The 2-norm of all leaves viewed as one vector (the norm of the per-leaf norms, as torch)."""
    leaves, _ = _tensor_leaves(updates, "updates")
    if not leaves:
        raise ValueError("updates: expected at least one tensor leaf")
    norms = [torch.linalg.vector_norm(x, 2.0) for x in leaves]
    return torch.linalg.vector_norm(torch.stack(norms), 2.0)


def chain(*transforms: Optimizer) -> Optimizer:
    """Compose transformations left to right; the state is the tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, Optimizer):
            raise TypeError(f"transforms[{i}]: expected an Optimizer, got {type(t).__name__}")

    def init(params: Params) -> tuple[OptState, ...]:
        return tuple(t.init(params) for t in transforms)

    def update(
        updates: Updates, state: tuple[OptState, ...], params: Params | None = None
    ) -> tuple[Updates, tuple[OptState, ...]]:
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(
                f"state: expected a tuple of {len(transforms)} states (one per transform), "
                f"got {type(state).__name__}"
                + (f" of length {len(state)}" if isinstance(state, tuple) else "")
            )
        new_states = []
        for t, s in zip(transforms, state, strict=True):
            updates, s = t.update(updates, s, params)
            new_states.append(s)
        return updates, tuple(new_states)

    return Optimizer(init, update)


def _empty_init(params: Params) -> EmptyState:
    _tensor_leaves(params, "params")
    return EmptyState()


def scale(step_size: Scalar) -> Optimizer:
    """Multiply updates by a constant ``step_size`` (a float or a 0-dim floating tensor)."""
    step_size = _check_hyper(step_size, "step_size", -math.inf)

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        return tree.unflatten(spec, [u * step_size for u in leaves]), state

    return Optimizer(_empty_init, update)


def scale_by_schedule(step_size_fn: Schedule) -> Optimizer:
    """Multiply updates by ``step_size_fn(count)``; ``count`` (int64 tensor) starts at 0."""
    if not callable(step_size_fn):
        raise TypeError(
            f"step_size_fn: expected a callable count -> scale, got {type(step_size_fn).__name__}"
        )

    def init(params: Params) -> ScaleByScheduleState:
        leaves, _ = _tensor_leaves(params, "params")
        return ScaleByScheduleState(count=_zero_count(leaves))

    def update(
        updates: Updates, state: ScaleByScheduleState, params: Params | None = None
    ) -> tuple[Updates, ScaleByScheduleState]:
        _check_state(state, ScaleByScheduleState)
        leaves, spec = _tensor_leaves(updates, "updates")
        factor = step_size_fn(state.count)
        return tree.unflatten(spec, [u * factor for u in leaves]), ScaleByScheduleState(count=state.count + 1)

    return Optimizer(init, update)


def scale_by_learning_rate(learning_rate: LearningRate) -> Optimizer:
    """Multiply updates by ``-learning_rate`` (a descent step); a schedule gets a step count."""
    if callable(learning_rate) and not isinstance(learning_rate, torch.Tensor):
        return scale_by_schedule(lambda count: -learning_rate(count))
    lr = _as_schedule(learning_rate)(None)
    return scale(-lr)


def add_decayed_weights(weight_decay: Scalar) -> Optimizer:
    """``updates + weight_decay * params`` (L2 regularisation folded into the gradient)."""
    weight_decay = _check_hyper(weight_decay, "weight_decay", 0.0)

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        param_leaves = _check_params(params, spec, "add_decayed_weights")
        return tree.unflatten(
            spec, [u + weight_decay * p for u, p in zip(leaves, param_leaves, strict=True)]
        ), state

    return Optimizer(_empty_init, update)


def clip_by_global_norm(max_norm: Scalar) -> Optimizer:
    """Scale updates by ``min(max_norm / (global_norm + 1e-6), 1)``, as ``clip_grad_norm_``.

    The ``1e-6`` is torch's (optax's version omits it); the factor is a tensor, so no host sync.
    """
    max_norm = _check_hyper(max_norm, "max_norm", 0.0)
    if not isinstance(max_norm, torch.Tensor) and max_norm == 0.0:
        raise ValueError("max_norm: expected a value > 0, got 0.0")

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        if not leaves:
            return updates, state
        factor = torch.clamp(max_norm / (global_norm(updates) + 1e-6), max=1.0)
        return tree.unflatten(spec, [u * factor for u in leaves]), state

    return Optimizer(_empty_init, update)


# --------------------------------------------------------------------------------------------
# Optimisers with torch.optim counterparts


def sgd(
    learning_rate: LearningRate,
    momentum: Scalar = 0.0,
    dampening: Scalar = 0.0,
    nesterov: bool = False,
    weight_decay: Scalar = 0.0,
) -> Optimizer:
    """Stochastic gradient descent as ``torch.optim.SGD`` (same arguments, same equations).

    ``g = grad + weight_decay * param``; with momentum ``buf = g`` on the first step, then
    ``buf = momentum * buf + (1 - dampening) * g``; the step is ``g + momentum * buf`` (Nesterov)
    or ``buf``; the update is ``-lr * step``. Sutskever et al. 2013 for Nesterov's form.
    """
    lr_fn = _as_schedule(learning_rate)
    momentum = _check_hyper(momentum, "momentum", 0.0)
    dampening = _check_hyper(dampening, "dampening", 0.0, 1.0)
    weight_decay = _check_hyper(weight_decay, "weight_decay", 0.0)
    if nesterov and not (_is_on(momentum) and (isinstance(dampening, torch.Tensor) or dampening == 0.0)):
        raise ValueError(
            f"nesterov: requires momentum > 0 and dampening == 0, got momentum={momentum}, "
            f"dampening={dampening}"
        )

    def init(params: Params) -> SgdState:
        leaves, spec = _tensor_leaves(params, "params")
        buffers = _zeros_like(leaves, spec) if _is_on(momentum) else EmptyState()
        return SgdState(count=_zero_count(leaves), momentum=buffers)

    def update(grads: Updates, state: SgdState, params: Params | None = None) -> tuple[Updates, SgdState]:
        _check_state(state, SgdState)
        if _is_on(momentum):
            buf, spec = _tensor_leaves(state.momentum, "state.momentum")
            g = _check_structure(spec, grads, "grads")
        else:
            g, spec = _tensor_leaves(grads, "grads")
        if _is_on(weight_decay):
            param_leaves = _check_params(params, spec, "weight_decay")
            g = [gi + weight_decay * p for gi, p in zip(g, param_leaves, strict=True)]
        lr = lr_fn(state.count)
        if not _is_on(momentum):
            return tree.unflatten(spec, [gi * -lr for gi in g]), SgdState(state.count + 1, EmptyState())
        # torch starts the buffer at the raw gradient, undamped.
        first = state.count == 0
        buf = [
            torch.where(first, gi, b * momentum + gi * (1 - dampening)) for b, gi in zip(buf, g, strict=True)
        ]
        if nesterov:
            steps = [(gi + momentum * b) * -lr for gi, b in zip(g, buf, strict=True)]
        else:
            steps = [b * -lr for b in buf]
        return tree.unflatten(spec, steps), SgdState(state.count + 1, tree.unflatten(spec, buf))

    return Optimizer(init, update)


def _adam_family(
    learning_rate: LearningRate | None,
    b1: Scalar,
    b2: Scalar,
    eps: Scalar,
    weight_decay: Scalar,
    decoupled: bool,
) -> Optimizer:
    """Adam's moments and bias-corrected step; ``learning_rate=None`` gives the unscaled direction."""
    lr_fn = None if learning_rate is None else _as_schedule(learning_rate)
    b1 = _check_hyper(b1, "b1", 0.0, 1.0, high_open=True)
    b2 = _check_hyper(b2, "b2", 0.0, 1.0, high_open=True)
    eps = _check_hyper(eps, "eps", 0.0)
    weight_decay = _check_hyper(weight_decay, "weight_decay", 0.0)

    def init(params: Params) -> AdamState:
        leaves, spec = _tensor_leaves(params, "params")
        return AdamState(
            count=_zero_count(leaves), mu=_zeros_like(leaves, spec), nu=_zeros_like(leaves, spec)
        )

    def update(grads: Updates, state: AdamState, params: Params | None = None) -> tuple[Updates, AdamState]:
        _check_state(state, AdamState)
        mu, spec = _tensor_leaves(state.mu, "state.mu")
        nu = _check_structure(spec, state.nu, "state.nu")
        g = _check_structure(spec, grads, "grads")
        param_leaves = _check_params(params, spec, "weight_decay") if _is_on(weight_decay) else None
        if _is_on(weight_decay) and not decoupled:
            g = [gi + weight_decay * p for gi, p in zip(g, param_leaves, strict=True)]
        mu = [_moving_average(m, gi, b1) for m, gi in zip(mu, g, strict=True)]
        nu = [_moving_average_of_square(v, gi, b2) for v, gi in zip(nu, g, strict=True)]
        step = state.count + 1
        dtype = _scalar_dtype(g)
        correction1 = _bias_correction(b1, step, dtype)
        correction2_sqrt = _bias_correction(b2, step, dtype).sqrt()
        factor = 1 / correction1 if lr_fn is None else -lr_fn(state.count) / correction1
        updates = [m / (v.sqrt() / correction2_sqrt + eps) * factor for m, v in zip(mu, nu, strict=True)]
        if _is_on(weight_decay) and decoupled:
            # AdamW (Loshchilov & Hutter 2019): torch multiplies param by the factor
            # 1 - lr * weight_decay, rounded to the param dtype; p * factor - p is exact
            # (Sterbenz), so params + updates reproduces that rounding.
            keep = 1 - weight_decay * lr_fn(state.count)
            updates = [u + (p * keep - p) for u, p in zip(updates, param_leaves, strict=True)]
        new_state = AdamState(count=step, mu=tree.unflatten(spec, mu), nu=tree.unflatten(spec, nu))
        return tree.unflatten(spec, updates), new_state

    return Optimizer(init, update)


def scale_by_adam(b1: Scalar = 0.9, b2: Scalar = 0.999, eps: Scalar = 1e-8) -> Optimizer:
    """Rescale updates to Adam's bias-corrected ``m_hat / (sqrt(v_hat) + eps)`` (no learning rate).

    Kingma & Ba 2015, Algorithm 1, with ``eps`` placed as torch.optim.Adam places it.
    """
    return _adam_family(None, b1, b2, eps, 0.0, decoupled=False)


def adam(
    learning_rate: LearningRate,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 0.0,
) -> Optimizer:
    """Adam as ``torch.optim.Adam(lr, betas=(b1, b2), eps, weight_decay)`` (L2 weight decay).

    ``m = lerp(m, g, 1 - b1)``, ``v = b2 v + (1 - b2) g^2``, update
    ``-lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``. Kingma & Ba 2015.
    """
    return _adam_family(learning_rate, b1, b2, eps, weight_decay, decoupled=False)


def adamw(
    learning_rate: LearningRate,
    b1: Scalar = 0.9,
    b2: Scalar = 0.999,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 1e-2,
) -> Optimizer:
    """AdamW as ``torch.optim.AdamW`` (default ``weight_decay=1e-2`` as torch, not optax's 1e-4).

    Adam's update plus the decoupled decay ``-lr * weight_decay * param``. Loshchilov & Hutter 2019.
    """
    return _adam_family(learning_rate, b1, b2, eps, weight_decay, decoupled=True)


def rmsprop(
    learning_rate: LearningRate,
    alpha: Scalar = 0.99,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 0.0,
    momentum: Scalar = 0.0,
    centered: bool = False,
) -> Optimizer:
    """RMSprop as ``torch.optim.RMSprop`` (torch's defaults and ``eps`` outside the square root).

    ``v = alpha v + (1 - alpha) g^2``; centered: ``a = lerp(a, g, 1 - alpha)``, ``v - a^2`` under
    the root; ``avg = sqrt(.) + eps``; with momentum ``buf = momentum buf + g / avg`` and update
    ``-lr buf``, else ``-lr g / avg``. Tieleman & Hinton 2012; Graves 2013 for the centered form.
    """
    lr_fn = _as_schedule(learning_rate)
    alpha = _check_hyper(alpha, "alpha", 0.0, 1.0)
    eps = _check_hyper(eps, "eps", 0.0)
    weight_decay = _check_hyper(weight_decay, "weight_decay", 0.0)
    momentum = _check_hyper(momentum, "momentum", 0.0)

    def init(params: Params) -> RmsPropState:
        leaves, spec = _tensor_leaves(params, "params")
        return RmsPropState(
            count=_zero_count(leaves),
            square_avg=_zeros_like(leaves, spec),
            grad_avg=_zeros_like(leaves, spec) if centered else EmptyState(),
            momentum=_zeros_like(leaves, spec) if _is_on(momentum) else EmptyState(),
        )

    def update(
        grads: Updates, state: RmsPropState, params: Params | None = None
    ) -> tuple[Updates, RmsPropState]:
        _check_state(state, RmsPropState)
        square_avg, spec = _tensor_leaves(state.square_avg, "state.square_avg")
        g = _check_structure(spec, grads, "grads")
        if _is_on(weight_decay):
            param_leaves = _check_params(params, spec, "weight_decay")
            g = [gi + weight_decay * p for gi, p in zip(g, param_leaves, strict=True)]
        square_avg = [_moving_average_of_square(v, gi, alpha) for v, gi in zip(square_avg, g, strict=True)]
        new_grad_avg = EmptyState()
        if centered:
            grad_avg = _check_structure(spec, state.grad_avg, "state.grad_avg")
            grad_avg = [_moving_average(a, gi, alpha) for a, gi in zip(grad_avg, g, strict=True)]
            new_grad_avg = tree.unflatten(spec, grad_avg)
            variance = [v - a * a for v, a in zip(square_avg, grad_avg, strict=True)]
        else:
            variance = square_avg
        avg = [v.sqrt() + eps for v in variance]
        lr = lr_fn(state.count)
        new_buffers = EmptyState()
        if _is_on(momentum):
            buf = _check_structure(spec, state.momentum, "state.momentum")
            buf = [b * momentum + gi / a for b, gi, a in zip(buf, g, avg, strict=True)]
            new_buffers = tree.unflatten(spec, buf)
            updates = [b * -lr for b in buf]
        else:
            updates = [gi / a * -lr for gi, a in zip(g, avg, strict=True)]
        new_state = RmsPropState(
            count=state.count + 1,
            square_avg=tree.unflatten(spec, square_avg),
            grad_avg=new_grad_avg,
            momentum=new_buffers,
        )
        return tree.unflatten(spec, updates), new_state

    return Optimizer(init, update)


# --------------------------------------------------------------------------------------------
# Hyper-parameters as state


class InjectHyperparamsState(NamedTuple):
    hyperparams: dict[str, torch.Tensor]  # float32 [] per numeric argument given to the factory
    inner_state: OptState  # the state of the transformation the factory builds


def _is_numeric(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and value.dtype.is_floating_point
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def inject_hyperparams(
    factory: Callable[..., Optimizer], static_args: Sequence[str] = ()
) -> Callable[..., Optimizer]:
    """Wrap an optimiser ``factory`` so that its numeric arguments live in the state, as optax's.

    ::

        opt = inject_hyperparams(adam)(learning_rate=2.5e-4, eps=1e-5)
        state = opt.init(params)          # InjectHyperparamsState(hyperparams, inner_state)
        state = state._replace(hyperparams={**state.hyperparams, "learning_rate": new_lr})

    The numeric arguments given (ints, floats, 0-dim floating tensors, except the names in
    ``static_args``) become float32 0-dim tensors on the params' device at ``init``; arguments
    left at their defaults, schedules, bools and other objects stay static. ``update`` rebuilds
    the inner transformation from the state's tensors, so annealing a value, or one value per
    seed under ``torch.func.vmap``, changes data only: a compiled update does not recompile.
    The values are checked once, eagerly, by calling ``factory`` with them; later values are
    data and are not checked.
    """
    if not callable(factory):
        raise TypeError(f"factory: expected a callable returning an Optimizer, got {type(factory).__name__}")
    signature = inspect.signature(factory)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        raise TypeError(f"factory: expected named arguments only, got {factory.__name__}{signature}")
    unknown = set(static_args) - set(signature.parameters)
    if unknown:
        raise ValueError(
            f"static_args: expected names of {factory.__name__}'s arguments, got {sorted(unknown)}"
        )

    def make(*args: Any, **kwargs: Any) -> Optimizer:
        factory(*args, **kwargs)  # the factory's own errors for bad arguments, once and eagerly
        arguments = signature.bind(*args, **kwargs).arguments
        numeric = {k: v for k, v in arguments.items() if k not in static_args and _is_numeric(v)}
        static = {k: v for k, v in arguments.items() if k not in numeric}

        def init(params: Params) -> InjectHyperparamsState:
            leaves, _ = _tensor_leaves(params, "params")
            device = leaves[0].device if leaves else None
            hyperparams = {
                k: torch.as_tensor(v, dtype=torch.float32, device=device) for k, v in numeric.items()
            }
            return InjectHyperparamsState(hyperparams, factory(**static, **hyperparams).init(params))

        def update(
            updates: Updates, state: InjectHyperparamsState, params: Params | None = None
        ) -> tuple[Updates, InjectHyperparamsState]:
            _check_state(state, InjectHyperparamsState)
            if not isinstance(state.hyperparams, dict) or set(state.hyperparams) != set(numeric):
                got = sorted(state.hyperparams) if isinstance(state.hyperparams, dict) else state.hyperparams
                raise ValueError(f"state.hyperparams: expected the keys {sorted(numeric)}, got {got}")
            inner = factory(**static, **state.hyperparams)
            updates, inner_state = inner.update(updates, state.inner_state, params)
            return updates, InjectHyperparamsState(state.hyperparams, inner_state)

        return Optimizer(init, update)

    return make


def value_and_grad_step(
    loss_fn: Callable[..., Any], optimizer: Optimizer, has_aux: bool = False
) -> Callable[..., tuple[Params, OptState, Any]]:
    """``step(params, opt_state, *args) -> (params, opt_state, value)``: one gradient step.

    ``value`` is ``loss_fn(params, *args)`` -- ``(loss, aux)`` when ``has_aux`` -- at the old
    params. Pure, so it vmaps and compiles like its parts.
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizer: expected an Optimizer, got {type(optimizer).__name__}")
    grad_and_value = torch.func.grad_and_value(loss_fn, has_aux=has_aux)

    def step(params: Params, opt_state: OptState, *args: Any, **kwargs: Any) -> tuple[Params, OptState, Any]:
        grads, value = grad_and_value(params, *args, **kwargs)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return apply_updates(params, updates), opt_state, value

    return step


# --------------------------------------------------------------------------------------------
# Schedules: count (int64 tensor, 0 on the first step) -> float32 tensor


def _check_steps(value: Any, name: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name}: expected an int {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def _check_count(count: Any) -> torch.Tensor:
    if isinstance(count, bool):
        raise TypeError("count: expected an integer step count, got bool")
    if isinstance(count, int):
        return torch.tensor(count, dtype=torch.int64)
    if not isinstance(count, torch.Tensor) or count.dtype.is_floating_point or count.dtype == torch.bool:
        raise TypeError(
            f"count: expected an integer tensor or int, got {getattr(count, 'dtype', type(count))}"
        )
    return count


def _finite(value: Any, name: str) -> float:
    return _check_float(value, name, -math.inf)


def constant_schedule(value: float) -> Schedule:
    """``value`` at every step."""
    value = _finite(value, "value")

    def schedule(count: torch.Tensor) -> torch.Tensor:
        count = _check_count(count)
        return torch.full(count.shape, value, dtype=torch.float32, device=count.device)

    return schedule


def linear_schedule(
    init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
) -> Schedule:
    """Hold ``init_value`` for ``transition_begin`` steps, move linearly to ``end_value`` over
    ``transition_steps`` steps, then hold it (optax's ``linear_schedule``; torch's ``LinearLR``)."""
    init_value = _finite(init_value, "init_value")
    end_value = _finite(end_value, "end_value")
    transition_steps = _check_steps(transition_steps, "transition_steps")
    transition_begin = _check_steps(transition_begin, "transition_begin", allow_zero=True)

    def schedule(count: torch.Tensor) -> torch.Tensor:
        count = _check_count(count)
        done = torch.clamp(count - transition_begin, 0, transition_steps).to(torch.float32)
        return init_value + (end_value - init_value) * (done / transition_steps)

    return schedule


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> Schedule:
    """``init_value * ((1 - alpha) * c^exponent + alpha)``, ``c = (1 + cos(pi t / decay_steps)) / 2``
    for ``t = min(count, decay_steps)`` (Loshchilov & Hutter 2017; optax's ``cosine_decay_schedule``;
    torch's ``CosineAnnealingLR`` with ``eta_min = alpha * init_value`` up to ``T_max``)."""
    init_value = _finite(init_value, "init_value")
    decay_steps = _check_steps(decay_steps, "decay_steps")
    alpha = _check_float(alpha, "alpha", 0.0, 1.0)
    exponent = _check_float(exponent, "exponent", 0.0)

    def schedule(count: torch.Tensor) -> torch.Tensor:
        count = _check_count(count)
        remaining = (decay_steps - torch.clamp(count, 0, decay_steps)).to(torch.float32) / decay_steps
        # (1 + cos(pi t / T)) / 2 == sin(pi (T - t) / (2 T))^2: no cancellation near the end, and
        # sin is well conditioned on [0, pi/2], so float32 keeps its precision throughout.
        cosine = torch.sin(remaining * (math.pi / 2)) ** 2
        return init_value * ((1 - alpha) * cosine**exponent + alpha)

    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """Run ``schedules[i]`` from ``boundaries[i-1]`` on, with its count restarted at 0 there."""
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(
            f"boundaries: expected {len(schedules) - 1} boundaries for {len(schedules)} schedules, "
            f"got {len(boundaries)}"
        )
    for i, s in enumerate(schedules):
        if not callable(s):
            raise TypeError(f"schedules[{i}]: expected a callable, got {type(s).__name__}")
    boundaries = [_check_steps(b, f"boundaries[{i}]", allow_zero=True) for i, b in enumerate(boundaries)]
    if any(b1 > b2 for b1, b2 in zip(boundaries[:-1], boundaries[1:], strict=True)):
        raise ValueError(f"boundaries: expected a non-decreasing sequence, got {boundaries}")

    def schedule(count: torch.Tensor) -> torch.Tensor:
        count = _check_count(count)
        value = torch.as_tensor(schedules[0](count), dtype=torch.float32, device=count.device)
        for boundary, later in zip(boundaries, schedules[1:], strict=True):
            value = torch.where(count >= boundary, later(count - boundary), value)
        return value

    return schedule


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> Schedule:
    """Linear warm-up from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine
    decay to ``end_value`` at ``decay_steps`` (the total, warm-up included), as optax."""
    peak_value = _finite(peak_value, "peak_value")
    end_value = _finite(end_value, "end_value")
    warmup_steps = _check_steps(warmup_steps, "warmup_steps", allow_zero=True)
    decay_steps = _check_steps(decay_steps, "decay_steps")
    if decay_steps <= warmup_steps:
        raise ValueError(f"decay_steps: expected more than warmup_steps={warmup_steps}, got {decay_steps}")
    unit_cosine = cosine_decay_schedule(1.0, decay_steps - warmup_steps, 0.0, exponent)
    # optax's cosine_decay(peak, alpha=end/peak), written so that peak_value may be 0.
    decay = lambda count: end_value + (peak_value - end_value) * unit_cosine(count)
    if warmup_steps == 0:
        return decay
    warmup = linear_schedule(init_value, peak_value, warmup_steps)
    return join_schedules([warmup, decay], [warmup_steps])


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: Mapping[int, float]) -> Schedule:
    """``init_value`` times every ``scale`` whose boundary ``count`` has reached (optax; torch's
    ``MultiStepLR`` with ``{milestone: gamma}``)."""
    init_value = _finite(init_value, "init_value")
    if not isinstance(boundaries_and_scales, Mapping):
        raise TypeError(
            "boundaries_and_scales: expected a mapping step -> scale, "
            f"got {type(boundaries_and_scales).__name__}"
        )
    items = sorted(
        (
            _check_steps(b, "boundaries_and_scales key", allow_zero=True),
            _finite(s, "boundaries_and_scales value"),
        )
        for b, s in boundaries_and_scales.items()
    )

    def schedule(count: torch.Tensor) -> torch.Tensor:
        count = _check_count(count)
        value = torch.full(count.shape, init_value, dtype=torch.float32, device=count.device)
        for boundary, factor in items:
            value = torch.where(count >= boundary, value * factor, value)
        return value

    return schedule
