"""Value estimators: discounted returns, TD error, n-step, TD(λ), GAE, V-trace, Retrace.

All inputs are time-major ``[T, ...]`` (any batch dims after time). Two episode flags are kept
apart, as in TorchRL's ``generalized_advantage_estimate``:

* ``terminated[t]``: ``s'_t`` is terminal, so nothing is bootstrapped from it;
* ``done[t] = terminated[t] | truncated[t]``: the episode ends at ``t`` and the trace is cut; a
  truncated step still bootstraps from ``next_values[t]`` (the value of ``info["final_obs"]``).

Every estimator takes ``next_values[t] = V(s'_t)`` explicitly instead of shifting ``values``:
after an auto-reset ``values[t + 1]`` belongs to the *next* episode, and only the caller knows
the value of the pre-reset observation. The last step of the window always bootstraps from
``next_values[T - 1]``. Estimators return tensors that keep their autograd graph; losses detach
their targets.

``gamma`` and ``lmbda`` may be Python numbers (range-checked) or floating tensors that broadcast
to the data (``[N]`` per environment, or a scalar under ``vmap`` over a hyper-parameter sweep).
Flags must be ``torch.bool`` (see :mod:`funrl.losses._checks`).

Formulation. TD(λ), GAE, discounted returns, V-trace and Retrace are all one first-order linear
recurrence run backwards in time, ``x_t = a_t + b_t * x_{t+1}`` with ``x_T = 0``. A reverse
Python loop over ``T`` is slow in eager (one kernel launch per step) and, unrolled, long to
compile at ``T = 512``; a log-depth (Hillis-Steele) scan does ``O(T log T)`` work. Affine maps
``x -> a + b x`` compose associatively, so :func:`reverse_linear_recurrence` runs a chunked scan
in three passes: an 8-step reverse loop over all blocks of 8 steps at once composes each block's
map, the same recurrence solves the block starts (8x shorter, recursively), and a second 8-step
loop over all blocks fills in every step from the next block's start. That is ``O(T)`` work in
few, wide steps. It only multiplies and adds, never divides, so products of
``gamma * lambda * (1 - done)`` can only underflow towards their true (tiny) value, unlike a
cumulative-product-and-divide or a discount matrix built from ``exp(cumsum(log b))``, which give
``inf/inf`` or ``0/0`` after a ``done``; a discount-matrix product also costs ``O(T^2)``.

Compiled, the recurrence is cheap and memory traffic is the cost (at T=128 x N=4096 every
``[T, N]`` float32 array is 2 MB), so :func:`gae` does not build ``a`` and ``b`` first: it hands
the scan a function that computes them from the raw inputs, and the two block passes recompute
them in registers. Inductor then emits one kernel per pass that reads rewards, values, next
values and flags once each and writes advantages and returns (``values`` added in the same
pass), instead of writing TD errors and trace multipliers out and reading them back. Eagerly the
opposite holds (every operation is a kernel launch), so eager calls compute ``a`` and ``b`` in a
few wide operations first. Compiled on the CPU, flags reach the kernels as ``uint8``
(:func:`_kernel_flags`): inductor's C++ code loads bool tensors element by element.
``benchmarks/losses.py`` measures these choices against the previous formulation, a one-level
Hillis-Steele scan, the plain reverse loop (eager, and through ``funrl.control.scan`` compiled)
and TorchRL (BENCHMARKS.md, "GAE").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from funrl.losses._checks import (
    check_bool,
    check_floating,
    check_min_dim,
    check_nonnegative,
    check_same_shape,
    check_scalar_or_broadcastable,
    check_unit_interval,
)

__all__ = [
    "reverse_linear_recurrence",
    "reverse_linear_recurrence_loop",
    "td_error",
    "discounted_returns",
    "n_step_returns",
    "lambda_returns",
    "gae",
    "vtrace",
    "retrace",
]

Scalar = float | torch.Tensor


# --------------------------------------------------------------------------------------------
# The recurrence x_t = a_t + b_t x_{t+1}
# --------------------------------------------------------------------------------------------

Coefficients = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""``coefficients(*inputs_at_t) -> (a_t, b_t)``: elementwise, so it works on any slab of time steps."""

