"""The adapter between funrl and torch's compiler: loops, the "am I traced?" question, compiling.

``torch.compile`` of a Python loop unrolls it, so a long rollout makes a huge graph that takes
minutes to compile. torch's ``scan`` higher-order op keeps the loop as one node but is a prototype
API that runs only under the compiler, so everything in funrl loops through :func:`scan`: the op
while ``torch.compile`` traces, a plain Python loop otherwise. Both paths compute the same
function; ``tests/test_control.py`` checks it.

This is the one module of funrl that uses private torch APIs; everything else uses public ones.
Each is listed here with the reason it is needed. Tested with torch 2.13.0.

- ``torch._higher_order_ops.scan.scan``: the loop op behind :func:`scan` and :func:`fori_loop`
  under ``torch.compile`` (no public loop op exists).
- ``torch.utils._pytree`` (``tree_flatten``, ``tree_unflatten``, ``tree_map``, ``tree_leaves``,
  ``register_pytree_node``): the pytree library that ``torch.func.vmap``, ``torch.compile`` and
  the scan op use. :func:`scan` flattens carries with it so that they match what the op sees, and
  :func:`register_pytree_node` (used by ``funrl.tree.register_state``) registers a user's
  container with it so that vmap and compile see through it.
- ``torch._C._functorch.peek_interpreter_stack``: in :func:`is_traced`, whether a ``torch.func``
  transform (vmap, grad) is running the caller; torch has no public query for it.
- inductor's ``unsafe_marked_cacheable_functions`` option and
  ``torch._inductor.cpu_vec_isa.pick_vec_isa``: in :func:`compile`. torch does not store graphs
  holding the scan op in its on-disk compile caches (the op is not marked cacheable), so every
  process would compile funrl's update steps from scratch. The option marks the op cacheable;
  its value joins the cache key and names funrl's version and the CPU vector instruction set
  the kernels are generated for, so a cached graph is never served to another funrl or another
  instruction set (torch's version, the graph and every other option are in the key already).
- ``torch._inductor.runtime.cache_dir_utils.default_cache_dir``: in :func:`use_persistent_cache`.
  torch writes its default cache folder into ``TORCHINDUCTOR_CACHE_DIR`` on first use, so only
  a comparison with that default tells a folder the user chose from torch's own.

:func:`compile` with ``saved_as`` keeps a whole compiled function on disk through torch's public
but experimental ahead-of-time API (``torch.compile(...).aot_compile``,
``torch.compiler.load_compiled_function``, ``torch.compiler.keep_portable_guards_unsafe``): a later
process loads it without dynamo tracing the function again, which is most of what a warm start
costs. The saved function keeps only guards on its arguments' tensor metadata and global state, so
its file name carries everything else the graph depends on (``saved_as``, the arguments'
metadata, the versions of Python, torch and funrl, the instruction set and the options), and a
loaded function whose traced source has changed since it was saved is compiled again.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

__all__ = [
    "scan",
    "fori_loop",
    "cond",
    "is_traced",
    "compile",
    "register_pytree_node",
    "INDUCTOR_OPTIONS",
    "cache_dir",
    "use_persistent_cache",
]

Carry = Any
Tree = Any


INDUCTOR_OPTIONS: dict[str, Any] = {
    "realize_reads_threshold": 1,
    "size_asserts": False,
}
"""Inductor options :func:`compile` adds (an explicit value in ``options`` wins).

``realize_reads_threshold=1`` stores an intermediate that is read more than once instead of
recomputing it in each reader: Threefry's rounds read every word several times, and inlining the
producer chain into each read grows the generated kernels until code generation dominates the
compile. ``size_asserts=False`` drops the size-and-stride check inductor's wrapper runs on every
input of a graph and of every loop-body subgraph, on every call and every loop iteration; dynamo's
guards already check the graph's inputs.
"""


_CACHEABLE_LOOP_OPS = ("torch.ops.higher_order.scan", "torch.ops.higher_order.while_loop")


def _cache_options(device_type: str) -> dict[str, Any]:
    """The option that lets torch's on-disk caches store graphs with loop ops (module docstring)."""
    import funrl

    tag = f"funrl {funrl.__version__}"
    if device_type == "cpu":
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        tag += f", {pick_vec_isa() or 'scalar'}"
    return {"unsafe_marked_cacheable_functions": dict.fromkeys(_CACHEABLE_LOOP_OPS, tag)}


