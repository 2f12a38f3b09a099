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

Eager updates use ``torch._foreach_*`` kernels (one call for all leaves). Those kernels have no
``vmap`` batching rule, so inside any ``torch.func`` transform, and while ``torch.compile`` traces
(inductor fuses the per-leaf ops itself), the same equations run leaf by leaf.

``learning_rate`` is a float, a 0-dim floating tensor, or a schedule ``count -> learning rate``.
A tensor rate made inside a vmapped function gives every ensemble member its own rate::

    def train_member(params, grads, lr):
        opt = funrl.optim.adam(lr)                        # lr: this member's 0-dim rate
        updates, state = opt.update(grads, opt.init(params), params)
        return funrl.optim.apply_updates(params, updates), state

    torch.func.vmap(train_member)(stacked_params, stacked_grads, torch.tensor([1e-3, 3e-4]))

References: optax (``optax/_src/base.py``, ``transform.py``, ``alias.py``) for the shape of the
API and the schedules; torch.optim (``adam.py``, ``sgd.py``, ``rmsprop.py``) for the equations.
"""

from __future__ import annotations

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


def _check_float(value: Any, name: str, low: float, high: float = math.inf, high_open: bool = False) -> float:
    """Validate a static float hyper-parameter in ``[low, high]`` (``[low, high)`` if ``high_open``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    value = float(value)
    in_range = low <= value < high if high_open else low <= value <= high
    if not in_range:
        bracket = ")" if high_open else "]"
        raise ValueError(f"{name}: expected a value in [{low}, {high}{bracket}, got {value}")
    return value


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


def _scalar_dtype(leaves: Sequence[torch.Tensor]) -> torch.dtype:
    """Precision for per-step scalars (bias corrections): float64 if any leaf is, else float32."""
    return torch.float64 if any(x.dtype == torch.float64 for x in leaves) else torch.float32


def _use_foreach(foreach: bool, leaves: Sequence[torch.Tensor]) -> bool:
    """Foreach kernels only in plain eager code: they have no vmap/grad rules, and inductor fuses."""
    if not foreach or not leaves or torch.compiler.is_compiling():
        return False
    return torch._C._functorch.peek_interpreter_stack() is None


# --------------------------------------------------------------------------------------------
# Leaf-list arithmetic: one spelling of each equation, run by foreach kernels or leaf by leaf.


def _scaled(xs: list[torch.Tensor], factor: Scalar, foreach: bool) -> list[torch.Tensor]:
    if foreach:
        return list(torch._foreach_mul(xs, factor))
    return [x * factor for x in xs]


def _scale_owned(xs: list[torch.Tensor], factor: Scalar, foreach: bool) -> list[torch.Tensor]:
    """``x * factor`` per leaf, in place on the foreach path: only for temporaries the caller made.

    A fresh CPU buffer costs more than the arithmetic on it (an out-of-place multiply of 1M floats
    took about 3x an in-place one here), so the eager path reuses its own temporaries; the
    per-leaf path stays out of place for vmap (an unbatched temporary cannot take a batched
    factor in place).
    """
    if foreach:
        torch._foreach_mul_(xs, factor)
        return xs
    return [x * factor for x in xs]


def _add_owned(
    xs: list[torch.Tensor], ys: list[torch.Tensor], alpha: float, foreach: bool
) -> list[torch.Tensor]:
    """``x + alpha * y`` per leaf, in place on the foreach path (``xs`` are the caller's temporaries)."""
    if foreach:
        torch._foreach_add_(xs, ys, alpha=alpha)
        return xs
    return [torch.add(x, y, alpha=alpha) for x, y in zip(xs, ys, strict=True)]


def _add(xs: list[torch.Tensor], ys: list[torch.Tensor], alpha: float, foreach: bool) -> list[torch.Tensor]:
    """``x + alpha * y`` per leaf."""
    if foreach:
        return list(torch._foreach_add(xs, ys, alpha=alpha))
    return [torch.add(x, y, alpha=alpha) for x, y in zip(xs, ys, strict=True)]


def _lerp(xs: list[torch.Tensor], ys: list[torch.Tensor], weight: float, foreach: bool) -> list[torch.Tensor]:
    """``x + weight * (y - x)`` per leaf (torch.optim's moment update)."""
    if foreach:
        return list(torch._foreach_lerp(xs, ys, weight))
    return [torch.lerp(x, y, weight) for x, y in zip(xs, ys, strict=True)]


def _decay_add_square(
    xs: list[torch.Tensor], grads: list[torch.Tensor], decay: float, foreach: bool
) -> list[torch.Tensor]:
    """``decay * x + (1 - decay) * g * g`` per leaf (torch's ``mul_(decay).addcmul_(g, g, 1 - decay)``)."""
    if foreach:
        out = torch._foreach_mul(xs, decay)
        torch._foreach_addcmul_(out, grads, grads, value=1 - decay)
        return list(out)
    return [torch.addcmul(x * decay, g, g, value=1 - decay) for x, g in zip(xs, grads, strict=True)]


def _sqrt_plus(
    xs: list[torch.Tensor], divisor: Scalar | None, eps: float, foreach: bool, owned: bool = False
) -> list[torch.Tensor]:
    """``sqrt(x) / divisor + eps`` per leaf (the denominator of Adam and RMSprop); in place on
    the foreach path when the caller ``owned`` ``xs``."""
    if foreach:
        if owned:
            torch._foreach_sqrt_(xs)
            out = xs
        else:
            out = list(torch._foreach_sqrt(xs))
        if divisor is not None:
            torch._foreach_div_(out, divisor)
        torch._foreach_add_(out, eps)
        return out
    if divisor is None:
        return [x.sqrt() + eps for x in xs]
    return [x.sqrt() / divisor + eps for x in xs]


def _div(xs: list[torch.Tensor], ys: list[torch.Tensor], foreach: bool) -> list[torch.Tensor]:
    if foreach:
        return list(torch._foreach_div(xs, ys))
    return [x / y for x, y in zip(xs, ys, strict=True)]


def _bias_correction(beta: float, step: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - beta ** step`` as ``-expm1(step * log(beta))``: accurate to an ulp even in float32.

    The direct form loses digits when ``beta`` is close to 1 (``1 - 0.999`` in float32 is off by
    1e-5 relative), which would break agreement with torch.optim's double-precision host scalars.
    """
    if beta == 0.0:
        return torch.ones((), dtype=dtype, device=step.device)
    return -torch.expm1(step.to(dtype) * math.log(beta))


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
    update_leaves = [u.to(p.dtype) for p, u in zip(param_leaves, update_leaves, strict=True)]
    if _use_foreach(True, param_leaves):
        new = list(torch._foreach_add(param_leaves, update_leaves))
    else:
        new = [p + u for p, u in zip(param_leaves, update_leaves, strict=True)]
    return tree.unflatten(spec, new)


def global_norm(updates: Updates) -> torch.Tensor:
    """The 2-norm of all leaves viewed as one vector (the norm of the per-leaf norms, as torch)."""
    leaves, _ = _tensor_leaves(updates, "updates")
    if not leaves:
        raise ValueError("updates: expected at least one tensor leaf")
    if _use_foreach(True, leaves):
        norms = list(torch._foreach_norm(leaves, 2.0))
    else:
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
    """Multiply updates by a constant ``step_size`` (a float or a 0-dim tensor)."""
    if isinstance(step_size, torch.Tensor):
        if step_size.dim() != 0 or not step_size.dtype.is_floating_point:
            raise ValueError(
                f"step_size: expected a 0-dim floating tensor, got shape {tuple(step_size.shape)} "
                f"dtype {step_size.dtype}"
            )
    else:
        step_size = _check_float(step_size, "step_size", -math.inf)

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        return tree.unflatten(spec, _scaled(leaves, step_size, _use_foreach(True, leaves))), state

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
        scaled = _scaled(leaves, factor, _use_foreach(True, leaves))
        return tree.unflatten(spec, scaled), ScaleByScheduleState(count=state.count + 1)

    return Optimizer(init, update)


def scale_by_learning_rate(learning_rate: LearningRate) -> Optimizer:
    """Multiply updates by ``-learning_rate`` (a descent step); a schedule gets a step count."""
    if callable(learning_rate) and not isinstance(learning_rate, torch.Tensor):
        return scale_by_schedule(lambda count: -learning_rate(count))
    lr = _as_schedule(learning_rate)(None)
    return scale(-lr)


def add_decayed_weights(weight_decay: float) -> Optimizer:
    """``updates + weight_decay * params`` (L2 regularisation folded into the gradient)."""
    weight_decay = _check_float(weight_decay, "weight_decay", 0.0)

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        param_leaves = _check_params(params, spec, "add_decayed_weights")
        return tree.unflatten(
            spec, _add(leaves, param_leaves, weight_decay, _use_foreach(True, leaves))
        ), state

    return Optimizer(_empty_init, update)


def clip_by_global_norm(max_norm: float) -> Optimizer:
    """Scale updates by ``min(max_norm / (global_norm + 1e-6), 1)``, as ``clip_grad_norm_``.

    The ``1e-6`` is torch's (optax's version omits it); the factor is a tensor, so no host sync.
    """
    max_norm = _check_float(max_norm, "max_norm", 0.0)
    if max_norm == 0.0:
        raise ValueError("max_norm: expected a value > 0, got 0.0")

    def update(
        updates: Updates, state: EmptyState, params: Params | None = None
    ) -> tuple[Updates, EmptyState]:
        leaves, spec = _tensor_leaves(updates, "updates")
        if not leaves:
            return updates, state
        factor = torch.clamp(max_norm / (global_norm(updates) + 1e-6), max=1.0)
        return tree.unflatten(spec, _scaled(leaves, factor, _use_foreach(True, leaves))), state

    return Optimizer(_empty_init, update)


# --------------------------------------------------------------------------------------------
# Optimisers with torch.optim counterparts


def sgd(
    learning_rate: LearningRate,
    momentum: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    foreach: bool = True,
) -> Optimizer:
    """Stochastic gradient descent as ``torch.optim.SGD`` (same arguments, same equations).

    ``g = grad + weight_decay * param``; with momentum ``buf = g`` on the first step, then
    ``buf = momentum * buf + (1 - dampening) * g``; the step is ``g + momentum * buf`` (Nesterov)
    or ``buf``; the update is ``-lr * step``. Sutskever et al. 2013 for Nesterov's form.
    """
    lr_fn = _as_schedule(learning_rate)
    momentum = _check_float(momentum, "momentum", 0.0)
    dampening = _check_float(dampening, "dampening", 0.0, 1.0)
    weight_decay = _check_float(weight_decay, "weight_decay", 0.0)
    if nesterov and (momentum == 0.0 or dampening != 0.0):
        raise ValueError(
            f"nesterov: requires momentum > 0 and dampening == 0, got momentum={momentum}, "
            f"dampening={dampening}"
        )

    def init(params: Params) -> SgdState:
        leaves, spec = _tensor_leaves(params, "params")
        buffers = tree.unflatten(spec, [torch.zeros_like(x) for x in leaves]) if momentum else EmptyState()
        return SgdState(count=_zero_count(leaves), momentum=buffers)

    def update(grads: Updates, state: SgdState, params: Params | None = None) -> tuple[Updates, SgdState]:
        _check_state(state, SgdState)
        if momentum:
            buf, spec = _tensor_leaves(state.momentum, "state.momentum")
            g = _check_structure(spec, grads, "grads")
        else:
            g, spec = _tensor_leaves(grads, "grads")
        fast = _use_foreach(foreach, g)
        if weight_decay:
            g = _add(g, _check_params(params, spec, "weight_decay"), weight_decay, fast)
        lr = lr_fn(state.count)
        new_buffers = EmptyState()
        if momentum:
            if dampening:
                # torch starts the buffer at the raw gradient, undamped.
                first = state.count == 0
                buf = [
                    torch.where(first, gi, b * momentum + gi * (1 - dampening))
                    for b, gi in zip(buf, g, strict=True)
                ]
            else:
                buf = _add_owned(_scaled(buf, momentum, fast), g, 1.0, fast)
            new_buffers = tree.unflatten(spec, buf)
            if nesterov:
                steps = _scale_owned(_add(g, buf, momentum, fast), -lr, fast)
            else:
                steps = _scaled(buf, -lr, fast)  # buf is the new state: not ours to scale in place
        else:
            steps = _scaled(g, -lr, fast)
        updates = tree.unflatten(spec, steps)
        return updates, SgdState(count=state.count + 1, momentum=new_buffers)

    return Optimizer(init, update)


def _adam_family(
    learning_rate: LearningRate | None,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    foreach: bool,
) -> Optimizer:
    """Adam's moments and bias-corrected step; ``learning_rate=None`` gives the unscaled direction."""
    lr_fn = None if learning_rate is None else _as_schedule(learning_rate)
    b1 = _check_float(b1, "b1", 0.0, 1.0, high_open=True)
    b2 = _check_float(b2, "b2", 0.0, 1.0, high_open=True)
    eps = _check_float(eps, "eps", 0.0)
    weight_decay = _check_float(weight_decay, "weight_decay", 0.0)

    def init(params: Params) -> AdamState:
        leaves, spec = _tensor_leaves(params, "params")
        zeros = lambda: tree.unflatten(spec, [torch.zeros_like(x) for x in leaves])
        return AdamState(count=_zero_count(leaves), mu=zeros(), nu=zeros())

    def update(grads: Updates, state: AdamState, params: Params | None = None) -> tuple[Updates, AdamState]:
        _check_state(state, AdamState)
        mu, spec = _tensor_leaves(state.mu, "state.mu")
        nu = _check_structure(spec, state.nu, "state.nu")
        g = _check_structure(spec, grads, "grads")
        fast = _use_foreach(foreach, g)
        param_leaves = _check_params(params, spec, "weight_decay") if weight_decay else None
        if weight_decay and not decoupled:
            g = _add(g, param_leaves, weight_decay, fast)
        mu = _lerp(mu, g, 1 - b1, fast)
        nu = _decay_add_square(nu, g, b2, fast)
        step = state.count + 1
        dtype = _scalar_dtype(g)
        correction1 = _bias_correction(b1, step, dtype)
        correction2_sqrt = _bias_correction(b2, step, dtype).sqrt()
        denom = _sqrt_plus(nu, correction2_sqrt, eps, fast)
        direction = _div(mu, denom, fast)
        if lr_fn is None:
            updates = _scale_owned(direction, 1 / correction1, fast)
        else:
            lr = lr_fn(state.count)
            updates = _scale_owned(direction, -lr / correction1, fast)
            if weight_decay and decoupled:
                # AdamW (Loshchilov & Hutter 2019): torch multiplies param by the factor
                # 1 - lr * weight_decay, rounded to the param dtype; p * factor - p is exact
                # (Sterbenz), so params + updates reproduces that rounding.
                decayed = _scaled(param_leaves, 1 - weight_decay * lr, fast)
                updates = _add_owned(updates, _add_owned(decayed, param_leaves, -1.0, fast), 1.0, fast)
        new_state = AdamState(count=step, mu=tree.unflatten(spec, mu), nu=tree.unflatten(spec, nu))
        return tree.unflatten(spec, updates), new_state

    return Optimizer(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, foreach: bool = True) -> Optimizer:
    """Rescale updates to Adam's bias-corrected ``m_hat / (sqrt(v_hat) + eps)`` (no learning rate).

    Kingma & Ba 2015, Algorithm 1, with ``eps`` placed as torch.optim.Adam places it.
    """
    return _adam_family(None, b1, b2, eps, 0.0, decoupled=False, foreach=foreach)


def adam(
    learning_rate: LearningRate,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    foreach: bool = True,
) -> Optimizer:
    """Adam as ``torch.optim.Adam(lr, betas=(b1, b2), eps, weight_decay)`` (L2 weight decay).

    ``m = lerp(m, g, 1 - b1)``, ``v = b2 v + (1 - b2) g^2``, update
    ``-lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``. Kingma & Ba 2015.
    """
    return _adam_family(learning_rate, b1, b2, eps, weight_decay, decoupled=False, foreach=foreach)


def adamw(
    learning_rate: LearningRate,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    foreach: bool = True,
) -> Optimizer:
    """AdamW as ``torch.optim.AdamW`` (default ``weight_decay=1e-2`` as torch, not optax's 1e-4).

    Adam's update plus the decoupled decay ``-lr * weight_decay * param``. Loshchilov & Hutter 2019.
    """
    return _adam_family(learning_rate, b1, b2, eps, weight_decay, decoupled=True, foreach=foreach)


def rmsprop(
    learning_rate: LearningRate,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    foreach: bool = True,
) -> Optimizer:
    """RMSprop as ``torch.optim.RMSprop`` (torch's defaults and ``eps`` outside the square root).

    ``v = alpha v + (1 - alpha) g^2``; centered: ``a = lerp(a, g, 1 - alpha)``, ``v - a^2`` under
    the root; ``avg = sqrt(.) + eps``; with momentum ``buf = momentum buf + g / avg`` and update
    ``-lr buf``, else ``-lr g / avg``. Tieleman & Hinton 2012; Graves 2013 for the centered form.
    """
    lr_fn = _as_schedule(learning_rate)
    alpha = _check_float(alpha, "alpha", 0.0, 1.0)
    eps = _check_float(eps, "eps", 0.0)
    weight_decay = _check_float(weight_decay, "weight_decay", 0.0)
    momentum = _check_float(momentum, "momentum", 0.0)

    def init(params: Params) -> RmsPropState:
        leaves, spec = _tensor_leaves(params, "params")
        zeros = lambda: tree.unflatten(spec, [torch.zeros_like(x) for x in leaves])
        return RmsPropState(
            count=_zero_count(leaves),
            square_avg=zeros(),
            grad_avg=zeros() if centered else EmptyState(),
            momentum=zeros() if momentum else EmptyState(),
        )

    def update(
        grads: Updates, state: RmsPropState, params: Params | None = None
    ) -> tuple[Updates, RmsPropState]:
        _check_state(state, RmsPropState)
        square_avg, spec = _tensor_leaves(state.square_avg, "state.square_avg")
        g = _check_structure(spec, grads, "grads")
        fast = _use_foreach(foreach, g)
        if weight_decay:
            g = _add(g, _check_params(params, spec, "weight_decay"), weight_decay, fast)
        square_avg = _decay_add_square(square_avg, g, alpha, fast)
        new_grad_avg = EmptyState()
        if centered:
            grad_avg = _lerp(_check_structure(spec, state.grad_avg, "state.grad_avg"), g, 1 - alpha, fast)
            new_grad_avg = tree.unflatten(spec, grad_avg)
            if fast:
                variance = list(torch._foreach_addcmul(square_avg, grad_avg, grad_avg, value=-1))
            else:
                variance = [
                    torch.addcmul(v, a, a, value=-1) for v, a in zip(square_avg, grad_avg, strict=True)
                ]
            avg = _sqrt_plus(variance, None, eps, fast, owned=True)
        else:
            avg = _sqrt_plus(square_avg, None, eps, fast)
        lr = lr_fn(state.count)
        new_buffers = EmptyState()
        if momentum:
            buf = _check_structure(spec, state.momentum, "state.momentum")
            buf = _scaled(buf, momentum, fast)
            if fast:
                torch._foreach_addcdiv_(buf, g, avg)
            else:
                buf = [torch.addcdiv(b, gi, a) for b, gi, a in zip(buf, g, avg, strict=True)]
            new_buffers = tree.unflatten(spec, buf)
            updates = _scaled(buf, -lr, fast)  # buf is the new state: not ours to scale in place
        else:
            updates = _scale_owned(_div(g, avg, fast), -lr, fast)
        new_state = RmsPropState(
            count=state.count + 1,
            square_avg=tree.unflatten(spec, square_avg),
            grad_avg=new_grad_avg,
            momentum=new_buffers,
        )
        return tree.unflatten(spec, updates), new_state

    return Optimizer(init, update)


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