DEFAULT_BLOCK = 8


def _identity(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return a, b


def _steps(inputs: Sequence[Any], dim: int, index: int) -> list[Any]:
    """Each time-varying input (a tensor) at ``index`` along ``dim``; anything else as it is."""
    return [x.select(dim, index) if isinstance(x, torch.Tensor) else x for x in inputs]


def _block_maps(
    coefficients: Coefficients, inputs: Sequence[Any], dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Compose the maps ``x -> a_t + b_t x`` backwards along a short static ``dim``.

    Returns ``(A, P)``, the map from the first step of ``dim`` to the end of it:
    ``x_first = A + P x_end`` with ``A = a_0 + b_0 (a_1 + b_1 (...))`` and ``P = b_0 b_1 ...``.
    """
    length = inputs[0].shape[dim]
    offset, product = coefficients(*_steps(inputs, dim, length - 1))
    for t in range(length - 2, -1, -1):
        a, b = coefficients(*_steps(inputs, dim, t))
        offset, product = a + b * offset, b * product
    return offset, product


Readout = Callable[..., torch.Tensor]
"""``readout(x_t, *inputs_at_t) -> y_t``: an elementwise second output, computed where ``x_t`` is."""


def _sweep(
    coefficients: Coefficients,
    inputs: Sequence[Any],
    dim: int,
    carry: torch.Tensor | None,
    readout: Readout | None,
) -> tuple[torch.Tensor, ...]:
    """Every ``x_t`` along a short static ``dim``, from ``carry`` (``x`` just past the end, or 0),
    and ``y_t = readout(x_t, ...)`` with it if ``readout`` is given."""
    length = inputs[0].shape[dim]
    xs, ys = [None] * length, [None] * length
    for t in range(length - 1, -1, -1):
        step = _steps(inputs, dim, t)
        a, b = coefficients(*step)
        carry = a if carry is None else a + b * carry
        xs[t] = carry
        if readout is not None:
            ys[t] = readout(carry, *step)
    if readout is None:
        return (torch.stack(xs, dim),)
    return torch.stack(xs, dim), torch.stack(ys, dim)


def _solve_backwards(
    coefficients: Coefficients, inputs: Sequence[Any], block: int, readout: Readout | None = None
) -> tuple[torch.Tensor, ...]:
    """``x_t = a_t + b_t x_{t+1}``, ``x_T = 0``, with ``(a_t, b_t) = coefficients(*inputs[t])``.

    ``inputs[0]`` is a ``[T, ...]`` tensor; every other tensor input is ``[T, ...]`` too and is
    sliced along time with it; non-tensors (Python numbers) pass through. The three passes of the
    chunked scan (see :func:`reverse_linear_recurrence`) each call ``coefficients`` on slabs of
    the raw inputs, so under ``torch.compile`` the per-step arithmetic (TD errors, flag
    multipliers) is inlined into the block kernels instead of being written to memory first; so
    is ``readout`` (e.g. ``returns = advantages + values``) in the last pass.

    Returns:
        ``(x,)``, or ``(x, y)`` with ``y_t = readout(x_t, *inputs[t])``.
    """
    length = inputs[0].shape[0]
    if length <= block:
        return _sweep(coefficients, inputs, 0, None, readout)
    head, blocks = length % block, length // block
    # Blocks end at T - 1; the first ``head`` steps (T % block of them) are swept last.
    body = [
        x[head:].reshape(blocks, block, *x.shape[1:]) if isinstance(x, torch.Tensor) else x for x in inputs
    ]
    offsets, products = _block_maps(coefficients, body, 1)
    (starts,) = _solve_backwards(_identity, (offsets, products), block)
    next_starts = torch.cat([starts[1:], torch.zeros_like(starts[:1])])
    outputs = [y.flatten(0, 1) for y in _sweep(coefficients, body, 1, next_starts, readout)]
    if not head:
        return tuple(outputs)
    head_inputs = [x[:head] if isinstance(x, torch.Tensor) else x for x in inputs]
    head_outputs = _sweep(coefficients, head_inputs, 0, starts[0], readout)
    return tuple(torch.cat([h, y]) for h, y in zip(head_outputs, outputs, strict=True))


def _solve(
    coefficients: Coefficients,
    inputs: Sequence[Any],
    readout: Readout | None = None,
    block: int = DEFAULT_BLOCK,
) -> tuple[torch.Tensor, ...]:
    """:func:`_solve_backwards`, fused under ``torch.compile``; eagerly ``a`` and ``b`` come first.

    Eagerly every operation is a kernel launch, so computing ``(a, b)`` once over all of ``[T, ...]``
    (a handful of wide operations) beats recomputing them inside the two block passes; compiled,
    the opposite holds, since inductor inlines the recomputation into the block kernels and
    never writes ``a`` or ``b`` to memory.
    """
    if torch.compiler.is_compiling():
        return _solve_backwards(coefficients, inputs, block, readout)
    (x,) = _solve_backwards(_identity, coefficients(*inputs), block)
    return (x,) if readout is None else (x, readout(x, *inputs))


def _time_varying(x: Scalar, ref: torch.Tensor) -> Scalar:
    """A tensor hyper-parameter (checked broadcastable to the data) as a view of the data's shape,
    so the scan slices it along time with the data; a Python number passes through.

    Every tensor is expanded, not only per-step ones: the scan slices every tensor input along
    time, so a per-environment ``[N]`` or a 0-d tensor must gain the time dim first."""
    if isinstance(x, torch.Tensor):
        return x.expand_as(ref)
    return x


def reverse_linear_recurrence(a: torch.Tensor, b: torch.Tensor, block: int = DEFAULT_BLOCK) -> torch.Tensor:
    """Solve ``x_t = a_t + b_t * x_{t+1}`` backwards along dim 0 with ``x_T = 0``.

    Args:
        a: ``[T, ...]`` offsets.
        b: ``[T, ...]`` multipliers (same shape as ``a``).
        block: block length (a static tuning knob, not a semantic one).

    Returns:
        ``x``: ``[T, ...]``.

    A chunked scan in three passes. Time is cut into blocks of ``block`` steps that end at
    ``T - 1`` (the first ``T % block`` steps form a short head). (1) One ``block``-step reverse
    loop, run on all blocks at once, composes each block's affine map, ``x_start = A + P x_end``.
    (2) The values at block starts obey the same recurrence, ``block`` times shorter, solved
    recursively. (3) A second ``block``-step loop over all blocks at once, started from the next
    block's start value, gives every ``x_t``; the head is swept last. That is ``O(T)`` work in
    about ``2 * block * log_block(T)`` sequential steps, each over ``T / block`` times more data
    than a plain reverse loop's: few kernel launches eagerly, a small graph compiled, and no
    padding copy.
    """
    if isinstance(block, bool) or not isinstance(block, int) or block < 2:
        raise ValueError(f"block: expected an int >= 2, got {block!r}")
    return _solve_backwards(_identity, (a, b), block)[0]


def reverse_linear_recurrence_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same recurrence as :func:`reverse_linear_recurrence`, as a plain reverse-time loop.

    The readable definition; used as a reference in tests and as a benchmark baseline.
    """
    out = torch.empty_like(a)
    carry = torch.zeros_like(a[0])
    for t in range(a.shape[0] - 1, -1, -1):
        carry = a[t] + b[t] * carry
        out[t] = carry
    return out


# --------------------------------------------------------------------------------------------
# Validation (static: shapes, dtypes, Python numbers)
# --------------------------------------------------------------------------------------------


def _check_time_major(floats: dict[str, torch.Tensor], flags: dict[str, torch.Tensor]) -> None:
    (ref_name, ref), *_ = floats.items()
    for name, x in floats.items():
        check_floating(name, x)
    check_min_dim(ref_name, ref, 1, "time-major [T, ...]")
    if ref.shape[0] == 0:
        raise ValueError(f"{ref_name}: expected at least one time step, got shape {tuple(ref.shape)}")
    for name, x in flags.items():
        check_bool(name, x)
    check_same_shape(ref_name, ref, **{**floats, **flags})


def _check_rate(name: str, value: Scalar, ref_name: str, ref: torch.Tensor) -> None:
    check_unit_interval(name, value)
    check_scalar_or_broadcastable(name, value, ref_name, ref)


@torch.library.custom_op("funrl::flags_as_uint8", mutates_args=())
def _flags_as_uint8(flags: torch.Tensor) -> torch.Tensor:
    """A ``torch.uint8`` copy of a bool tensor, opaque to inductor (see :func:`_kernel_flags`)."""
    return flags.to(torch.uint8)


@_flags_as_uint8.register_fake
def _(flags: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(flags, dtype=torch.uint8)


@_flags_as_uint8.register_vmap
def _(info: Any, in_dims: tuple[int | None], flags: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    return _flags_as_uint8(flags), in_dims[0]


UINT8_FLAGS_MIN_NUMEL = 1 << 15
"""Below this many flags :func:`_kernel_flags` leaves them bool: the custom op's dispatch (~19 µs
measured here) costs more than the bool loads it saves (~0.7 ns per flag)."""


def _kernel_flags(flags: torch.Tensor) -> torch.Tensor:
    """Episode flags as compiled CPU kernels read them fastest: ``uint8`` 0/1 instead of bool.

    Inductor's C++ backend loads every bool tensor through a per-element mask conversion
    (``VecMask::from``), measured here at ~0.35 ms per ``[128, 4096]`` flag array, more than the
    rest of a fused GAE pass over the same steps; ``uint8`` loads are plain vector loads. The
    conversion is a custom op (a 1-byte copy in ATen) because inductor lowers any in-graph
    ``to``/``view(torch.uint8)`` back onto the bool load. Eagerly, on other devices and for
    small inputs (:data:`UINT8_FLAGS_MIN_NUMEL`) the flags stay bool. Every use below reads flags
    only through ``|`` and :func:`_not`, which treat both alike.
    """
    if (
        torch.compiler.is_compiling()
        and flags.device.type == "cpu"
        and flags.numel() >= UINT8_FLAGS_MIN_NUMEL
    ):
        return _flags_as_uint8(flags)
    return flags


def _not(flag: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - flag`` as ``dtype``, for bool or 0/1 ``uint8`` flags."""
    return 1.0 - flag.to(dtype)


def _not_cut(done: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - done`` with the last step forced to 0: the window's end cuts every trace."""
    keep = _not(done, dtype)
    return torch.cat([keep[:-1], torch.zeros_like(keep[-1:])])


def _shift_back(x: torch.Tensor) -> torch.Tensor:
    """``y_t = x_{t+1}``, zero at ``t = T - 1`` (always multiplied by a cut there)."""
    return torch.cat([x[1:], torch.zeros_like(x[:1])])


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------


def td_error(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """One-step TD error ``δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)`` (Sutton 1988).

    Args:
        rewards, values, next_values: ``[T, ...]`` floats.
        terminated: ``[T, ...]`` bool.
        gamma: discount in [0, 1].

    Returns:
        ``[T, ...]`` TD errors. Truncation does not matter for a single step.
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values}, {"terminated": terminated}
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    return rewards + gamma * _not(terminated, rewards.dtype) * next_values - values


def lambda_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar,
) -> torch.Tensor:
    """TD(λ) returns (Sutton & Barto 2018, eq. 12.18), recursively:

    ``G_t = r_t + γ (1 - term_t) [(1 - λ) V(s'_t) + λ G_{t+1}]`` while the episode goes on, and
    ``G_t = r_t + γ (1 - term_t) V(s'_t)`` where ``done_t`` (or ``t = T - 1``) cuts the trace.

    Args:
        rewards, next_values: ``[T, ...]`` floats; ``next_values[t] = V(s'_t)``.
        terminated, truncated: ``[T, ...]`` bool.
        gamma, lmbda: in [0, 1].

    Returns:
        ``[T, ...]`` λ-returns. ``λ = 1`` gives bootstrapped Monte-Carlo returns, ``λ = 0`` one-step
        targets.
    """
    _check_time_major(
        {"rewards": rewards, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    dtype = rewards.dtype
    trace = gamma * lmbda * _not_cut(terminated | truncated, dtype)
    offsets = rewards + gamma * _not(terminated, dtype) * next_values - trace * next_values
    return reverse_linear_recurrence(offsets, trace)


def discounted_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
) -> torch.Tensor:
    """Discounted returns ``G_t = r_t + γ (1 - term_t) G_{t+1}``, cut at episode ends.

    A truncated step and the last step of the window bootstrap from ``next_values``; pass zeros
    for a pure Monte-Carlo sum of the rewards seen. Equal to :func:`lambda_returns` at ``λ = 1``.

    Args:
        rewards, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        gamma: in [0, 1].

    Returns:
        ``[T, ...]`` returns.
    """
    return lambda_returns(rewards, next_values, terminated, truncated, gamma, 1.0)


def n_step_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    n: int,
) -> torch.Tensor:
    """n-step bootstrapped returns (Sutton & Barto 2018, eq. 7.1):

    ``G_t = r_t + γ r_{t+1} + ... + γ^{n-1} r_{t+n-1} + γ^n V(s'_{t+n-1})``, where the sum stops
    early at an episode end (bootstrapping from ``next_values`` there unless terminated) or at the
    window's end.

    Args:
        rewards, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        gamma: in [0, 1].
        n: number of steps, ``n >= 1``. ``n >= T`` gives :func:`discounted_returns`.

    Returns:
        ``[T, ...]`` returns. Computed as ``min(n, T)`` whole-tensor rounds of
        ``G^k_t = r_t + γ (1 - term_t) V(s'_t) + γ (1 - cut_t) (G^{k-1}_{t+1} - V(s'_t))``.
    """
    _check_time_major(
        {"rewards": rewards, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    dtype = rewards.dtype
    one_step = rewards + gamma * _not(terminated, dtype) * next_values
    continuation = gamma * _not_cut(terminated | truncated, dtype)
    returns = one_step
    for _ in range(min(n, rewards.shape[0]) - 1):
        returns = one_step + continuation * (_shift_back(returns) - next_values)
    return returns


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16).

    ``A_t = δ_t + γ λ (1 - done_t) A_{t+1}`` with ``δ_t = r_t + γ (1 - term_t) V(s'_t) - V(s_t)``
    and ``A_T = 0``.

    Args:
        rewards, values, next_values: ``[T, ...]`` floats; ``values[t] = V(s_t)``,
            ``next_values[t] = V(s'_t)`` (the value of ``final_obs`` on a truncated step).
        terminated, truncated: ``[T, ...]`` bool.
        gamma, lmbda: in [0, 1]; floats or tensors broadcastable to ``rewards``.

    Returns:
        ``(advantages, returns)``, both ``[T, ...]``, with ``returns = advantages + values`` (the
        λ-return targets for the critic).

    The recurrence is :func:`reverse_linear_recurrence`'s chunked scan; under ``torch.compile``
    ``δ_t``, the trace multiplier and ``returns`` are computed inside its block kernels from the
    raw inputs (module docstring, "Formulation"), so no float ``[T, ...]`` intermediate is written.
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    dtype = rewards.dtype

    def coefficients(rewards, values, next_values, terminated, truncated, gamma, lmbda):
        deltas = rewards + gamma * _not(terminated, dtype) * next_values - values
        return deltas, gamma * lmbda * _not(terminated | truncated, dtype)

    def returns(advantages, rewards, values, *_):
        return advantages + values

    inputs = (rewards, values, next_values, _kernel_flags(terminated), _kernel_flags(truncated))
    rates = (_time_varying(gamma, rewards), _time_varying(lmbda, rewards))
    advantages, returns = _solve(coefficients, (*inputs, *rates), readout=returns)
    return advantages, returns


def vtrace(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA, eq. 1 and 4).

    With ``ρ_t = min(ρ̄, π/μ)``, ``c_t = λ min(c̄, π/μ)`` and ``δ_t = r_t + γ (1 - term_t) V(s'_t) - V(s_t)``:

    ``v_t = V(s_t) + ρ_t δ_t + γ c_t (1 - done_t) (v_{t+1} - V(s_{t+1}))``,
    ``A^pg_t = min(ρ̄_pg, π/μ) (r_t + γ (1 - term_t) v'_t - V(s_t))`` with ``v'_t = v_{t+1}``
    inside an episode and ``V(s'_t)`` where the trace is cut (episode end or window end).

    Args:
        rewards, values, next_values: ``[T, ...]`` floats.
        terminated, truncated: ``[T, ...]`` bool.
        log_rhos: ``[T, ...]`` ``log π(a_t|s_t) - log μ(a_t|s_t)`` (target minus behaviour).
        gamma, lmbda: in [0, 1].
        clip_rho_threshold, clip_c_threshold, clip_pg_rho_threshold: ``ρ̄``, ``c̄``, ``ρ̄_pg``
            (>= 0; ``float("inf")`` disables a clip).

    Returns:
        ``(vs, pg_advantages)``, both ``[T, ...]``. With on-policy data (``log_rhos = 0``),
        ``λ = 1`` and thresholds >= 1, ``vs`` equals :func:`lambda_returns` at ``λ = 1``.
    """
    _check_time_major(
        {"rewards": rewards, "values": values, "next_values": next_values, "log_rhos": log_rhos},
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    for name, threshold in (
        ("clip_rho_threshold", clip_rho_threshold),
        ("clip_c_threshold", clip_c_threshold),
        ("clip_pg_rho_threshold", clip_pg_rho_threshold),
    ):
        check_nonnegative(name, threshold)
    dtype = rewards.dtype
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=clip_rho_threshold)
    traces = lmbda * torch.clamp(rhos, max=clip_c_threshold)
    not_terminated = _not(terminated, dtype)
    deltas = clipped_rhos * (rewards + gamma * not_terminated * next_values - values)
    vs_minus_values = reverse_linear_recurrence(deltas, gamma * traces * _not(terminated | truncated, dtype))
    vs = vs_minus_values + values
    not_cut = _not_cut(terminated | truncated, dtype)
    next_vs = not_cut * _shift_back(vs) + (1.0 - not_cut) * next_values
    pg_rhos = torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + gamma * not_terminated * next_vs - values)
    return vs, pg_advantages


def retrace(
    rewards: torch.Tensor,
    q_taken: torch.Tensor,
    next_expected_q: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: Scalar,
    lmbda: Scalar = 1.0,
) -> torch.Tensor:
    """Retrace(λ) targets for ``Q(s_t, a_t)`` (Munos et al. 2016, eq. 3), recursively:

    ``G_t = r_t + γ (1 - term_t) E_π Q(s'_t, ·) + γ (1 - cut_t) c_{t+1} (G_{t+1} - Q(s_{t+1}, a_{t+1}))``
    with ``c_t = λ min(1, π(a_t|s_t) / μ(a_t|s_t))`` and the trace cut at episode and window ends.

    Args:
        rewards: ``[T, ...]`` floats.
        q_taken: ``[T, ...]`` ``Q(s_t, a_t)`` for the actions taken.
        next_expected_q: ``[T, ...]`` ``Σ_a π(a|s'_t) Q(s'_t, a)`` (from ``final_obs`` on a
            truncated step).
        terminated, truncated: ``[T, ...]`` bool.
        log_rhos: ``[T, ...]`` ``log π(a_t|s_t) - log μ(a_t|s_t)``.
        gamma, lmbda: in [0, 1].

    Returns:
        ``[T, ...]`` Retrace targets (detach them before regressing ``Q`` onto them).
    """
    _check_time_major(
        {
            "rewards": rewards,
            "q_taken": q_taken,
            "next_expected_q": next_expected_q,
            "log_rhos": log_rhos,
        },
        {"terminated": terminated, "truncated": truncated},
    )
    _check_rate("gamma", gamma, "rewards", rewards)
    _check_rate("lmbda", lmbda, "rewards", rewards)
    dtype = rewards.dtype
    traces = lmbda * torch.clamp(torch.exp(log_rhos), max=1.0)
    continuation = gamma * _not_cut(terminated | truncated, dtype) * _shift_back(traces)
    offsets = (
        rewards + gamma * _not(terminated, dtype) * next_expected_q - continuation * _shift_back(q_taken)
    )
    return reverse_linear_recurrence(offsets, continuation)
