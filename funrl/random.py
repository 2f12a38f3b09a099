"""Explicit, splittable PRNG keys: Threefry-2x32 (20 rounds) in pure torch integer ops.

No function here touches torch's global generator. A key is an ``int64`` tensor of shape ``[2]``
holding two unsigned 32-bit words; a batch of keys is a tensor of shape ``[..., 2]`` and every
function batches over it with ``torch.func.vmap``.

Threefry-2x32 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011) is a counter-based generator: the output is a pure function of ``(key, counter)``. It
uses only 32-bit additions, rotations and xors, which we carry in ``int64`` and mask back to 32
bits; no intermediate needs more than 34 bits, so it is exact on every backend, eager or under
inductor, CPU or GPU. The key and counter layout follow ``jax.random`` under its current default
(``jax_threefry_partitionable=True``), so ``key``, ``split``, ``fold_in``, ``bits`` and
``uniform`` give the same numbers as JAX for the same seed.

Every function is one sequence of torch ops, the same eagerly, under ``vmap`` and ``grad`` and
under ``torch.compile``. Eagerly each op is a separate dispatch, so a draw costs about as many
dispatches as the block function has ops: it runs on a whole vector of counters at once (one call
for all of ``split``'s keys or a draw's elements), and each round is written in as few ops as
exactness allows. Compiled, inductor fuses the rounds into one loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "Key",
    "key",
    "split",
    "fold_in",
    "threefry2x32",
    "bits",
    "block_words",
    "uniform",
    "normal",
    "truncated_normal",
    "randint",
    "bernoulli",
    "gumbel",
    "categorical",
    "permutation",
    "choice",
    "exponential",
]

Key = torch.Tensor
"""A PRNG key: ``int64`` tensor of shape ``[2]`` (or ``[..., 2]`` for a batch of keys)."""

_MASK32 = 0xFFFFFFFF
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA

Shape = int | Sequence[int] | torch.Size


def _as_shape(shape: Shape, name: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    if isinstance(shape, (str, bytes)):
        raise TypeError(f"{name}: expected an int or a sequence of ints, got {shape!r}")
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected an int or a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"{name}: expected non-negative sizes, got {out}")
    return out


def _check_key(k: Key, name: str = "key") -> None:
    if not isinstance(k, torch.Tensor):
        raise TypeError(
            f"{name}: expected a key tensor (int64, shape [2]) from funrl.random.key, got {type(k).__name__}"
        )
    if k.dtype != torch.int64:
        raise TypeError(f"{name}: expected dtype torch.int64, got {k.dtype}")
    if k.shape != (2,):
        raise ValueError(
            f"{name}: expected shape [2] (a single key; vmap over a batch of keys), got {list(k.shape)}"
        )


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    """Rotate the 32-bit words ``x`` left by ``r``: the low ``32 - r`` bits move up by ``r``, the
    high ``r`` bits move down to the bottom. The two parts share no bit, so one ``add`` with
    ``alpha=2**r`` joins them (one op fewer than shift, shift, or, mask)."""
    return torch.add(x >> (32 - r), x & ((1 << (32 - r)) - 1), alpha=1 << r)


def threefry2x32(
    key_words: tuple[torch.Tensor, torch.Tensor],
    counter_words: tuple[torch.Tensor | int, torch.Tensor | int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Threefry-2x32 block function with 20 rounds (Salmon et al., SC 2011; Random123).

    Args:
        key_words: two int64 tensors holding the key's 32-bit words ``(k0, k1)``.
        counter_words: two int64 tensors (or Python ints) holding the counter's 32-bit words
            ``(c0, c1)``; broadcast against the key words.

    Returns:
        The two 32-bit output words, as int64 tensors of the broadcast shape.
    """
    k0, k1 = key_words
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    # x0 may carry bits above 32 between rounds: every round masks it right after its add, before
    # it reaches x1. x1 stays exact, since the rotation reads its top bits.
    x0 = counter_words[0] + k0
    x1 = (counter_words[1] + k1) & _MASK32
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = (x0 + x1) & _MASK32
            x1 = _rotl32(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = (x1 + (ks[(block + 2) % 3] + (block + 1))) & _MASK32
    return x0 & _MASK32, x1


def key(seed: int | torch.Tensor) -> Key:
    """A key from an integer seed: ``[seed >> 32, seed & 0xFFFFFFFF]`` (64-bit two's complement).

    Equal to ``jax.random.PRNGKey(seed)`` with ``jax_enable_x64``; without it JAX keeps only the
    low 32 bits of a seed, so the two agree for seeds in ``[0, 2**31)``.

    A tensor seed (int64, any shape) gives keys of shape ``[*seed.shape, 2]``.
    """
    if isinstance(seed, torch.Tensor):
        if seed.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"seed: expected an integer tensor, got dtype {seed.dtype}")
        seed = seed.to(torch.int64)
        return torch.stack([(seed >> 32) & _MASK32, seed & _MASK32], dim=-1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed: expected a value representable in 64 bits, got {seed}")
    seed &= 2**64 - 1
    return torch.tensor([seed >> 32, seed & _MASK32], dtype=torch.int64)


def _block(k: Key, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The Threefry block words behind each element of ``shape``: element ``i`` (flat index) is
    ``threefry2x32(key, (i >> 32, i & 0xFFFFFFFF))``, JAX's ``iota_2x32_shape`` counters."""
    counter = torch.arange(math.prod(shape), dtype=torch.int64, device=k.device).reshape(shape)
    return threefry2x32(k.unbind(), (counter >> 32, counter & _MASK32))


def split(key: Key, num: int = 2) -> Key:
    """``num`` new independent keys, shape ``[num, 2]``; equal to ``jax.random.split(key, num)``."""
    _check_key(key)
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"num: expected a positive int, got {num!r}")
    return torch.stack(_block(key, (num,)), dim=-1)


def fold_in(key: Key, data: int | torch.Tensor) -> Key:
    """A new key derived from ``key`` and a 32-bit integer ``data``; equal to ``jax.random.fold_in``.

    ``data`` may be a Python int or an integer tensor (a scalar, or batched under vmap), so a
    step counter inside a compiled loop folds in without a host sync.
    """
    _check_key(key)
    if isinstance(data, torch.Tensor):
        if data.dtype.is_floating_point or data.dtype == torch.bool or data.dtype.is_complex:
            raise TypeError(f"data: expected an integer tensor, got dtype {data.dtype}")
        if data.dim() != 0:
            raise ValueError(f"data: expected a scalar (vmap for a batch), got shape {list(data.shape)}")
        word = data.to(device=key.device, dtype=torch.int64) & _MASK32
    elif not isinstance(data, int) or isinstance(data, bool):
        raise TypeError(f"data: expected an int or an integer tensor, got {type(data).__name__}")
    else:
        word = data & _MASK32
    return torch.stack(threefry2x32(key.unbind(), (0, word)), dim=-1)


def block_words(key: Key, shape: Shape = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Both 32-bit output words ``(y0, y1)`` of the Threefry block behind each element of ``shape``.

    ``bits`` returns ``y0 ^ y1``, one word per block, as JAX does; code that needs many random
    words per call (a reset drawn for every env on every compiled step) can use both words and
    spend half the blocks.
    """
    _check_key(key)
    return _block(key, _as_shape(shape))


def bits(key: Key, shape: Shape = ()) -> torch.Tensor:
    """Uniform random 32-bit words (values in ``[0, 2**32)``, held as int64) of the given shape.

    Equal to ``jax.random.bits(key, shape, dtype=uint32)``: element ``i`` (flat index) is
    ``y0 ^ y1`` where ``(y0, y1) = threefry2x32(key, (i >> 32, i & 0xFFFFFFFF))``.
    """
    _check_key(key)
    shape = _as_shape(shape)
    y0, y1 = _block(key, shape)
    return y0 ^ y1


def _check_float_dtype(dtype: torch.dtype) -> None:
    if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise TypeError(f"dtype: expected a floating dtype, got {dtype}")


def _unit_uniform(key: Key, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Floats in ``[0, 1)`` from the top mantissa bits, as JAX does (exact, no rounding up to 1)."""
    if dtype == torch.float64:
        # 52 mantissa bits from the 64-bit word (y0 << 32 | y1), as jax.random does for float64.
        y0, y1 = _block(key, shape)
        mantissa = (y0 << 20) | (y1 >> 12)
        return mantissa.to(torch.float64) * 2.0**-52
    word = bits(key, shape)
    if dtype == torch.float32:
        return (word >> 9).to(torch.float32) * 2.0**-23
    nmant = {torch.float16: 10, torch.bfloat16: 7}[dtype]
    # Low precision: draw in float32 resolution of the type's own mantissa, exact in the type.
    return ((word >> (32 - nmant)).to(torch.float32) * 2.0**-nmant).to(dtype)


def uniform(
    key: Key,
    shape: Shape = (),
    dtype: torch.dtype = torch.float32,
    minval: float | torch.Tensor = 0.0,
    maxval: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """Uniform samples in ``[minval, maxval)``, as ``jax.random.uniform`` draws them.

    For float32/float64 the unit floats in ``[0, 1)`` are bit-identical to JAX's. Scaling by
    ``u * (maxval - minval) + minval`` rounds twice here, while XLA fuses it into one
    multiply-add, so for other bounds a value may differ from JAX's by one ulp. A value that
    rounds onto ``maxval`` is clamped to the float just below it (JAX would return ``maxval``).
    ``minval`` and ``maxval`` may be tensors broadcastable to ``shape``.
    """
    _check_key(key)
    _check_float_dtype(dtype)
    shape = _as_shape(shape)
    u = _unit_uniform(key, shape, dtype)
    if (
        not isinstance(minval, torch.Tensor)
        and not isinstance(maxval, torch.Tensor)
        and (minval, maxval) == (0, 1)
    ):
        # Already in [0, 1): the scaling and clamping below would leave every value as it is, in
        # nine eager ops (most of a small draw's time).
        return u
    out = u * (maxval - minval) + minval
    low = torch.as_tensor(minval, dtype=dtype, device=key.device)
    high = torch.as_tensor(maxval, dtype=dtype, device=key.device)
    # Rounding in the scaling can land on maxval itself (numpy and JAX document this caveat);
    # clamping to the float below it keeps the promised half-open interval.
    below_high = torch.nextafter(high, torch.full_like(high, -math.inf))
    return torch.maximum(torch.minimum(out, below_high), low)


def normal(key: Key, shape: Shape = (), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal samples by the inverse error function, as ``jax.random.normal`` draws them."""
    _check_key(key)
    _check_float_dtype(dtype)
    shape = _as_shape(shape)
    # The float just above -1 (JAX's nextafter(-1, 0)): spacing below 1 is half of eps.
    lo = -1.0 + torch.finfo(dtype).eps / 2
    u = uniform(key, shape, dtype, lo, 1.0)
    return math.sqrt(2.0) * torch.erfinv(u)


def truncated_normal(
    key: Key,
    lower: float | torch.Tensor,
    upper: float | torch.Tensor,
    shape: Shape = (),
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Standard normal samples truncated to ``(lower, upper)``, by inverting the CDF."""
    _check_key(key)
    _check_float_dtype(dtype)
    shape = _as_shape(shape)
    sqrt2 = math.sqrt(2.0)
    lower = torch.as_tensor(lower, dtype=dtype, device=key.device)
    upper = torch.as_tensor(upper, dtype=dtype, device=key.device)
    a = torch.erf(lower / sqrt2)
    b = torch.erf(upper / sqrt2)
    u = uniform(key, shape, dtype, a, b)
    out = sqrt2 * torch.erfinv(u)
    # Clamp into the open interval: rounding in erfinv may land on (or past) a bound. nextafter,
    # not a relative eps, so infinite bounds stay finite-safe (inf * eps would give nan).
    inside_lower = torch.nextafter(lower, torch.full_like(lower, math.inf))
    inside_upper = torch.nextafter(upper, torch.full_like(upper, -math.inf))
    return torch.clamp(out, inside_lower, inside_upper)


def randint(
    key: Key,
    shape: Shape,
    low: int | torch.Tensor,
    high: int | torch.Tensor,
) -> torch.Tensor:
    """Integers uniform in ``[low, high)``, int64.

    Uses 63 random bits per draw reduced modulo the range, so the bias is below
    ``(high - low) / 2**63``. ``low`` and ``high`` may be integer tensors broadcastable to
    ``shape`` (e.g. a per-env range under vmap).
    """
    _check_key(key)
    shape = _as_shape(shape)
    if isinstance(low, int) and isinstance(high, int) and high <= low:
        raise ValueError(f"high: expected high > low, got low={low}, high={high}")
    y0, y1 = _block(key, shape)
    span_int = high - low if isinstance(low, int) and isinstance(high, int) else 0
    if 0 < span_int <= 2**32 and span_int & (span_int - 1) == 0:
        # A power-of-two span up to 2**32 divides 2**32, so the remainder of the 63-bit word is
        # the low bits of y1: the same values, without an int64 division (scalar on CPUs, where
        # it cost more than the Threefry block itself in a compiled random-policy step).
        return low + (y1 & (span_int - 1))
    word63 = ((y0 >> 1) << 32) | y1
    span = torch.as_tensor(high, dtype=torch.int64, device=key.device) - low
    return low + torch.remainder(word63, span)


def bernoulli(key: Key, p: float | torch.Tensor = 0.5, shape: Shape | None = None) -> torch.Tensor:
    """Booleans that are True with probability ``p``; shape defaults to ``p``'s shape."""
    _check_key(key)
    p = torch.as_tensor(p, device=key.device)
    if not p.dtype.is_floating_point:
        p = p.to(torch.float32)
    shape = tuple(p.shape) if shape is None else _as_shape(shape)
    return uniform(key, shape, p.dtype) < p


def gumbel(key: Key, shape: Shape = (), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard Gumbel samples ``-log(-log(u))`` with ``u`` in ``(0, 1)``."""
    _check_key(key)
    _check_float_dtype(dtype)
    shape = _as_shape(shape)
    tiny = torch.finfo(dtype).tiny
    u = uniform(key, shape, dtype, tiny, 1.0)
    return -torch.log(-torch.log(u))


def exponential(key: Key, shape: Shape = (), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard exponential samples ``-log1p(-u)``."""
    _check_key(key)
    _check_float_dtype(dtype)
    return -torch.log1p(-uniform(key, shape, dtype))


def categorical(key: Key, logits: torch.Tensor, dim: int = -1, shape: Shape | None = None) -> torch.Tensor:
    """Indices drawn from ``softmax(logits)`` along ``dim`` by the Gumbel-max trick, int64.

    The output has ``logits``' shape without ``dim``; ``shape`` may prepend sample dimensions.
    """
    _check_key(key)
    if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point:
        raise TypeError(
            f"logits: expected a floating tensor, got {getattr(logits, 'dtype', type(logits).__name__)}"
        )
    if logits.dim() == 0:
        raise ValueError("logits: expected at least one dimension (the categories), got a scalar")
    batch = _as_shape(shape) if shape is not None else ()
    g = gumbel(key, batch + tuple(logits.shape), logits.dtype)
    return torch.argmax(logits + g, dim=dim if dim < 0 else dim + len(batch))


def permutation(key: Key, n: int | torch.Tensor) -> torch.Tensor:
    """A uniformly random permutation of ``range(n)`` (or of the rows of tensor ``n``).

    Sorts 64-bit random keys; ties have probability about ``n**2 / 2**64``.
    """
    _check_key(key)
    if isinstance(n, torch.Tensor):
        if n.dim() == 0:
            raise ValueError("n: expected an int or a tensor with at least one dimension")
        return n[permutation(key, n.shape[0])]
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    y0, y1 = _block(key, (n,))
    sort_keys = ((y0 >> 1) << 32) | y1
    return torch.argsort(sort_keys)


def choice(
    key: Key,
    n: int,
    shape: Shape = (),
    replace: bool = True,
    p: torch.Tensor | None = None,
) -> torch.Tensor:
    """Indices in ``range(n)``: uniform, or with probabilities ``p``; with or without replacement.

    Without replacement and with ``p``, uses the Gumbel-top-k trick (sampling proportional to
    ``p`` sequentially without replacement).
    """
    _check_key(key)
    shape = _as_shape(shape)
    count = math.prod(shape)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    if not replace and count > n:
        raise ValueError(f"shape: cannot draw {count} items without replacement from n={n}")
    if p is not None:
        if not isinstance(p, torch.Tensor) or p.shape != (n,):
            got = list(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
            raise ValueError(f"p: expected a tensor of shape [{n}], got {got}")
        logits = torch.log(p)
        if replace:
            return categorical(key, logits, shape=shape)
        g = gumbel(key, (n,), logits.dtype)
        return torch.topk(logits + g, count).indices.reshape(shape)
    if replace:
        return randint(key, shape, 0, n)
    return permutation(key, n)[:count].reshape(shape)
