"""Parameter initialisers drawn from explicit keys: ``init_fn(key, shape, dtype) -> Tensor``.

Every initialiser here samples through :mod:`funrl.random` (Threefry keys), never through torch's
global generator, so a key fully determines the result on every device, eager or under ``vmap``.

Fans follow torch's layout for weights, ``[out_features, in_features, *kernel]``:
``fan_in = shape[1] * prod(kernel)`` and ``fan_out = shape[0] * prod(kernel)`` (as
``torch.nn.init._calculate_fan_in_and_fan_out``). A 1-D shape has ``fan_in = fan_out = shape[0]``.

As in ``jax.nn.initializers``, ``zeros`` and ``ones`` are initialisers themselves; every other
name is a factory that takes the initialiser's hyper-parameters and returns one
(``orthogonal(gain=2**0.5)``, ``xavier_uniform()``, ``constant(0.1)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from funrl import random

__all__ = [
    "InitFn",
    "Initializer",
    "compute_fans",
    "calculate_gain",
    "orthogonal",
    "xavier_uniform",
    "xavier_normal",
    "glorot_uniform",
    "glorot_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "he_uniform",
    "he_normal",
    "lecun_normal",
    "lecun_uniform",
    "torch_default",
    "uniform",
    "normal",
    "zeros",
    "ones",
    "constant",
    "Rule",
]

InitFn = Callable[[torch.Tensor, Sequence[int], torch.dtype], torch.Tensor]
"""``init_fn(key, shape, dtype) -> Tensor`` of that shape and dtype, on the key's device."""


