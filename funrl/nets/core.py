"""Stateless networks: an ``nn.Module`` used as a skeleton plus a params dict.

``params = init(module, key)`` draws a fresh ``dict[str, Tensor]`` with the names and shapes of
``module.named_parameters()``; ``apply(module, params, *args)`` runs ``module.forward`` with those
tensors through ``torch.func.functional_call``. The module's own tensors are never read for
parameters, so a skeleton built on the ``meta`` device (no storage, see :func:`skeleton`) is all
``apply`` needs, and any ordinary user module works unchanged.

Keys per parameter. Each parameter draws from ``fold_in(key, crc32(name))``: its values depend on
the key and its own name only, so adding a layer to a network leaves the others' initial values
unchanged, and the order of ``named_parameters`` does not matter.

Buffers (e.g. BatchNorm's running statistics) are not parameters: ``init`` leaves them out, so
``grad`` over ``params`` never meets an integer counter. :func:`init_buffers` gives their initial
values; pass them to ``apply`` merged into the same dict (``apply(m, {**params, **buffers}, x)``).
Buffers left out of the dict are read from the module itself (an error if it lives on ``meta``).
In training mode BatchNorm writes its running statistics into the buffer tensors it is given, in
place (``functional_call`` semantics): pass fresh tensors (``tree.map(torch.clone, buffers)``) and
read them back if you want the update, or use ``eval()`` / ``track_running_stats=False`` for a pure
forward that vmaps.
"""

from __future__ import annotations

import copy
import itertools
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
import torch.nn as nn
from torch.func import functional_call

from funrl import random
from funrl.nets import initializers as inits
from funrl.nets.initializers import InitFn, Initializer, Rule

__all__ = [
    "Params",
    "init",
    "apply",
    "skeleton",
    "init_buffers",
    "init_ensemble",
    "subparams",
    "param_key",
]

Params = dict[str, torch.Tensor]

_BATCH_NORM_TYPES: tuple[type, ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)
_NORM_TYPES: tuple[type, ...] = (*_BATCH_NORM_TYPES, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)


def _check_module(module: Any) -> None:
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")


def skeleton(
    module_or_cls: type[nn.Module] | Callable[..., nn.Module] | nn.Module, *args, **kwargs
) -> nn.Module:
    """A module with no weights: built under ``torch.device("meta")``, or an existing one moved there.

    ``skeleton(nn.Linear, 4, 2)`` constructs on ``meta`` (no storage, no RNG draws);
    ``skeleton(my_module)`` returns a ``meta`` deep copy of an existing module and leaves it intact.
    funrl's own modules (``MLP``, ``NatureCNN``, heads) are built on ``meta`` by default already.
    """
    if isinstance(module_or_cls, nn.Module):
        if args or kwargs:
            raise TypeError("skeleton: extra arguments are only accepted with a module class or factory")
        meta = copy.deepcopy(module_or_cls).to("meta")
        meta.__dict__.pop(_SPEC_ATTR, None)  # the original's spec says which buffers are on meta
        return meta
    if not callable(module_or_cls):
        raise TypeError(
            "module_or_cls: expected an nn.Module class, factory or instance, got "
            f"{type(module_or_cls).__name__}"
        )
    with torch.device("meta"):
        module = module_or_cls(*args, **kwargs)
    _check_module(module)
    return module


def param_key(key: torch.Tensor, name: str) -> torch.Tensor:
    """The key a parameter named ``name`` draws from: ``fold_in(key, crc32(name))``."""
    return random.fold_in(key, zlib.crc32(name.encode("utf-8")))


def _as_rule(value: Any, name: str) -> Rule:
    if value is None:
        return Rule()
    if isinstance(value, Rule):
        return value
    return Rule(weight=_check_init_fn(value, name), bias=inits.zeros)


def _check_init_fn(fn: Any, name: str) -> InitFn:
    if fn in inits.FACTORIES:
        raise TypeError(
            f"{name}: got the initialiser factory {fn.__name__}; call it to make an initialiser, "
            f"e.g. {fn.__name__}()"
        )
    if not callable(fn):
        raise TypeError(
            f"{name}: expected an initialiser init_fn(key, shape, dtype) or a Rule, got {type(fn).__name__}"
        )
    return fn


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, local = name.rpartition(".")
    return (module.get_submodule(path) if path else module), local


