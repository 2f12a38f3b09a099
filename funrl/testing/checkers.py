"""Assertions about pure functions: trees close, purity, vmap, compile, recompiles, gradients, envs.

Each checker raises an ``AssertionError`` whose message names the check, the first leaf that
differs (as a path such as ``output[0]['w']``), its index and both values, so a failing test says
what broke without a debugger. They are eager tools: call them from tests, not from traced code.
Inputs a checker cannot work with (a malformed ``in_dims``, fewer than two calls) are
``TypeError``/``ValueError``, as anywhere in funrl.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optree
import torch

from funrl import control, envs
from funrl import random as frandom
from funrl import tree as ftree

__all__ = [
    "assert_trees_close",
    "assert_pure",
    "assert_vmap_equals_loop",
    "assert_compile_equals_eager",
    "assert_no_recompile",
    "assert_grad_finite",
    "check_env",
]

Tree = Any

# funrl.tree registers users' states under this optree namespace (funrl.tree.register_state).
_NAMESPACE = "funrl"


def _flatten(tree: Tree, prefix: str) -> tuple[list[str], list[Any], optree.PyTreeSpec]:
    """``(paths, leaves, structure)``; paths read like code, e.g. ``output[0].state['w']``."""
    accessors, leaves, spec = optree.tree_flatten_with_accessor(
        tree, none_is_leaf=False, namespace=_NAMESPACE
    )
    return [accessor.codify(prefix) for accessor in accessors], leaves, spec


def _clone_tensors(tree: Tree) -> Tree:
    """``tree`` with every tensor leaf cloned (other leaves kept), so later in-place writes show."""
    return optree.tree_map(
        lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x,
        tree,
        none_is_leaf=False,
        namespace=_NAMESPACE,
    )


def _describe_leaf_difference(path: str, actual: Any, expected: Any, rtol: float, atol: float) -> str | None:
    """What differs between two leaves (``None`` when they are close)."""
    # numpy arrays (what gymnasium-side code returns) compare as tensors of their dtype.
    actual, expected = (torch.tensor(x) if isinstance(x, np.ndarray) else x for x in (actual, expected))
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        if isinstance(actual, int | float) and isinstance(expected, int | float):
            if math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) or (
                math.isnan(actual) and math.isnan(expected)
            ):
                return None
        elif actual is expected or actual == expected:
            return None
        return f"leaf {path}: actual {actual!r}, expected {expected!r}"
    if actual.shape != expected.shape:
        return f"leaf {path}: actual shape {list(actual.shape)}, expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"leaf {path}: actual dtype {actual.dtype}, expected {expected.dtype}"
    if actual.device != expected.device:
        return f"leaf {path}: actual device {actual.device}, expected {expected.device}"
    actual, expected = actual.detach(), expected.detach()
    if actual.dtype.is_floating_point or actual.dtype.is_complex:
        close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = actual == expected
    if bool(close.all()):
        return None
    far = (~close).nonzero()
    index = tuple(far[0].tolist())
    text = (
        f"leaf {path} (shape {list(actual.shape)}) at index {index}: "
        f"actual {actual[index].item()!r}, expected {expected[index].item()!r}"
    )
    return text + f" ({far.shape[0]} of {actual.numel()} elements differ; rtol={rtol}, atol={atol})"


def _first_difference(actual: Tree, expected: Tree, prefix: str, rtol: float, atol: float) -> str | None:
    """The first difference between two trees, in leaf order (``None`` when they are close)."""
    paths, actual_leaves, actual_spec = _flatten(actual, prefix)
    _, expected_leaves, expected_spec = _flatten(expected, prefix)
    if actual_spec != expected_spec:
        return f"{prefix}: tree structures differ: actual {actual_spec}, expected {expected_spec}"
    for path, a, e in zip(paths, actual_leaves, expected_leaves, strict=True):
        difference = _describe_leaf_difference(path, a, e, rtol, atol)
        if difference is not None:
            return difference
    return None


def assert_trees_close(
    actual: Tree, expected: Tree, *, rtol: float = 1e-5, atol: float = 1e-8, name: str = "tree"
) -> None:
    """Assert two pytrees have one structure and leaves equal within ``atol + rtol * |expected|``.

    Tensor leaves must also agree in shape, dtype and device; NaNs compare equal; integer and bool
    tensors compare exactly; numpy arrays compare as tensors; other leaves compare with ``==``
    (numbers within the tolerances).

    Raises:
        AssertionError: naming the first differing leaf (``name`` is the root of its path), its
            index, both values and how many elements differ.
    """
    difference = _first_difference(actual, expected, name, rtol, atol)
    if difference is not None:
        raise AssertionError(f"assert_trees_close: {difference}")


def assert_pure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Assert ``fn(*args, **kwargs)`` gives the same output twice and leaves its inputs untouched.

    Outputs are compared exactly (bitwise, NaNs equal). The first output is copied before the
    second call, so a function that hands out and later rewrites one tensor is caught too.
    funrl's buffers' ``add`` donates its state on purpose and is not pure in this sense.

    Raises:
        AssertionError: naming the input leaf written in place, or the first output leaf that
            differs between the two calls.
    """
    inputs_before = _clone_tensors((args, kwargs))

    def check_inputs(after: str) -> None:
        difference = _first_difference((args, kwargs), inputs_before, "inputs", 0.0, 0.0)
        if difference is not None:
            raise AssertionError(f"assert_pure: fn modified its input in place ({after}): {difference}")

    first = _clone_tensors(fn(*args, **kwargs))
    check_inputs("first call")
    second = fn(*args, **kwargs)
    check_inputs("second call")
    difference = _first_difference(second, first, "output", 0.0, 0.0)
    if difference is not None:
        raise AssertionError(
            f"assert_pure: two calls with the same inputs gave different outputs (second vs first): {difference}"
        )


