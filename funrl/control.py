"""Loops for compiled code: ``scan`` with a compiled path and a plain-loop path that agree.

``torch.compile`` of a Python loop unrolls it: a 128-step rollout takes about 90 s to compile on a
2-core CPU. ``torch._higher_order_ops.scan`` keeps the loop as one node (about 4 s to compile) but
is a prototype API, so everything in funrl loops through :func:`scan`, which picks the
higher-order op only while ``torch.compile`` is tracing and a plain Python loop otherwise. Both
paths compute the same function; ``tests/test_control.py`` checks it.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

__all__ = [
    "scan",
    "fori_loop",
    "is_compiling",
    "is_traced",
    "compile",
    "INDUCTOR_OPTIONS",
    "CPP_WRAPPER_OPTIONS",
    "masked_moves_are_slow",
]

# While dynamo traces torch's scan op (the compiled path of `scan`), the op takes a first slice of
# every `xs` leaf with `select_copy` as the example input of its body. Under vmap that op has no
# batching rule, so every compile of a vmapped scan warned "There is a performance drop because we
# have not yet implemented the batching rule for aten::select_copy.int" (twice per compile of the
# vmapped PPO step). The slice exists only on fake tensors at trace time: the generated code holds
# no select_copy. The filter matches only that message raised from dynamo's fake-tensor execution
# (module torch._dynamo.utils), so the same warning from eager code (a user's own vmap) still shows.
warnings.filterwarnings(
    "ignore",
    message=r"There is a performance drop because we have not yet implemented the batching rule for "
    r"aten::select_copy\.int",
    category=UserWarning,
    module=r"torch\._dynamo\.utils",
)

Carry = Any
Tree = Any


def masked_moves_are_slow(cpuinfo: str) -> bool:
    """Whether ``cpuinfo`` (the text of ``/proc/cpuinfo``) is an AMD CPU on which inductor's CPU
    kernels use AVX2 (AVX2, no AVX-512): there ``vmaskmovps``, with which inductor copies the last
    partial vector of a row, is a long microcoded sequence."""
    vendor, flags = "", set()
    for line in cpuinfo.splitlines():  # the first processor's lines are enough
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
        if vendor and flags:
            break
    return vendor == "AuthenticAMD" and "avx2" in flags and "avx512f" not in flags


def _this_cpu_has_slow_masked_moves() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return masked_moves_are_slow(f.read())
    except OSError:  # not Linux: inductor's defaults
        return False


INDUCTOR_OPTIONS: dict[str, Any] = {
    "realize_reads_threshold": 1,
    "size_asserts": False,
    "cpp.use_decompose_tanh": True,
    **(
        {"cpp.enable_loop_tail_vec": False}
        if hasattr(torch._inductor.config.cpp, "enable_loop_tail_vec") and _this_cpu_has_slow_masked_moves()
        else {}
    ),
}
"""Inductor options funrl compiles with.

Threefry's 20 rounds read each word two or three times; with inductor's default
(``realize_reads_threshold=4``) every such read inlines the whole producer chain again, and the
generated kernel grows until code generation dominates: one ``uniform`` graph took 26 s of CPU to
compile and ran in 108 µs. Realising every multiply-read intermediate cut that to 15 s and 47 µs
(measured on the 2-core CI-like machine, torch 2.13), and a whole PPO update step compiles
several times faster.