def _torch_default(owner: nn.Module, local: str, shape: tuple[int, ...], name: str) -> InitFn:
    """torch's own ``reset_parameters`` distribution for the parameter kinds it is defined for."""
    if isinstance(owner, nn.RNNBase):
        return inits.uniform(-(owner.hidden_size**-0.5), owner.hidden_size**-0.5)
    if isinstance(owner, nn.Embedding):
        return _embedding_default(owner.padding_idx)
    if local.endswith("bias"):
        weight = getattr(owner, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
            return inits.torch_default(fan_in=inits.compute_fans(tuple(weight.shape))[0])
        return inits.torch_default()
    if len(shape) >= 2:
        return inits.torch_default()
    raise ValueError(
        f"init: no default initialiser for parameter {name!r} of shape {list(shape)} in "
        f"{type(owner).__name__} (not a weight, bias or normalisation parameter); give one with "
        f"overrides={{{name!r}: ...}} or define {type(owner).__name__}.funrl_initializers()"
    )


def _embedding_default(padding_idx: int | None) -> InitFn:
    def init_fn(key, shape, dtype):
        weight = inits.normal(1.0)(key, shape, dtype)
        if padding_idx is not None:
            # nn.Embedding keeps the padding row at zero.
            weight = weight.index_fill(0, torch.tensor(padding_idx, device=weight.device), 0.0)
        return weight

    return Initializer(init_fn, f"embedding_default(padding_idx={padding_idx})")


def _choose_init_fn(
    module: nn.Module,
    name: str,
    shape: tuple[int, ...],
    rule: Rule,
    exact: InitFn | None,
) -> InitFn:
    if exact is not None:
        return exact
    owner, local = _owner(module, name)
    declared = getattr(owner, "funrl_initializers", None)
    if callable(declared):
        table = declared()
        if local in table:
            return table[local]
    if isinstance(owner, _NORM_TYPES):
        return inits.zeros if local.endswith("bias") else inits.ones
    if local.endswith("bias"):
        return rule.bias if rule.bias is not None else _torch_default(owner, local, shape, name)
    if len(shape) >= 2:
        return rule.weight if rule.weight is not None else _torch_default(owner, local, shape, name)
    return _torch_default(owner, local, shape, name)


def _matches(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _plan(
    module: nn.Module,
    initializer: Any,
    overrides: Mapping[str, Any] | None,
) -> dict[str, tuple[InitFn, nn.Parameter]]:
    """For each parameter name, the initialiser it gets and the skeleton parameter (shape, dtype)."""
    default_rule = _as_rule(initializer, "initializer")
    named = dict(module.named_parameters())
    overrides = dict(overrides or {})
    for prefix, value in overrides.items():
        if not isinstance(prefix, str):
            raise TypeError(f"overrides: expected str keys (module paths), got {prefix!r}")
        if not any(_matches(prefix, n) for n in named):
            raise ValueError(
                f"overrides: {prefix!r} matches no parameter of {type(module).__name__}; "
                f"parameters are {sorted(named)}"
            )
        if prefix not in named:
            _as_rule(value, f"overrides[{prefix!r}]")
        else:
            _check_init_fn(value, f"overrides[{prefix!r}]")
    plan = {}
    for name, param in named.items():
        matching = [p for p in overrides if _matches(p, name)]
        rule, exact = default_rule, None
        if matching:
            best = max(matching, key=len)  # the most specific path wins
            if best == name:
                exact = overrides[best]
            else:
                rule = _as_rule(overrides[best], f"overrides[{best!r}]")
        plan[name] = (_choose_init_fn(module, name, tuple(param.shape), rule, exact), param)
    return plan


def init(
    module: nn.Module,
    key: torch.Tensor,
    initializer: InitFn | Rule | None = None,
    overrides: Mapping[str, InitFn | Rule] | None = None,
    dtype: torch.dtype | None = None,
) -> Params:
    """Fresh parameters for ``module``, a pure function of ``key``.

    Args:
        module: any ``nn.Module`` (a ``meta`` skeleton or an ordinary one; its values are not read).
        key: a ``funrl.random`` key (int64, shape ``[2]``); params are created on its device.
        initializer: the default rule: ``None`` for torch's defaults, an initialiser
            ``init_fn(key, shape, dtype)`` for weights with zero biases, or a :class:`Rule`.
        overrides: module-path prefix -> initialiser or rule, e.g.
            ``{"actor.4": orthogonal(0.01), "critic.4": orthogonal(1.0)}``. The longest matching
            prefix wins; a key naming one parameter exactly (``"actor.4.bias"``) applies that
            initialiser to it as is. Normalisation layers keep weight 1 / bias 0 under rules.
        dtype: floating dtype of the params; defaults to each skeleton parameter's dtype.

    Returns:
        ``dict[str, Tensor]`` with the names, shapes and order of ``module.named_parameters()``
        (tied parameters appear once, as there). Buffers are not included: see :func:`init_buffers`.

    Modules may declare initialisers for their own special parameters with a method
    ``funrl_initializers() -> {local_name: init_fn}`` (``GaussianActor``'s ``log_std`` does); it
    takes precedence over rules, and only an exact-name override beats it.
    """
    _check_module(module)
    random._check_key(key)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype: expected a floating torch.dtype or None, got {dtype!r}")
    plan = _plan(module, initializer, overrides)
    params = {}
    for name, (init_fn, param) in plan.items():
        shape = tuple(param.shape)
        param_dtype = dtype if dtype is not None and param.dtype.is_floating_point else param.dtype
        value = init_fn(param_key(key, name), shape, param_dtype)
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape or value.dtype != param_dtype:
            got = (
                f"shape {list(value.shape)}, dtype {value.dtype}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise ValueError(
                f"initializer for {name!r}: expected a tensor of shape {list(shape)} and dtype "
                f"{param_dtype}, got {got}"
            )
        # Contiguous, so a compiled step that returns fresh params sees the same strides next call.
        params[name] = value.contiguous()
    _spec(module)  # read now, eagerly, so that a compiled apply finds it on the module
    return params


def init_buffers(module: nn.Module, device: torch.device | str | None = None) -> Params:
    """Initial values of ``module``'s buffers (``named_buffers`` names), as fresh tensors.

    Real buffers are copied. Buffers of a ``meta`` skeleton get the values their layer's
    ``reset_running_stats`` sets (BatchNorm/InstanceNorm: ``running_mean`` 0, ``running_var`` 1,
    ``num_batches_tracked`` 0); any other ``meta`` buffer has no recoverable value, which is an
    error: build such a module on a real device.
    """
    _check_module(module)
    out = {}
    for name, buf in module.named_buffers():
        owner, local = _owner(module, name)
        target = device if device is not None else (buf.device if not buf.is_meta else "cpu")
        if not buf.is_meta:
            out[name] = buf.detach().clone().to(target)
        elif isinstance(owner, _BATCH_NORM_TYPES) and local in (
            "running_mean",
            "running_var",
            "num_batches_tracked",
        ):
            fill = 1 if local == "running_var" else 0
            out[name] = torch.full(tuple(buf.shape), fill, dtype=buf.dtype, device=target)
        else:
            raise ValueError(
                f"module: buffer {name!r} lives on the meta device and has no initial value; "
                f"build {type(owner).__name__} on a real device to use its buffers"
            )
    return out


class _Spec(NamedTuple):
    """What ``apply`` checks params against: names -> shapes, and which buffers live on ``meta``.

    ``aliases`` lists ``(alias, canonical)`` names of tied tensors (one tensor registered under two
    names): ``apply`` passes the canonical value under both, so ``functional_call`` need not search
    for ties on every call (``tie_weights=False``).
    """

    parameters: dict[str, torch.Size]
    buffers: dict[str, torch.Size]
    meta_buffers: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...]


# Read once per module object and kept on it as a plain attribute (not a submodule, parameter or
# buffer), where compiled code can read it too: walking the module tree on every call would cost
# more than functional_call itself on a small policy, and gives dynamo the whole walk to trace.
# ``init`` reads it eagerly, so compiled code normally finds it. Skeletons are fixed descriptions;
# a module whose parameters are added or replaced after its first ``apply`` (or ``init``) must be
# rebuilt.
_SPEC_ATTR = "_funrl_apply_spec"


def _read_spec(module: nn.Module) -> _Spec:
    buffers = dict(module.named_buffers())
    first_name: dict[int, str] = {}
    aliases = []
    everything = itertools.chain(
        module.named_parameters(remove_duplicate=False), module.named_buffers(remove_duplicate=False)
    )
    for name, tensor in everything:
        canonical = first_name.setdefault(id(tensor), name)
        if canonical != name:
            aliases.append((name, canonical))
    return _Spec(
        parameters={name: p.shape for name, p in module.named_parameters()},
        buffers={name: b.shape for name, b in buffers.items()},
        meta_buffers=tuple(name for name, b in buffers.items() if b.is_meta),
        aliases=tuple(aliases),
    )


def _spec(module: nn.Module) -> _Spec:
    spec = getattr(module, _SPEC_ATTR, None)
    if spec is None:
        spec = _read_spec(module)
        object.__setattr__(module, _SPEC_ATTR, spec)
    return spec


def _check_params(module: nn.Module, params: Any) -> _Spec:
    if not isinstance(params, Mapping):
        raise TypeError(
            f"params: expected a dict[str, Tensor] from funrl.nets.init, got {type(params).__name__}"
        )
    spec = _spec(module)
    expected, buffers = spec.parameters, spec.buffers
    missing = [n for n in expected if n not in params]
    if missing:
        raise ValueError(f"params: missing parameters {missing} of {type(module).__name__}")
    for name, value in params.items():
        want = expected.get(name)
        if want is None:
            want = buffers.get(name)
            if want is None:
                extra = [n for n in params if n not in expected and n not in buffers]
                raise ValueError(
                    f"params: unexpected names {extra}; {type(module).__name__} has parameters "
                    f"{list(expected)} and buffers {list(buffers)}"
                )
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"params[{name!r}]: expected a Tensor, got {type(value).__name__}")
        if value.shape != want:
            raise ValueError(
                f"params[{name!r}]: expected shape {list(want)}, got {list(value.shape)} "
                "(for an ensemble, vmap apply over the stacked params)"
            )
    meta_buffers = [n for n in spec.meta_buffers if n not in params]
    if meta_buffers:
        raise ValueError(
            f"params: buffers {meta_buffers} are not given and the module's own live on the meta "
            "device; pass {**params, **funrl.nets.init_buffers(module)}"
        )
    return spec