def _check_in_dims(in_dims: int | None | Sequence[int | None], num_args: int) -> tuple[int | None, ...]:
    if in_dims is None or isinstance(in_dims, int):
        in_dims = (in_dims,) * num_args
    if not isinstance(in_dims, Sequence) or len(in_dims) != num_args:
        raise ValueError(
            f"in_dims: expected an int, None or one entry per argument ({num_args}), got {in_dims!r}"
        )
    for dim in in_dims:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise TypeError(f"in_dims: expected entries that are ints or None, got {in_dims!r}")
    if all(dim is None for dim in in_dims):
        raise ValueError(f"in_dims: expected at least one batched argument (an int entry), got {in_dims!r}")
    return tuple(in_dims)


def _batch_size(args: Sequence[Any], in_dims: tuple[int | None, ...]) -> int:
    sizes = {
        (f"args[{i}]", leaf.shape[dim])
        for i, (arg, dim) in enumerate(zip(args, in_dims, strict=True))
        if dim is not None
        for leaf in ftree.leaves(arg)
        if isinstance(leaf, torch.Tensor)
    }
    found = {size for _, size in sizes}
    if len(found) != 1:
        raise ValueError(
            f"args: expected one batch size along in_dims over all batched tensors, got {sorted(sizes)}"
        )
    return found.pop()