``size_asserts=False`` drops the size-and-stride check inductor's wrapper runs on every input of
a graph and of every loop-body subgraph, on every call and every loop iteration (dynamo's guards
already check the graph's own inputs). A PPO rollout iteration ran 38 of them; the PPO CartPole
update went from 25.9 to 21.5 ms (one process, 9 rounds in turn, 2-core CPU, torch 2.13).

``cpp.use_decompose_tanh`` has inductor's vectorised CPU kernels compute ``tanh(x)`` as
``2 / (1 + exp(-2x)) - 1`` instead of calling Sleef's ``tanhf`` (1-ulp, about 100 cycles per
16 floats here). Within 2.4e-7 of eager everywhere (absolute; ``tests/test_control.py`` checks
it, saturation and infinities included); only the relative error of tiny values grows
(``tanh(1e-8)`` gives 0), which no activation or squashing in funrl relies on. 8-seed PPO on
CartPole spent 19% of its update in Sleef's tanh (``perf``); the update went from 56.9 to 47.0 ms
(one process, 7 rounds in turn, 2-core CPU, torch 2.13). Ignored on GPU.

``cpp.enable_loop_tail_vec=False``, only on AMD CPUs where inductor vectorises with AVX2
(:func:`masked_moves_are_slow`): a row whose length is not a multiple of 8 floats ends in a partial
vector, which inductor copies with masked loads and stores (``vmaskmovps``); AMD runs the masked
store as a long microcoded sequence, so a gather of 41-float replay rows from a storage larger
than the caches kept few rows in flight. With the option the tail is a scalar loop. Each setting
compiled in one process and timed in turn (AMD EPYC Zen 3, 2 cores, torch 2.13): a compiled
sample of 256 from a 1e7-item buffer 300.5 -> 273.0 µs (8 per call: 109.9 -> 91.3 µs), at 1e4
unchanged; a prioritised sample + update at 1e6 615 -> 582 µs; DQN / SAC / TD3 compiled updates
817 -> 875, 73 -> 73, 66 -> 67 gradient steps/s; PPO CartPole (C++ wrapper) 15.42 -> 14.99 ms per
update for one seed, 50.76 -> 50.14 for 8. Other CPUs keep inductor's default (not measured with
the option: Intel's masked moves are not microcoded, and AVX-512 kernels mask with mask
registers). See BENCHMARKS.md.
"""


CPP_WRAPPER_OPTIONS: dict[str, Any] = (
    {"cpp_wrapper_build_separate": True}
    if hasattr(torch._inductor.config, "cpp_wrapper_build_separate")
    else {}
)
"""Inductor options added whenever the C++ wrapper is asked for (``options={"cpp_wrapper": True}``);
an explicit value in ``options`` wins.