class Initializer:
    """A named initialiser: ``init(key, shape, dtype=torch.float32) -> Tensor``.

    A thin wrapper around a function so that initialisers print readably (``orthogonal(gain=0.01)``)
    and so that :func:`funrl.nets.init` can tell an initialiser from a factory passed by mistake.
    """

    __slots__ = ("_fn", "_name")

    def __init__(self, fn: Callable[[torch.Tensor, tuple[int, ...], torch.dtype], torch.Tensor], name: str):
        self._fn = fn
        self._name = name

    def __call__(
        self, key: torch.Tensor, shape: Sequence[int], dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        shape = _as_shape(shape)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        out = self._fn(key, shape, dtype)
        return out

    def __repr__(self) -> str:
        return self._name


def _as_shape(shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape: expected a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"shape: expected non-negative sizes, got {out}")
    return out


def compute_fans(shape: Sequence[int]) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of torch layout ``[out, in, *kernel]``."""
    shape = _as_shape(shape)
    if len(shape) == 0:
        raise ValueError("shape: fans are undefined for a scalar parameter, got shape ()")
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity, as ``torch.nn.init.calculate_gain``."""
    linear = ("linear", "identity", "conv1d", "conv2d", "conv3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise ValueError(
        f"nonlinearity: expected one of {list(linear) + ['tanh', 'relu', 'leaky_relu', 'selu']}, "
        f"got {nonlinearity!r}"
    )


def _fan(shape: tuple[int, ...], mode: str) -> int:
    fan_in, fan_out = compute_fans(shape)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    if mode == "fan_avg":
        return (fan_in + fan_out) / 2
    raise ValueError(f"mode: expected 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")


def _uniform_bound(
    key: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, bound: float
) -> torch.Tensor:
    return random.uniform(key, shape, dtype, -bound, bound)


def orthogonal(gain: float = 1.0) -> Initializer:
    """A (semi-)orthogonal matrix times ``gain`` (Saxe, McClelland & Ganguli, 2014).

    The weight is viewed as ``[shape[0], prod(shape[1:])]``; a Gaussian matrix is QR-decomposed and
    the signs of ``diag(R)`` folded into ``Q`` so that the result is Haar-distributed (as
    ``torch.nn.init.orthogonal_``). Rows are orthonormal when ``rows <= cols`` (``W W^T = gain^2 I``),
    columns otherwise (``W^T W = gain^2 I``). PPO implementations use ``gain=sqrt(2)`` for hidden
    layers, ``0.01`` for the policy head and ``1.0`` for the value head.
    """
    gain = float(gain)

    def init_fn(key: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if len(shape) < 2:
            raise ValueError(f"shape: orthogonal needs at least 2 dimensions, got {list(shape)}")
        rows, cols = shape[0], math.prod(shape[1:])
        # QR in at least float32: half-precision QR is not implemented on every backend.
        work_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        flat = random.normal(key, (max(rows, cols), min(rows, cols)), work_dtype)
        q, r = torch.linalg.qr(flat)
        q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
        if rows < cols:
            q = q.transpose(-2, -1)
        return (gain * q).reshape(shape).to(dtype)

    return Initializer(init_fn, f"orthogonal(gain={gain})")


def xavier_uniform(gain: float = 1.0) -> Initializer:
    """Glorot & Bengio (2010): ``U(-b, b)`` with ``b = gain * sqrt(6 / (fan_in + fan_out))``."""
    gain = float(gain)

    def init_fn(key, shape, dtype):
        fan_in, fan_out = compute_fans(shape)
        return _uniform_bound(key, shape, dtype, gain * math.sqrt(6.0 / (fan_in + fan_out)))

    return Initializer(init_fn, f"xavier_uniform(gain={gain})")


def xavier_normal(gain: float = 1.0) -> Initializer:
    """Glorot & Bengio (2010): ``N(0, std^2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    gain = float(gain)

    def init_fn(key, shape, dtype):
        fan_in, fan_out = compute_fans(shape)
        return gain * math.sqrt(2.0 / (fan_in + fan_out)) * random.normal(key, shape, dtype)

    return Initializer(init_fn, f"xavier_normal(gain={gain})")


def kaiming_uniform(a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "relu") -> Initializer:
    """He et al. (2015), as ``torch.nn.init.kaiming_uniform_``: ``U(-b, b)``, ``b = gain * sqrt(3 / fan)``.

    ``gain = calculate_gain(nonlinearity, a)``; ``mode`` picks ``fan_in`` or ``fan_out``.
    """
    gain = calculate_gain(nonlinearity, a)
    _fan((1, 1), mode)  # validate mode now, not at the first call

    def init_fn(key, shape, dtype):
        return _uniform_bound(key, shape, dtype, gain * math.sqrt(3.0 / _fan(shape, mode)))

    return Initializer(init_fn, f"kaiming_uniform(a={a}, mode={mode!r}, nonlinearity={nonlinearity!r})")


def kaiming_normal(a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "relu") -> Initializer:
    """He et al. (2015), as ``torch.nn.init.kaiming_normal_``: ``N(0, std^2)``, ``std = gain / sqrt(fan)``."""
    gain = calculate_gain(nonlinearity, a)
    _fan((1, 1), mode)

    def init_fn(key, shape, dtype):
        return gain / math.sqrt(_fan(shape, mode)) * random.normal(key, shape, dtype)

    return Initializer(init_fn, f"kaiming_normal(a={a}, mode={mode!r}, nonlinearity={nonlinearity!r})")


# The truncated normal on [-2, 2] has standard deviation 0.8796...; dividing by it restores the
# requested variance (the constant jax.nn.initializers.variance_scaling uses).
_TRUNCATED_STD = 0.87962566103423978


def lecun_normal() -> Initializer:
    """LeCun et al. (1998), as ``jax.nn.initializers.lecun_normal``: variance ``1 / fan_in``.

    Samples a standard normal truncated to ``[-2, 2]``, rescaled so the variance is exactly
    ``1 / fan_in`` (no value beyond two of the untruncated standard deviations).
    """

    def init_fn(key, shape, dtype):
        fan_in, _ = compute_fans(shape)
        std = math.sqrt(1.0 / fan_in) / _TRUNCATED_STD
        return std * random.truncated_normal(key, -2.0, 2.0, shape, dtype)

    return Initializer(init_fn, "lecun_normal()")


def lecun_uniform() -> Initializer:
    """LeCun et al. (1998), as ``jax.nn.initializers.lecun_uniform``: ``U(-b, b)``, ``b = sqrt(3/fan_in)``."""

    def init_fn(key, shape, dtype):
        fan_in, _ = compute_fans(shape)
        return _uniform_bound(key, shape, dtype, math.sqrt(3.0 / fan_in))

    return Initializer(init_fn, "lecun_uniform()")


def torch_default(fan_in: int | None = None) -> Initializer:
    """The distribution of ``nn.Linear``/``ConvNd.reset_parameters``: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    For a weight, ``fan_in`` comes from its shape (torch's ``kaiming_uniform_(a=sqrt(5))`` reduces
    to this bound). For a bias, pass the fan-in of the layer's weight: ``torch_default(fan_in=...)``;
    :func:`funrl.nets.init` does so for every ``Linear``/``Conv`` bias by default.
    """
    fixed_fan_in = None if fan_in is None else int(fan_in)

    def init_fn(key, shape, dtype):
        fan = compute_fans(shape)[0] if fixed_fan_in is None else fixed_fan_in
        bound = 1.0 / math.sqrt(fan) if fan > 0 else 0.0
        return _uniform_bound(key, shape, dtype, bound)

    suffix = "" if fixed_fan_in is None else f"fan_in={fixed_fan_in}"
    return Initializer(init_fn, f"torch_default({suffix})")


def uniform(minval: float = 0.0, maxval: float = 1.0) -> Initializer:
    """``U(minval, maxval)``."""
    minval, maxval = float(minval), float(maxval)
    if not maxval > minval:
        raise ValueError(f"maxval: expected maxval > minval, got minval={minval}, maxval={maxval}")

    def init_fn(key, shape, dtype):
        return random.uniform(key, shape, dtype, minval, maxval)

    return Initializer(init_fn, f"uniform({minval}, {maxval})")


def normal(std: float = 1.0, mean: float = 0.0) -> Initializer:
    """``N(mean, std^2)`` (``nn.Embedding``'s default is ``normal(1.0)``)."""
    std, mean = float(std), float(mean)

    def init_fn(key, shape, dtype):
        return mean + std * random.normal(key, shape, dtype)

    return Initializer(init_fn, f"normal(std={std}, mean={mean})")


def constant(value: float) -> Initializer:
    """Every entry equal to ``value`` (the key is ignored)."""
    value = float(value)

    def init_fn(key, shape, dtype):
        return torch.full(shape, value, dtype=dtype, device=key.device)

    return Initializer(init_fn, f"constant({value})")


zeros = Initializer(lambda key, shape, dtype: torch.zeros(shape, dtype=dtype, device=key.device), "zeros")
ones = Initializer(lambda key, shape, dtype: torch.ones(shape, dtype=dtype, device=key.device), "ones")

glorot_uniform = xavier_uniform
glorot_normal = xavier_normal
he_uniform = kaiming_uniform
he_normal = kaiming_normal


class Rule(NamedTuple):
    """A default initialisation rule by parameter kind, for :func:`funrl.nets.init`.

    ``weight`` initialises every weight-like parameter (2 or more dimensions: ``Linear``/``Conv``
    weights, RNN matrices, embeddings); ``bias`` initialises biases (parameters whose name ends in
    ``bias``). ``None`` keeps torch's default for that kind (``torch_default`` for ``Linear``/``Conv``,
    ``N(0, 1)`` for ``Embedding``, ``U(+-1/sqrt(hidden_size))`` for RNNs; for other layers, weights
    get ``torch_default()`` and biases ``torch_default`` with the fan-in of the layer's ``weight``, or
    of their own length if it has none — which differs from torch's own choice for some layers,
    e.g. ``MultiheadAttention``; give those a rule or overrides). Normalisation layers
    always get weight 1 and bias 0. A plain initialiser ``fn`` passed where a rule is expected means
    ``Rule(weight=fn, bias=zeros)`` (CleanRL's ``layer_init``: orthogonal weights, zero biases).
    """

    weight: InitFn | None = None
    bias: InitFn | None = None


FACTORIES = (
    orthogonal,
    xavier_uniform,
    xavier_normal,
    kaiming_uniform,
    kaiming_normal,
    lecun_normal,
    lecun_uniform,
    torch_default,
    uniform,
    normal,
    constant,
)
"""Factories: passing one of these uncalled where an initialiser is expected is a clear TypeError."""