def assert_vmap_equals_loop(
    fn: Callable[..., Any],
    in_dims: int | None | Sequence[int | None],
    *args: Any,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Assert ``vmap(fn, in_dims)(*args)[i]`` equals ``fn`` on member ``i`` of the batched args.

    Args:
        fn: the function under test; its outputs are stacked along dim 0 (vmap's ``out_dims=0``).
        in_dims: one entry per argument, an int (the batched dim of every tensor leaf of that
            argument) or ``None`` (passed whole to every member); a single int applies to all
            arguments.
        args: the arguments; every batched tensor leaf must have the same size along its dim.
        rtol, atol: tolerances (batched kernels may sum in another order).

    ``vmap`` runs with ``randomness="error"``: a function drawing from torch's global generator
    fails here (funrl draws from explicit keys).

    Raises:
        AssertionError: when ``vmap(fn)`` raises, or naming the first member ``i`` and output leaf
            that differ from the loop.
    """
    in_dims = _check_in_dims(in_dims, len(args))
    size = _batch_size(args, in_dims)
    try:
        batched = torch.func.vmap(fn, in_dims=in_dims)(*args)
    except Exception as err:  # any failure to batch is the finding; keep its message
        raise AssertionError(f"assert_vmap_equals_loop: vmap(fn) raised {type(err).__name__}: {err}") from err
    for i in range(size):
        member_args = [
            arg if dim is None else ftree.map(lambda x, d=dim, i=i: x.select(d, i), arg)
            for arg, dim in zip(args, in_dims, strict=True)
        ]
        expected = fn(*member_args)
        actual = ftree.map(lambda x, i=i: x.select(0, i), batched)
        difference = _first_difference(actual, expected, "output", rtol, atol)
        if difference is not None:
            raise AssertionError(
                f"assert_vmap_equals_loop: member {i} of {size}: vmap(fn) differs from fn on that member: "
                f"{difference}"
            )


def assert_compile_equals_eager(
    fn: Callable[..., Any],
    *args: Any,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    backend: str | Callable[..., Any] = "inductor",
) -> None:
    """Assert ``torch.compile(fn, fullgraph=True, backend=backend)(*args)`` equals ``fn(*args)``.

    ``backend="inductor"`` compiles through :func:`funrl.control.compile`, with the inductor options
    funrl's own steps use: plain inductor inlines Threefry's rounds into every read of a
    ``funrl.random`` draw, and its compile grows many times longer. Each side gets its own copy of
    ``args``, so a function that writes its inputs in place is compared fairly. A graph break is
    a failure (``fullgraph=True``): funrl's promise is one graph per step. ``backend="eager"`` or ``"aot_eager"`` check tracing only, without code generation.

    Raises:
        AssertionError: when compiling fails, or naming the first output leaf that differs.
    """
    expected = fn(*_clone_tensors(args))
    if backend == "inductor":
        compiled = control.compile(fn)
    else:
        compiled = torch.compile(fn, fullgraph=True, backend=backend)
    try:
        actual = compiled(*_clone_tensors(args))
    except Exception as err:  # a graph break or a compile error is the finding
        raise AssertionError(
            f"assert_compile_equals_eager: torch.compile(fn, fullgraph=True, backend={backend!r}) failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    difference = _first_difference(actual, expected, "output", rtol, atol)
    if difference is not None:
        raise AssertionError(f"assert_compile_equals_eager: compiled differs from eager: {difference}")


def _static_signature(args: Tree) -> dict[str, str]:
    """What dynamo guards on by default, per leaf: tensor shapes, dtypes, devices; other values."""
    paths, leaves, spec = _flatten(args, "args")
    signature = {"structure": str(spec)}
    for path, leaf in zip(paths, leaves, strict=True):
        if isinstance(leaf, torch.Tensor):
            signature[path] = f"{leaf.dtype} {list(leaf.shape)} on {leaf.device}"
            if leaf.requires_grad:
                signature[path] += " requiring grad"
        else:
            signature[path] = f"{leaf!r} (a Python {type(leaf).__name__}: compile specialises on its value)"
    return signature


def _signature_changes(first: Tree, later: Tree) -> str:
    before, after = _static_signature(first), _static_signature(later)
    changes = [
        f"{path}: {before.get(path, 'absent')} -> {after.get(path, 'absent')}"
        for path in dict.fromkeys([*before, *after])
        if before.get(path) != after.get(path)
    ]
    if not changes:
        return "no shape, dtype, device or Python value changed (a guard on a global or a closure?)"
    return "; ".join(changes)


def assert_no_recompile(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]) -> None:
    """Assert ``torch.compile(fn, fullgraph=True)`` compiles on the first call and never again.

    Each entry of ``calls`` is one call's positional arguments. Only dynamo's tracing runs (a
    counting backend that executes the traced graph as it is), so the check is cheap: whether a
    later call reuses the graph is decided by dynamo's guards, whatever the backend. Shapes are
    static (``dynamic=False``): a new shape counts as a recompile, as the first new shape does
    in a fresh process under torch's default. Typical findings: a Python float hyper-parameter
    (dynamo specialises on its value; pass a 0-d tensor), a new shape or dtype, a global read by
    ``fn``. Earlier compiles of ``fn`` in this process do not change the verdict.

    Raises:
        ValueError, TypeError: fewer than two calls, or a call that is not a tuple.
        AssertionError: naming the first call that compiled again and what changed in its
            arguments since the first call (``TORCH_LOGS=recompiles`` prints dynamo's reason).
    """
    calls = list(calls)
    if len(calls) < 2:
        raise ValueError(f"calls: expected at least two argument tuples, got {len(calls)}")
    for i, call in enumerate(calls):
        if not isinstance(call, tuple):
            raise TypeError(
                f"calls[{i}]: expected a tuple of positional arguments, got {type(call).__name__}"
            )

    graphs: list[torch.fx.GraphModule] = []

    def counting_backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(graph_module)
        return graph_module.forward

    def call_fn(*args: Any) -> Any:
        return fn(*args)

    # Dynamo keeps its compiled graphs per code object, at most 8 (recompile_limit): compiling
    # a new code object each time keeps earlier checks of fn from using up that limit.
    fresh = types.FunctionType(call_fn.__code__.replace(), globals(), "call_fn", None, call_fn.__closure__)
    # dynamic=False: dynamo also remembers (per function name and line) what changed between
    # compiles and traces it as dynamic later, so the verdict would depend on fn's history in
    # this process; this reports the first recompile a fresh process would make.
    compiled = torch.compile(fresh, fullgraph=True, dynamic=False, backend=counting_backend)
    for i, call in enumerate(calls):
        before = len(graphs)
        try:
            compiled(*call)
        except Exception as err:
            raise AssertionError(
                f"assert_no_recompile: call {i}: torch.compile(fn, fullgraph=True) failed: "
                f"{type(err).__name__}: {err}"
            ) from err
        compiled_now = len(graphs) - before
        if i == 0 and compiled_now != 1:
            raise AssertionError(
                f"assert_no_recompile: call 0 compiled {compiled_now} graphs, expected exactly 1 "
                "(dynamo's recompile limit for fn's code object reached?)"
            )
        if i > 0 and compiled_now:
            raise AssertionError(
                f"assert_no_recompile: call {i} of {len(calls)} compiled fn again; since call 0: "
                f"{_signature_changes(calls[0], call)}. TORCH_LOGS=recompiles shows the failed guard."
            )


def assert_grad_finite(loss_fn: Callable[[Any, Any], Any], params: Tree, batch: Any) -> None:
    """Assert ``loss_fn(params, batch)`` and its gradient with respect to ``params`` are finite.

    ``loss_fn`` returns a 0-d floating loss or ``(loss, aux)`` (funrl's losses return
    ``(loss, metrics)``); the gradient is ``torch.func.grad``'s, as a training step takes it.

    Raises:
        TypeError: ``loss_fn`` does not return a 0-d floating tensor (or a tuple starting with one).
        AssertionError: naming the loss, or the first gradient leaf and index, that is NaN or inf.
    """

    def loss_only(p: Tree) -> torch.Tensor:
        out = loss_fn(p, batch)
        return out[0] if isinstance(out, tuple) else out

    loss = loss_only(params)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.dtype.is_floating_point:
        got = f"{loss.dtype} {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise TypeError(f"loss_fn: expected a 0-d floating loss or (loss, aux), got {got}")
    if not bool(torch.isfinite(loss)):
        raise AssertionError(f"assert_grad_finite: the loss is {loss.item()}")
    grads = torch.func.grad(loss_only)(params)
    paths, leaves, _ = _flatten(grads, "grad")
    for path, grad in zip(paths, leaves, strict=True):
        bad = ~torch.isfinite(grad)
        if bool(bad.any()):
            index = tuple(bad.nonzero()[0].tolist())
            raise AssertionError(
                f"assert_grad_finite: leaf {path} (shape {list(grad.shape)}) at index {index}: "
                f"{grad[index].item()} ({int(bad.sum())} of {grad.numel()} elements not finite)"
            )


def check_env(
    env: Any,
    params: Any = None,
    *,
    seed: int = 0,
    num_steps: int = 300,
    random_reset: bool = True,
) -> None:
    """Validate a pure environment: :func:`funrl.envs.check`, and that ``reset`` uses its key.

    ``funrl.envs.check`` covers spaces, signatures, dtypes, observations inside the space,
    purity, auto-reset with ``info["final_obs"]``, determinism under a fixed key and vmap equal
    to a loop (read its docstring). On top, eight different keys must not all give the same first
    observation and state: an env whose reset ignores its key makes every seed of a vmapped run
    start alike. Pass ``random_reset=False`` for an env whose first state is fixed by design
    (``DeepSea-bsuite``, ``DiscountingChain-bsuite``, ``SpaceInvaders-MinAtar``).

    Raises:
        AssertionError: the first broken promise, with ``funrl.envs.check``'s message.
    """
    try:
        envs.check(env, params, seed=seed, num_steps=num_steps)
    except (TypeError, ValueError) as err:
        raise AssertionError(f"check_env: {err}") from err
    if not random_reset:
        return
    params = env.default_params if params is None else params
    keys = frandom.split(frandom.key(seed), 8)
    first = env.reset(keys[0], params)
    if all(ftree.tree_equal(first, env.reset(k, params)) for k in keys[1:]):
        raise AssertionError(
            "check_env: reset ignores its key: 8 different keys gave the same first observation and "
            "state (pass random_reset=False if the first state is fixed by design)"
        )