With the C++ wrapper on CPU, inductor writes the step's kernels and the wrapper that calls them
into one C++ file and builds it with one ``g++ -O3``: one process on one core, after the rest of
the compile. ``cpp_wrapper_build_separate`` builds the kernels (still ``-O3``) and the wrapper
(``-O1``: it only calls kernels and allocates) as two files. Cold first compiles of the one-seed
PPO CartPole step, each in a fresh process with an empty inductor cache, rounds in turn (2-core
CPU, torch 2.13): one file 90.9 / 77.9 s, separate 52.0 / 46.8 s, the Python wrapper 49.3 s; per
update 8.24 / 8.94 ms against 8.62 / 7.56 ms (the Python wrapper 16.34 ms). See BENCHMARKS.md.
Empty where torch has no such option (before 2.7).
"""


def compile(  # noqa: A001 - the torch name, with funrl's options
    fn: Callable[..., Any],
    *,
    fullgraph: bool = True,
    dynamic: bool | None = None,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """``torch.compile`` with :data:`INDUCTOR_OPTIONS` (use it for code that draws random numbers),
    and :data:`CPP_WRAPPER_OPTIONS` when ``options`` asks for inductor's C++ wrapper.

    ``mode="reduce-overhead"`` (CUDA graphs) is expressed as the equivalent option, since torch
    takes either a mode or options; any other mode is passed as it is, without funrl's options.
    """
    start_cpu_vec_isa_check()
    merged = {**INDUCTOR_OPTIONS, **(options or {})}
    if merged.get("cpp_wrapper"):
        merged = {**CPP_WRAPPER_OPTIONS, **merged}
    if mode == "reduce-overhead":
        merged["triton.cudagraphs"] = True
        mode = None
    if mode is not None:
        return torch.compile(fn, fullgraph=fullgraph, dynamic=dynamic, mode=mode)
    return torch.compile(fn, fullgraph=fullgraph, dynamic=dynamic, options=merged)


_vec_isa_check: threading.Thread | None = None


def start_cpu_vec_isa_check() -> threading.Thread | None:
    """Start inductor's CPU vector-ISA check on a background thread (once per process).

    The first CPU kernel inductor generates in a process asks which vector ISAs g++ can build and
    load (``torch._inductor.cpu_vec_isa.valid_vec_isa_list``): one test library per candidate ISA
    built with g++ and loaded by a child Python. That took 9.8-11.5 s with an empty inductor cache
    and ~1.6 s with a warm one (2-core CPU, three AVX ISAs), inside the first compile, after
    dynamo and AOTAutograd have traced for 20-30 s with one core busy. Run here, the g++ and child
    processes overlap with that tracing: cold first compiles of the one-seed PPO CartPole step, each
    in a fresh process with an empty cache, took 72.2 / 98.0 s before (the check ran 8.8 / 14.1 s
    inside them) and 67.8 / 75.2 s with it (two rounds in turn). It is torch's own check, cached by torch
    (``functools.cache``): the compile reads the same list; if it asks before the thread is done
    it computes the list itself (the builds are file-locked), as it would without this.
    Returns the thread (None where inductor or that function is missing).
    """
    global _vec_isa_check
    if _vec_isa_check is None:
        try:
            from torch._inductor import cpu_vec_isa
        except ImportError:  # a torch build without inductor: nothing to warm
            return None
        check = getattr(cpu_vec_isa, "valid_vec_isa_list", None)
        if check is None:  # a torch whose inductor checks differently: leave it to the compile
            return None
        _vec_isa_check = threading.Thread(
            target=_quietly, args=(check,), name="funrl-vec-isa-check", daemon=True
        )
        _vec_isa_check.start()
    return _vec_isa_check


def _quietly(fn: Callable[[], Any]) -> None:
    # A failure here is only a cache miss: the compile runs the check itself and reports there.
    try:
        fn()
    except Exception:  # noqa: BLE001
        pass


def is_compiling() -> bool:
    """True while ``torch.compile`` (dynamo) is tracing the calling code."""
    return torch.compiler.is_compiling()


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
    carry = init
    ys = []
    steps = range(length - 1, -1, -1) if reverse else range(length)
    for t in steps:
        x = torch_pytree.tree_map(lambda leaf, t=t: leaf[t], xs)
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        raise ValueError("length: expected at least one step")
    stacked = torch_pytree.tree_map(lambda *leaves: torch.stack(leaves), *ys)
    return carry, stacked


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
    init_leaves = [
        leaf.clone(memory_format=torch.contiguous_format) if isinstance(leaf, torch.Tensor) else leaf
        for leaf in init_leaves
    ]

    def body(carry_leaves: list[torch.Tensor], x: Tree) -> tuple[list[torch.Tensor], Tree]:
        new_carry, y = f(torch_pytree.tree_unflatten(carry_leaves, init_spec), x)
        new_leaves = [torch.clone(leaf) for leaf in torch_pytree.tree_leaves(new_carry)]
        if _is_plain(y):
            return new_leaves, _to_plain(y)
        # torch's pytree counts None as a leaf; the op takes tensors only, so Nones stay behind.
        y_leaves = [torch.clone(leaf) for leaf in torch_pytree.tree_leaves(y) if leaf is not None]
        return new_leaves, {_PLAIN_OPAQUE: y_leaves}

    carry_leaves, ys = scan_hop(body, init_leaves, xs, reverse=reverse)
    carry = torch_pytree.tree_unflatten(carry_leaves, init_spec)
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
    hop = (is_compiling() and length // unroll >= 2) if use_hop is None else use_hop
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