def apply(module: nn.Module, params: Mapping[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)`` computed with ``params`` instead of the module's own tensors.

    ``params`` holds every parameter name of ``module`` (as :func:`init` returns) and optionally
    buffers (see :func:`init_buffers`). Names, types and shapes are checked before the call (static
    checks, no host sync; the module's names and shapes are read at its first ``apply`` and
    remembered, so do not add or replace its parameters afterwards). An ensemble is
    ``vmap(apply, in_dims=(None, 0, None))(module, stacked, x)``.
    """
    _check_module(module)
    spec = _check_params(module, params)
    values = params if isinstance(params, dict) and not spec.aliases else dict(params)
    for alias, canonical in spec.aliases:
        if canonical in values:
            values[alias] = values[canonical]
    return functional_call(module, values, args, kwargs, tie_weights=False)


def init_ensemble(
    module: nn.Module,
    key: torch.Tensor,
    n: int,
    initializer: InitFn | Rule | None = None,
    overrides: Mapping[str, InitFn | Rule] | None = None,
    dtype: torch.dtype | None = None,
    use_vmap: bool = True,
) -> Params:
    """``n`` independent parameter sets stacked on a leading dimension.

    Member ``i`` equals ``init(module, split(key, n)[i], ...)``. With ``use_vmap`` (default) all
    members are drawn in one ``torch.func.vmap`` over the keys (batched ops, e.g. one batched QR for
    orthogonal weights); otherwise a Python loop and ``funrl.tree.stack``. Either way every leaf is
    a contiguous tensor of its own (no broadcast views), safe for in-place optimiser updates.
    """
    _check_module(module)
    random._check_key(key)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    keys = random.split(key, n)
    if use_vmap:
        # Validate the plan eagerly, outside vmap, so errors read plainly.
        _plan(module, initializer, overrides)
        stacked = torch.func.vmap(
            lambda k: init(module, k, initializer, overrides, dtype), randomness="error"
        )(keys)
        return {name: value.contiguous() for name, value in stacked.items()}
    from funrl import tree

    return tree.stack([init(module, k, initializer, overrides, dtype) for k in keys])


def subparams(params: Mapping[str, torch.Tensor], prefix: str) -> Params:
    """The entries of ``params`` under a submodule path, renamed relative to it.

    ``apply(ac.critic, subparams(params, "critic"), obs)`` runs one head of a composite network.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix: expected a non-empty module path, got {prefix!r}")
    cut = len(prefix) + 1
    out = {name[cut:]: value for name, value in params.items() if name.startswith(prefix + ".")}
    if not out:
        raise ValueError(f"prefix: no entry of params lies under {prefix!r}; names are {list(params)}")
    return out