def cache_dir() -> Path:
    """Where funrl keeps compiled graphs: ``$FUNRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/funrl``,
    else ``~/.cache/funrl``. Removing the folder (``funrl cache clear``) only costs recompiles."""
    explicit = os.environ.get("FUNRL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "funrl"


def use_persistent_cache() -> Path:
    """Keep torch's compile caches in :func:`cache_dir` instead of torch's default under the
    temporary folder (lost at reboot), unless ``TORCHINDUCTOR_CACHE_DIR`` names another folder.

    torch writes its default into ``TORCHINDUCTOR_CACHE_DIR`` the first time it looks the folder
    up (importing ``torch._inductor.config`` or any earlier ``torch.compile`` does), so that
    value counts as unset. Call this before compiling what should be kept; ``funrl train`` calls
    it. Returns the folder in use.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if folder is None or os.path.abspath(folder) == os.path.abspath(default_cache_dir()):
        folder = str(cache_dir() / "inductor")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    return Path(folder)


def compile(  # noqa: A001 - the torch name, with funrl's options
    fn: Callable[..., Any],
    *,
    fullgraph: bool = True,
    dynamic: bool | None = None,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    saved_as: str | None = None,
    saved_refs: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """``torch.compile`` with :data:`INDUCTOR_OPTIONS` (use it for code that draws random numbers),
    whose graphs, loops included, torch's on-disk caches store and serve to later processes.

    ``saved_as`` (with ``fullgraph=True, dynamic=False``) also keeps the whole compiled function
    in ``cache_dir()/compiled``, one file per ``saved_as`` and metadata of the arguments, which a
    later process loads instead of tracing ``fn`` again (module docstring). ``saved_as`` must name
    everything ``fn``'s graph depends on besides its arguments and its source code (both checked):
    the values ``fn`` closes over. Objects in ``saved_refs`` (by name) are not saved with it: a
    loading process gives its own, equivalent wherever ``saved_as`` is equal (an agent, whose
    networks torch cannot save). The saved function takes positional arguments; the first call
    with new argument metadata compiles or loads.

    ``device`` is where the compiled code runs (it picks the cache key's instruction set).
    ``mode="reduce-overhead"`` (CUDA graphs) is expressed as the equivalent option, since torch
    takes either a mode or options; any other mode is passed as it is, without funrl's options.

    Each call gets its own recompile limit (``isolate_recompiles``): dynamo keeps its compiled
    entries per code object, and funrl compiles the same function (an agent's step) once per
    static configuration, so without isolation the ninth configuration in a process would hit
    dynamo's shared limit of eight and, under ``fullgraph=True``, raise. torch's global cap per
    code object (``accumulated_recompile_limit``, 256) still applies.
    """
    merged = {**INDUCTOR_OPTIONS, **_cache_options(torch.device(device).type), **(options or {})}
    if mode == "reduce-overhead":
        merged["triton.cudagraphs"] = True
        mode = None
    common = {"fullgraph": fullgraph, "dynamic": dynamic, "isolate_recompiles": True}
    if saved_as is not None:
        if not fullgraph or dynamic is not False or mode is not None:
            raise ValueError(
                "saved_as: a saved function is one static full graph (fullgraph=True, dynamic=False, "
                f"mode None or 'reduce-overhead'), got fullgraph={fullgraph}, dynamic={dynamic}, mode={mode!r}"
            )
        tag = repr((sorted((k, repr(v)) for k, v in merged.items()), str(torch.device(device))))
        merged["guard_filter_fn"] = torch.compiler.keep_portable_guards_unsafe
        compiled = torch.compile(fn, options=merged, **common)
        return _SavedFunction(compiled, f"{saved_as}|{tag}", dict(saved_refs or {}))
    if mode is not None:
        return torch.compile(fn, mode=mode, **common)
    return torch.compile(fn, options=merged, **common)


_SAVED_FORMAT = 1
"""Part of every saved function's file name: a change of what the name covers bumps it."""


def _leaf_signature(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.stride(), str(x.dtype), str(x.device), x.requires_grad)
    return (type(x).__qualname__, repr(x))


def _sources_unchanged(entry: Any) -> bool:
    """Whether every module the saved ``entry`` traced still has the source it had then."""
    for module_name, content in {s.module: s.content for s in entry.source_info().inlined_sources}.items():
        try:
            if inspect.getsource(importlib.import_module(module_name)) != content:
                return False
        except (ImportError, OSError, TypeError):
            return False
    return True


# Tracing a scan under vmap (seeds, ensembles) takes each input's first slice with
# `select_copy`, which has no vmap batching rule; the warning speaks of a slowdown that only
# that trace-time call has, never the compiled function.
_SCAN_TRACE_WARNING = r"There is a performance drop because we have not yet implemented the batching rule for aten::select_copy\.int"


class _SavedFunction:
    """A compiled function kept on disk per argument metadata (:func:`compile`'s ``saved_as``).

    Each entry is torch's ahead-of-time compiled function; a call checks the last entry's guards
    (tensor metadata and global state) and, where they fail, finds or makes the entry for the new
    arguments: in this process, else on disk, else by compiling and saving it (atomically).
    """

    def __init__(self, compiled: Callable[..., Any], name: str, refs: dict[str, Any]) -> None:
        self._compiled = compiled
        self._name = name
        self._refs = refs
        self._entries: dict[str, Any] = {}
        self._last: Any = None

    def __call__(self, *args: Any) -> Any:
        entry = self._last
        if entry is None or not entry.guard_check(*args):
            entry = self._last = self._entry(args)
        return entry(*args)

    def _entry(self, args: tuple[Any, ...]) -> Any:
        import funrl

        leaves, spec = torch_pytree.tree_flatten(args)
        # with the global state most likely to differ between runs (--threads, no_grad)
        signature = repr(
            (
                str(spec),
                [_leaf_signature(x) for x in leaves],
                torch.is_grad_enabled(),
                torch.get_num_threads(),
            )
        )
        entry = self._entries.get(signature)
        if entry is None or not entry.guard_check(*args):
            key = repr(
                (_SAVED_FORMAT, self._name, signature, funrl.__version__, torch.__version__, sys.version)
            )
            path = cache_dir() / "compiled" / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.bin"
            entry = _load_saved(path, self._refs)
            # A saved entry whose guards refuse these arguments (global state the name does not
            # hold) is compiled again: the new entry's guards hold what it was traced with.
            if entry is None or not entry.guard_check(*args):
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_SCAN_TRACE_WARNING, category=UserWarning)
                    entry = self._compiled.aot_compile((args, {}))
                _save(entry, path, self._refs)
            entry.disable_guard_check()  # __call__ checks them once
            self._entries[signature] = entry
        return entry


def _load_saved(path: Path, refs: dict[str, Any]) -> Any:
    if not path.exists():
        return None
    try:
        with path.open("rb") as f:
            entry = torch.compiler.load_compiled_function(f, external_data=refs)
    except Exception:  # written by another torch or funrl, or damaged: compiled again
        return None
    return entry if _sources_unchanged(entry) else None


def _save(entry: Any, path: Path, refs: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entry.save_compiled_function(str(path), external_data=refs)  # a temporary file renamed into place
    except Exception as exc:  # e.g. a closure torch cannot pickle: this process keeps it in memory
        warnings.warn(
            f"funrl: the compiled function could not be saved for later processes ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); a new process compiles it again",
            stacklevel=3,
        )


def register_pytree_node(
    cls: type,
    flatten: Callable[[Any], tuple[list[Any], Any]],
    unflatten: Callable[[list[Any], Any], Any],
) -> None:
    """Register ``cls`` with torch's pytree library (``flatten(obj) -> (children, context)``,
    ``unflatten(children, context) -> obj``), so that ``torch.func`` transforms and
    ``torch.compile`` see through instances of it."""
    torch_pytree.register_pytree_node(
        cls, flatten, unflatten, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}"
    )


def is_traced() -> bool:
    """True while ``torch.compile`` traces the caller or a ``torch.func`` transform (vmap, grad)
    runs it: the one place funrl asks whether values can be read on the host (eager checks)."""
    return torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None


def _scan_loop(
    f: Callable[[Carry, Tree], tuple[Carry, Tree]],
    init: Carry,
    xs: Tree,
    length: int,
    reverse: bool,
) -> tuple[Carry, Tree]:
    # Flattened once, not per step: in eager mode pytree handling costs more than a small step's ops.
    xs_leaves, xs_spec = torch_pytree.tree_flatten(xs)
    carry = init
    ys_leaves = []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for t in steps:
        carry, y = f(carry, torch_pytree.tree_unflatten([leaf[t] for leaf in xs_leaves], xs_spec))
        leaves, ys_spec = torch_pytree.tree_flatten(y)
        ys_leaves.append(leaves)
    if reverse:
        ys_leaves.reverse()
    if not ys_leaves:
        raise ValueError("length: expected at least one step")
    stacked = [torch.stack(column) for column in zip(*ys_leaves, strict=True)]
    return carry, torch_pytree.tree_unflatten(stacked, ys_spec)


_PLAIN_NAMEDTUPLE = "__funrl_scan_namedtuple__:"
_PLAIN_NONE = "__funrl_scan_none__"
_PLAIN_OPAQUE = "__funrl_scan_opaque__"


def _is_plain(tree: Tree) -> bool:
    """True if :func:`_to_plain` can carry ``tree`` through the scan op: tensors and None in
    lists, tuples, dicts and NamedTuples that their module exposes under their own name."""
    if tree is None or isinstance(tree, torch.Tensor):
        return True
    if type(tree) in (list, tuple):
        return all(_is_plain(child) for child in tree)
    if type(tree) is dict:
        return all(_is_plain(child) for child in tree.values())
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        return _lookup_class(type(tree).__module__, type(tree).__qualname__) is type(tree) and all(
            _is_plain(child) for child in tree
        )
    return False


def _lookup_class(module: str, qualname: str) -> Any:
    """The object named ``qualname`` in the loaded module ``module``, or None."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _to_plain(tree: Tree) -> Tree:
    """``tree`` with every tensor cloned, each NamedTuple as a one-key dict naming its class and
    each None as a marker: containers the scan op carries out of its body."""
    if isinstance(tree, torch.Tensor):
        # The op forbids outputs aliasing inputs or each other; clones are free after fusion.
        return torch.clone(tree)
    if tree is None:
        return {_PLAIN_NONE: ()}
    if type(tree) in (list, tuple):
        return type(tree)(_to_plain(child) for child in tree)
    if type(tree) is dict:
        return {k: _to_plain(child) for k, child in tree.items()}
    cls = type(tree)
    fields = {name: _to_plain(child) for name, child in zip(cls._fields, tree, strict=True)}
    return {f"{_PLAIN_NAMEDTUPLE}{cls.__module__}:{cls.__qualname__}": fields}


def _from_plain(tree: Tree) -> Tree:
    """Inverse of :func:`_to_plain` (the NamedTuple classes are looked up by module and name)."""
    if type(tree) in (list, tuple):
        return type(tree)(_from_plain(child) for child in tree)
    if type(tree) is not dict:
        return tree
    if len(tree) == 1:
        ((key, value),) = tree.items()
        if key == _PLAIN_NONE:
            return None
        if isinstance(key, str) and key.startswith(_PLAIN_NAMEDTUPLE):
            cls = _lookup_class(*key[len(_PLAIN_NAMEDTUPLE) :].split(":"))
            return cls(**{name: _from_plain(child) for name, child in value.items()})
    return {k: _from_plain(child) for k, child in tree.items()}


def _scan_hop(
    f: Callable[[Carry, Tree], tuple[Carry, Tree]],
    init: Carry,
    xs: Tree,
    reverse: bool,
) -> tuple[Carry, Tree]:
    from torch._higher_order_ops.scan import scan as scan_hop

    # The op carries out of its body only tensors in lists, tuples and dicts (a NamedTuple is
    # refused), so the carry goes through as its leaves, rebuilt with the init's structure, and
    # the per-step output as a plain tree that names its NamedTuple classes (_to_plain). An output
    # with any other node (a NamedTuple local to a function, a custom pytree node) goes through
    # as leaves, and its structure is read off one more trace of ``f`` (a probe whose ops the
    # compiler drops): a few seconds of compile time per scan that the plain path saves.
    init_leaves, init_spec = torch_pytree.tree_flatten(init)
    # The op requires the carry to keep the init's strides; body outputs are dense, while an init
    # may be a view (a size-1 or broadcast dim with an odd stride), so give the init dense strides.
    # Carry leaves also travel without their size-1 dims: under vmap the op moves the batch dim
    # last, and inductor may then stride a size-1 dim of the init otherwise than the body's output
    # (the same memory layout, which the op still refuses).
    shapes = [leaf.shape if isinstance(leaf, torch.Tensor) else None for leaf in init_leaves]
    init_leaves = [
        leaf.reshape([d for d in leaf.shape if d != 1]).clone(memory_format=torch.contiguous_format)
        if isinstance(leaf, torch.Tensor)
        else leaf
        for leaf in init_leaves
    ]

    def unsqueezed(leaves: list[Any]) -> Carry:
        return torch_pytree.tree_unflatten(
            [
                leaf if shape is None else leaf.reshape(shape)
                for leaf, shape in zip(leaves, shapes, strict=True)
            ],
            init_spec,
        )

    def body(carry_leaves: list[torch.Tensor], x: Tree) -> tuple[list[torch.Tensor], Tree]:
        new_carry, y = f(unsqueezed(carry_leaves), x)
        # Each new carry leaf is written into a copy of the carry it replaces: the op requires the
        # carry to keep its exact strides, and under vmap the layout the step's arithmetic picks
        # can differ from the init's (the batch dimension sits elsewhere in memory); a clone
        # keeps them, even under vmap.
        new_leaves = [
            old.clone().copy_(new.reshape(old.shape))
            for old, new in zip(carry_leaves, torch_pytree.tree_leaves(new_carry), strict=True)
        ]
        if _is_plain(y):
            return new_leaves, _to_plain(y)
        # torch's pytree counts None as a leaf; the op takes tensors only, so Nones stay behind.
        y_leaves = [torch.clone(leaf) for leaf in torch_pytree.tree_leaves(y) if leaf is not None]
        return new_leaves, {_PLAIN_OPAQUE: y_leaves}

    # Dense xs: torch lowers the op to a loop that carries xs along, so a view (an unbound
    # component, an expanded scalar) would be copied whole on every iteration.
    xs = torch_pytree.tree_map(torch.Tensor.contiguous, xs)
    carry_leaves, ys = scan_hop(body, init_leaves, xs, reverse=reverse)
    carry = unsqueezed(carry_leaves)
    if type(ys) is dict and _PLAIN_OPAQUE in ys:
        _, y_probe = f(init, torch_pytree.tree_map(lambda leaf: leaf[0], xs))
        probe_leaves, y_spec = torch_pytree.tree_flatten(y_probe)
        stacked = iter(ys[_PLAIN_OPAQUE])
        leaves = [None if leaf is None else next(stacked) for leaf in probe_leaves]
        return carry, torch_pytree.tree_unflatten(leaves, y_spec)
    return carry, _from_plain(ys)


def _scan_hop_unrolled(
    f: Callable[[Carry, Tree], tuple[Carry, Tree]],
    init: Carry,
    xs: Tree,
    length: int,
    reverse: bool,
    unroll: int,
) -> tuple[Carry, Tree]:
    """``_scan_hop`` with ``unroll`` consecutive steps per iteration of the op.

    Each iteration of the compiled loop costs tens of microseconds of host work (buffer
    allocation, argument marshalling, the loop condition) whatever the step computes; running
    ``unroll`` steps per iteration divides that by ``unroll`` at the price of a body ``unroll``
    times longer to compile. The ``length % unroll`` leftover steps run inline after the loop.
    """
    groups = length // unroll
    leftover = length - groups * unroll
    # Forward, the grouped steps are [0, main) and the leftover [main, length); in reverse the
    # leftover steps are the first indices, which a reverse scan reaches last.
    grouped_start = leftover if reverse else 0
    grouped = slice(grouped_start, grouped_start + groups * unroll)
    rest = slice(0, leftover) if reverse else slice(groups * unroll, length)
    order = tuple(range(unroll - 1, -1, -1) if reverse else range(unroll))

    def group_step(carry: Carry, x_group: Tree) -> tuple[Carry, Tree]:
        ys = [None] * unroll
        for j in order:
            carry, ys[j] = f(carry, torch_pytree.tree_map(lambda leaf, j=j: leaf[j], x_group))
        return carry, torch_pytree.tree_map(lambda *leaves: torch.stack(leaves), *ys)

    xs_grouped = torch_pytree.tree_map(
        lambda leaf: leaf[grouped].reshape(groups, unroll, *leaf.shape[1:]), xs
    )
    carry, ys = _scan_hop(group_step, init, xs_grouped, reverse)
    ys = torch_pytree.tree_map(lambda leaf: leaf.reshape(groups * unroll, *leaf.shape[2:]), ys)
    if leftover == 0:
        return carry, ys
    carry, ys_rest = _scan_loop(
        f, carry, torch_pytree.tree_map(lambda leaf: leaf[rest], xs), leftover, reverse
    )
    parts = (ys_rest, ys) if reverse else (ys, ys_rest)
    return carry, torch_pytree.tree_map(lambda *leaves: torch.cat(leaves), *parts)


def scan(
    f: Callable[[Carry, Tree], tuple[Carry, Tree]],
    init: Carry,
    xs: Tree | None = None,
    length: int | None = None,
    reverse: bool = False,
    use_hop: bool | None = None,
    unroll: int = 1,
) -> tuple[Carry, Tree]:
    """``jax.lax.scan`` for torch: ``carry, y_t = f(carry, xs[t])`` for each t; ys stacked on dim 0.

    Args:
        f: pure step function ``(carry, x) -> (carry, y)``; carry keeps its structure, shapes
            and dtypes across steps.
        init: initial carry (a pytree of tensors).
        xs: pytree of tensors scanned along dim 0, or ``None`` to scan ``length`` steps over
            the step index (an int64 scalar tensor).
        length: number of steps when ``xs`` is ``None``.
        reverse: scan from the last index to the first (outputs stay in index order).
        use_hop: force the higher-order op (``True``) or the Python loop (``False``); by default
            the op is used exactly when ``torch.compile`` is tracing and the loop runs at least
            twice (``length // unroll >= 2``); a shorter scan is traced inline.
        unroll: steps per iteration of the compiled loop, as ``jax.lax.scan``'s ``unroll``: the
            same result, with the per-iteration host cost (tens of microseconds on CPU) paid
            once per ``unroll`` steps and a body ``unroll`` times longer to compile. Worth it
            when a step computes little (a few hundred envs, a small network). No effect on the
            Python loop.

    Returns:
        ``(final_carry, ys)`` with every leaf of ``ys`` stacked along a new leading dimension.
    """
    if xs is None:
        if length is None or length < 1:
            raise ValueError(f"length: expected a positive int when xs is None, got {length!r}")
        device = next(
            (x.device for x in torch_pytree.tree_leaves(init) if isinstance(x, torch.Tensor)),
            torch.device("cpu"),
        )
        xs = torch.arange(length, device=device)
    else:
        xs_leaves = torch_pytree.tree_leaves(xs)
        if any(not isinstance(leaf, torch.Tensor) or leaf.dim() == 0 for leaf in xs_leaves):
            raise ValueError("xs: expected tensor leaves with a leading (scanned) dimension")
        sizes = {leaf.shape[0] for leaf in xs_leaves}
        if len(sizes) != 1:
            raise ValueError(f"xs: expected leaves sharing their leading dimension, got {sizes}")
        (n,) = sizes
        if length is not None and length != n:
            raise ValueError(f"length: expected {n} (the leading dimension of xs), got {length}")
        if n < 1:
            raise ValueError("xs: expected a leading dimension of at least 1 (one step), got 0")
        length = n
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll: expected a positive int, got {unroll!r}")
    # A loop that would run once is traced inline: the op's per-iteration machinery buys nothing
    # there (and torch 2.13's C++ wrapper declares some buffers twice after such loops).
    hop = (torch.compiler.is_compiling() and length // unroll >= 2) if use_hop is None else use_hop
    if hop and unroll > 1 and length >= unroll:
        return _scan_hop_unrolled(f, init, xs, length, reverse, unroll)
    if hop:
        return _scan_hop(f, init, xs, reverse)
    return _scan_loop(f, init, xs, length, reverse)


def fori_loop(
    lower: int,
    upper: int,
    body: Callable[[torch.Tensor, Carry], Carry],
    init: Carry,
    use_hop: bool | None = None,
) -> Carry:
    """``carry = body(i, carry)`` for ``i`` in ``range(lower, upper)``; via :func:`scan`.

    An empty range returns ``init`` unchanged, as ``jax.lax.fori_loop`` does.
    """
    if upper <= lower:
        return init

    def step(carry: Carry, i: torch.Tensor) -> tuple[Carry, torch.Tensor]:
        return body(i, carry), i

    first = next((x for x in torch_pytree.tree_leaves(init) if isinstance(x, torch.Tensor)), None)
    device = first.device if first is not None else torch.device("cpu")
    steps = torch.arange(lower, upper, device=device)
    carry, _ = scan(step, init, steps, use_hop=use_hop)
    return carry


def cond(
    pred: torch.Tensor,
    true_fn: Callable[..., Tree],
    false_fn: Callable[..., Tree],
    *operands: Any,
) -> Tree:
    """``jax.lax.cond`` for torch: ``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``.

    Both branches return the same structure of tensors, with shapes and dtypes that broadcast to
    each other. Run eagerly (no ``torch.compile``, no ``torch.func`` transform), ``pred`` is read
    on the host and only the branch it picks runs: an eager agent skips work it would throw away.
    Traced (compile, vmap, grad: :func:`is_traced`), both branches run and each output leaf is
    ``torch.where(pred, true_leaf, false_leaf)``: one branch-free graph, and under vmap a
    predicate per batch element, as ``jax.lax.cond`` becomes under vmap. The values are the same
    either way.

    Args:
        pred: a boolean tensor with one element.
        true_fn, false_fn: ``(*operands) -> tree`` of tensors, pure.
        operands: passed to the branch (or both).
    """
    if not isinstance(pred, torch.Tensor) or pred.dtype != torch.bool or pred.numel() != 1:
        got = (
            f"{pred.dtype} of shape {list(pred.shape)}"
            if isinstance(pred, torch.Tensor)
            else type(pred).__name__
        )
        raise ValueError(f"pred: expected a boolean tensor with one element, got {got}")
    if not is_traced():
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    true_leaves, true_spec = torch_pytree.tree_flatten(true_fn(*operands))
    false_leaves, false_spec = torch_pytree.tree_flatten(false_fn(*operands))
    if true_spec != false_spec:
        raise ValueError(
            f"true_fn, false_fn: expected outputs of one structure, got {true_spec} and {false_spec}"
        )
    pred = pred.reshape(())
    return torch_pytree.tree_unflatten(
        [torch.where(pred, t, f) for t, f in zip(true_leaves, false_leaves, strict=True)], true_spec
    )
