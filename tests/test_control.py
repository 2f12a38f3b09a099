"""Tests for funrl.control: the Python-loop path and the higher-order-op path of scan agree."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, NamedTuple

import pytest
import torch
from dynamo_graphs import traced_graphs
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.func import vmap

import funrl.random as R
from funrl import tree
from funrl.control import compile, fori_loop, is_compiling, scan


class Carry(NamedTuple):
    total: torch.Tensor  # float [3]
    steps: torch.Tensor  # int64 []
    key: torch.Tensor  # a PRNG key threaded through the loop


def step(carry: Carry, x: dict[str, torch.Tensor]) -> tuple[Carry, dict[str, torch.Tensor]]:
    """A step with float and int carries, a key split per step, and a pytree of outputs."""
    key, sub = R.split(carry.key)
    noise = R.uniform(sub, (3,))
    total = 0.5 * carry.total + x["a"] * x["b"].unsqueeze(-1) + noise
    y = {"prod": carry.total * x["a"], "steps": carry.steps, "pair": (total.sum(), noise)}
    return Carry(total=total, steps=carry.steps + 1, key=key), y


def make_inputs(length: int, seed: int = 0) -> tuple[Carry, dict[str, torch.Tensor]]:
    k1, k2, k3 = R.split(R.key(seed), 3)
    init = Carry(total=R.normal(k1, (3,)), steps=torch.tensor(0), key=k3)
    xs = {"a": R.normal(k2, (length, 3)), "b": torch.arange(length, dtype=torch.float32)}
    return init, xs


def reference_scan(f, init, xs, reverse=False):
    """The definition of scan, written out independently of funrl.control."""
    length = tree.leaves(xs)[0].shape[0]
    order = range(length - 1, -1, -1) if reverse else range(length)
    carry, ys = init, [None] * length
    for t in order:
        carry, ys[t] = f(carry, tree.index(xs, t))
    return carry, tree.stack(ys)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("use_hop", [False, True])
def test_scan_matches_reference(reverse, use_hop):
    init, xs = make_inputs(5)
    expected = reference_scan(step, init, xs, reverse)
    got = scan(step, init, xs, reverse=reverse, use_hop=use_hop)
    assert tree.tree_equal(got, expected)
    carry, ys = got
    assert isinstance(carry, Carry) and carry.steps.item() == 5
    assert ys["pair"][1].shape == (5, 3) and ys["steps"].dtype == torch.int64


@settings(max_examples=10)  # each example traces the op in eager (~1 s)
@given(length=st.integers(1, 8), seed=st.integers(0, 2**31 - 1), reverse=st.booleans())
def test_loop_path_equals_hop_path(length, seed, reverse):
    init, xs = make_inputs(length, seed)
    loop = scan(step, init, xs, reverse=reverse, use_hop=False)
    hop = scan(step, init, xs, reverse=reverse, use_hop=True)
    assert tree.tree_equal(loop, hop)


@settings(max_examples=8)  # each example traces the op in eager (~1 s)
@given(
    length=st.integers(1, 9),
    unroll=st.integers(1, 10),
    seed=st.integers(0, 2**31 - 1),
    reverse=st.booleans(),
)
def test_unrolled_hop_path_equals_loop(length, unroll, seed, reverse):
    """``unroll`` steps per iteration, leftover steps inline: the same carry and ys in index order."""
    init, xs = make_inputs(length, seed)
    loop = scan(step, init, xs, reverse=reverse, use_hop=False)
    hop = scan(step, init, xs, reverse=reverse, use_hop=True, unroll=unroll)
    assert tree.tree_equal(loop, hop)


def test_reverse_keeps_outputs_in_index_order():
    xs = torch.arange(4.0)
    # Running sum from the end: ys[t] is the sum of xs[t:], the carry entering step t.
    _, ys = scan(lambda c, x: (c + x, c + x), torch.tensor(0.0), xs, reverse=True)
    assert ys.tolist() == [6.0, 6.0, 5.0, 3.0]


@pytest.mark.parametrize("use_hop", [False, True])
def test_scan_without_xs_passes_the_step_index(use_hop):
    carry, ys = scan(lambda c, i: (c * 2 + i, i * i), torch.tensor(1), length=4, use_hop=use_hop)
    assert carry.item() == ((((1 * 2 + 0) * 2 + 1) * 2 + 2) * 2 + 3)
    assert ys.tolist() == [0, 1, 4, 9]
    rev_carry, rev_ys = scan(
        lambda c, i: (c * 2 + i, i), torch.tensor(1), length=3, reverse=True, use_hop=use_hop
    )
    assert rev_carry.item() == (((1 * 2 + 2) * 2 + 1) * 2 + 0)
    assert rev_ys.tolist() == [0, 1, 2]


@pytest.mark.parametrize("use_hop", [False, True])
def test_fori_loop(use_hop):
    out = fori_loop(2, 6, lambda i, c: c * 10 + i, torch.tensor(0), use_hop=use_hop)
    assert out.item() == 2345
    pair = fori_loop(0, 3, lambda i, c: (c[0] + i, c[1] * 2.0), (torch.tensor(0), torch.tensor(1.0)))
    assert pair[0].item() == 3 and pair[1].item() == 8.0


def test_fori_loop_empty_range_returns_init():
    init = {"x": torch.tensor([1.0, 2.0])}
    assert fori_loop(3, 3, lambda i, c: {"x": c["x"] + i}, init) is init
    assert fori_loop(5, 2, lambda i, c: {"x": c["x"] + i}, init) is init


def test_vmap_over_scan_equals_loop_of_scans():
    inits, xss = zip(*[make_inputs(4, seed) for seed in range(3)], strict=True)
    batched = vmap(lambda i, x: scan(step, i, x))(tree.stack(inits), tree.stack(xss))
    looped = tree.stack([scan(step, i, x) for i, x in zip(inits, xss, strict=True)])
    assert tree.tree_equal(batched, looped)


def test_grad_through_the_loop_path():
    xs = torch.linspace(0.0, 1.0, 5)

    def loss(w: torch.Tensor) -> torch.Tensor:
        final, ys = scan(lambda c, x: (c * w + x, c * c), torch.tensor(1.0), xs)
        return final + ys.sum()

    w = torch.tensor(0.7, requires_grad=True)
    (autograd,) = torch.autograd.grad(loss(w), w)
    assert torch.allclose(torch.func.grad(loss)(w.detach()), autograd)


def test_not_compiling_in_eager():
    assert is_compiling() is False


def light_step(carry: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor):
    """A float and an int carry and a pytree of outputs, without Threefry (cheap to compile)."""
    total, steps = carry
    total = 0.5 * total + x
    return (total, steps + 1), {"total": total, "pair": (steps, x.sum())}


def _compiled_workload(xs: torch.Tensor):
    init = (torch.zeros(xs.shape[1]), torch.tensor(0))
    forward = scan(light_step, init, xs)
    backward = scan(light_step, init, xs, reverse=True)
    counted = scan(lambda c, i: (c * 2 + i, i * i), torch.tensor(1), length=4)
    looped = fori_loop(2, 6, lambda i, c: c * 10 + i, torch.tensor(0))
    return forward, backward, counted, looped, is_compiling()


@pytest.mark.parametrize(
    ("length", "unroll", "loops"), [(1, 1, 0), (2, 1, 1), (3, 2, 0), (4, 2, 1), (5, 3, 0)]
)
def test_a_scan_that_would_loop_once_is_traced_inline(length, unroll, loops):
    """Under torch.compile the loop op is used only when its loop would run at least twice."""
    xs = R.normal(R.key(2), (length, 3))
    graphs = traced_graphs(
        lambda xs: scan(light_step, (torch.zeros(3), torch.tensor(0)), xs, unroll=unroll), xs
    )
    scans = [node for gm in graphs for node in gm.graph.nodes if node.target is torch.ops.higher_order.scan]
    assert len(scans) == loops


@pytest.mark.slow
def test_compiled_scan_equals_eager_loop():
    """Under torch.compile(fullgraph=True) scan takes the higher-order op; it must equal eager."""
    xs = R.normal(R.key(3), (6, 3))
    compiled = torch.compile(_compiled_workload, fullgraph=True)
    *got, compiling_inside = compiled(xs)
    *expected, compiling_eager = _compiled_workload(xs)
    assert compiling_inside is True and compiling_eager is False
    assert tree.structure(got) == tree.structure(expected)
    # Float steps may fuse differently under inductor; integer outputs are exact.
    assert tree.tree_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[0][1]["pair"][0], torch.arange(6))
    assert torch.equal(got[1][1]["pair"][0], torch.arange(6).flip(0))  # reverse: step t ran (5 - t)-th
    assert got[2][1].tolist() == [0, 1, 4, 9] and got[3].item() == 2345


@pytest.mark.slow
def test_compiled_unrolled_scan_equals_eager_loop():
    """``unroll`` under torch.compile: 7 steps as 2 groups of 3 plus one leftover, both directions."""

    def decay(carry: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor):
        total, steps = carry
        total = 0.5 * total + x
        return (total, steps + 1), {"total": total, "steps": steps}

    init = (torch.zeros(3), torch.tensor(0))
    xs = R.normal(R.key(5), (7, 3))

    def both(init, xs):
        return scan(decay, init, xs, unroll=3), scan(decay, init, xs, reverse=True, unroll=3)

    got = compile(both)(init, xs)
    expected = (reference_scan(decay, init, xs), reference_scan(decay, init, xs, reverse=True))
    assert tree.structure(got) == tree.structure(expected)
    assert tree.tree_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[1][1]["steps"], torch.arange(7).flip(0))  # reverse: step t ran (6 - t)-th


@pytest.mark.slow
def test_compile_drops_size_asserts_and_user_options_override_them():
    """funrl.control.compile takes INDUCTOR_OPTIONS (no per-iteration size asserts in a scan's
    loop body) and still equals eager; a caller's options win over funrl's."""
    from torch._inductor.utils import run_and_get_code

    def decay(total: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = 0.5 * total + x
        return total, total.sum()

    def run(total: torch.Tensor, xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return scan(decay, total, xs)

    init, xs = torch.zeros(3), R.normal(R.key(7), (5, 3))
    expected = reference_scan(decay, init, xs)
    # The on-disk graph cache would hand back earlier code without generating it again.
    with torch._inductor.config.patch(fx_graph_cache=False):
        got, (code,) = run_and_get_code(compile(run), init, xs)
        _, (code_with_asserts,) = run_and_get_code(compile(run, options={"size_asserts": True}), init, xs)
    assert tree.tree_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert "while_loop" in code and "assert_size_stride(" not in code
    assert "assert_size_stride(" in code_with_asserts


def test_compile_builds_the_cpp_wrapper_and_its_kernels_separately_unless_told_otherwise(monkeypatch):
    """Asking for inductor's C++ wrapper adds CPP_WRAPPER_OPTIONS (kernels and wrapper built as two
    files: a first compile of the PPO step about 40% shorter); an explicit value wins, and without
    the C++ wrapper nothing is added."""
    import funrl.control as control

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(control.torch, "compile", lambda fn, **kwargs: seen.append(kwargs["options"]) or fn)
    compile(abs, options={"cpp_wrapper": True})
    compile(abs, options={"cpp_wrapper": True, "cpp_wrapper_build_separate": False})
    compile(abs)
    compile(abs, options={"cpp_wrapper": False})
    assert control.CPP_WRAPPER_OPTIONS == {"cpp_wrapper_build_separate": True}  # torch 2.13 has it
    assert seen[0]["cpp_wrapper_build_separate"] is True and seen[0]["cpp_wrapper"] is True
    assert seen[1]["cpp_wrapper_build_separate"] is False
    assert all("cpp_wrapper_build_separate" not in options for options in seen[2:])
    assert all(options[k] == v for options in seen for k, v in control.INDUCTOR_OPTIONS.items())


def test_compile_runs_torchs_vec_isa_check_on_a_background_thread_once(monkeypatch):
    """compile() hands inductor's CPU vector-ISA check (g++ builds and child Pythons: ~10 s on an
    empty inductor cache) to a daemon thread once per process, so it overlaps with tracing; the
    thread calls torch's own cached ``valid_vec_isa_list``, and a failure there stays quiet (the
    compile redoes the check and reports)."""
    import threading

    from torch._inductor import cpu_vec_isa

    import funrl.control as control

    calls = []
    monkeypatch.setattr(control, "_vec_isa_check", None)
    monkeypatch.setattr(
        cpu_vec_isa, "valid_vec_isa_list", lambda: calls.append(threading.current_thread().name)
    )
    compile(lambda x: x + 1)
    thread = control._vec_isa_check
    assert isinstance(thread, threading.Thread) and thread.daemon
    thread.join(timeout=60)
    assert calls == ["funrl-vec-isa-check"]
    compile(lambda x: x * 2)
    assert control._vec_isa_check is thread and calls == ["funrl-vec-isa-check"]

    def broken() -> None:
        raise RuntimeError("g++ missing")

    uncaught = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    monkeypatch.setattr(control, "_vec_isa_check", None)
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", broken)
    control.start_cpu_vec_isa_check().join(timeout=60)
    assert uncaught == []

    monkeypatch.setattr(control, "_vec_isa_check", None)
    monkeypatch.delattr(cpu_vec_isa, "valid_vec_isa_list")
    assert control.start_cpu_vec_isa_check() is None  # another torch: compile() still works
    compile(lambda x: x - 1)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_hop", [False, True])
def test_bad_input_raises_naming_the_argument(use_hop):
    f = lambda c, x: (c, x)  # noqa: E731
    c = torch.tensor(0.0)
    with pytest.raises(ValueError, match=r"^length: expected a positive int when xs is None"):
        scan(f, c, use_hop=use_hop)
    with pytest.raises(ValueError, match=r"^length: expected a positive int"):
        scan(f, c, length=0, use_hop=use_hop)
    with pytest.raises(ValueError, match=r"^xs: expected leaves sharing their leading dimension"):
        scan(f, c, {"a": torch.zeros(3), "b": torch.zeros(4)}, use_hop=use_hop)
    with pytest.raises(ValueError, match=r"^length: expected 3 \(the leading dimension of xs\), got 4"):
        scan(f, c, torch.zeros(3), length=4, use_hop=use_hop)
    with pytest.raises(ValueError, match=r"^xs: expected a leading dimension of at least 1"):
        scan(f, c, torch.zeros(0, 2), use_hop=use_hop)
    with pytest.raises(ValueError, match=r"^xs: expected tensor leaves with a leading"):
        scan(f, c, torch.tensor(1.0), use_hop=use_hop)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"^unroll: expected a positive int"):
            scan(f, c, torch.zeros(3), unroll=bad, use_hop=use_hop)


@pytest.mark.slow
def test_compiled_tanh_is_decomposed_and_within_bound_of_eager():
    """INDUCTOR_OPTIONS computes tanh through exp in CPU kernels; it stays within 2.4e-7 of eager
    over the whole float range (saturation, infinities, NaN included)."""
    from torch._inductor.utils import run_and_get_code

    x = torch.cat(
        [
            torch.linspace(-20.0, 20.0, 400_001),
            torch.linspace(-1e-3, 1e-3, 10_001),
            torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 1e30, -1e30, float("inf"), float("-inf")]),
        ]
    )
    with torch._inductor.config.patch(fx_graph_cache=False):
        got, (code,) = run_and_get_code(compile(torch.tanh), x)
        _, (code_sleef,) = run_and_get_code(compile(torch.tanh, options={"cpp.use_decompose_tanh": False}), x)
    assert ".tanh()" not in code and ".exp()" in code
    assert ".tanh()" in code_sleef
    expected = torch.tanh(x)
    assert (got - expected).abs().max().item() <= 2.4e-7
    assert got.abs().max().item() <= 1.0 and got[-2].item() == 1.0 and got[-1].item() == -1.0
    assert torch.isnan(compile(torch.tanh)(torch.tensor([float("nan")] * 32))).all()


# ---------------------------------------------------------------------------------------------
# Output trees through the scan op (plain path, no probe; opaque path, one probe)
# ---------------------------------------------------------------------------------------------


class Emitted(NamedTuple):
    """A module-level NamedTuple output: carried through the op by name, no probe."""

    value: torch.Tensor
    nested: dict[str, Any]


Aliased = NamedTuple("NotItsModuleName", [("value", torch.Tensor)])  # noqa: UP014 - the point


def _emitting_step(carry: torch.Tensor, x: torch.Tensor):
    y = Emitted(torch.sin(carry * x), {"none": None, "empty": (), "pair": [x + 1, Carry(x, x.sum(), x * 2)]})
    return carry + x, y


def _outer_graph_sin_count(fn, *args) -> int:
    """Calls of torch.sin in the graph dynamo traces, outside loop bodies (a probe's trace of the
    step lands there; the loop body is a subgraph)."""
    sins = (torch.sin, torch.ops.aten.sin.default)
    return sum(node.target in sins for gm in traced_graphs(fn, *args) for node in gm.graph.nodes)


def test_plain_tree_round_trip_keeps_types():
    from funrl.control import _from_plain, _is_plain, _to_plain

    t = torch.arange(3.0)
    y = Emitted(t, {"none": None, "empty": (), "pair": [t + 1, Carry(t, t.sum(), t * 2)]})
    assert _is_plain(y)
    back = _from_plain(_to_plain(y))
    assert tree.structure(back) == tree.structure(y) and type(back.nested["pair"][1]) is Carry
    assert tree.tree_equal(back, y) and back.nested["none"] is None

    class Local(NamedTuple):
        a: torch.Tensor

    assert not _is_plain({"x": Local(t)}) and not _is_plain({"x": 3}) and not _is_plain(Aliased(t))


@pytest.mark.slow
def test_compiled_scan_carries_namedtuple_outputs_without_a_probe():
    """A module-level NamedTuple (nested, with None and empty containers) comes out of the op with
    its types, equal to eager; the step is traced once (no probe in the outer graph), while an
    output with a function-local NamedTuple takes the probe and is rebuilt all the same."""
    init, xs = torch.zeros(3), R.normal(R.key(9), (4, 3))
    run = lambda init, xs: scan(_emitting_step, init, xs)  # noqa: E731
    got = compile(run)(init, xs)
    expected = reference_scan(_emitting_step, init, xs)
    assert tree.structure(got) == tree.structure(expected) and type(got[1]) is Emitted
    assert tree.tree_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert _outer_graph_sin_count(run, init, xs) == 0

    class Local(NamedTuple):
        value: torch.Tensor

    def local_step(carry, x):
        return carry + x, (Local(torch.sin(carry * x)), None)

    run_local = lambda init, xs: scan(local_step, init, xs)  # noqa: E731
    got = compile(run_local)(init, xs)
    expected = reference_scan(local_step, init, xs)
    assert type(got[1][0]) is Local and got[1][1] is None
    assert tree.tree_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert _outer_graph_sin_count(run_local, init, xs) == 1

    def aliased_step(carry, x):  # a module-level NamedTuple not found under its own name
        return carry + x, Aliased(torch.sin(carry * x))

    got = compile(lambda init, xs: scan(aliased_step, init, xs))(init, xs)
    assert type(got[1]) is Aliased
    assert tree.tree_allclose(got, reference_scan(aliased_step, init, xs), rtol=1e-6, atol=1e-6)


_VMAPPED_SCAN_COMPILE = """
import sys, warnings
import torch
from torch.func import vmap
from funrl.control import scan
if sys.argv[1] == "drop-filter":  # the planted check: funrl's filter removed after import
    warnings.filters[:] = [f for f in warnings.filters if "select_copy" not in str(f[1] and f[1].pattern)]
def run(init, xs):
    return scan(lambda c, x: (c + x, c * x), init, xs)
compiled = torch.compile(vmap(run), backend="eager", fullgraph=True)
carry, ys = compiled(torch.zeros(3, 2), torch.ones(3, 5, 2))
assert torch.equal(carry, torch.full((3, 2), 5.0)) and ys.shape == (3, 5, 2)
with warnings.catch_warnings(record=True) as eager:  # eager: there the same warning must still show
    vmap(lambda x: torch.select_copy(x, 0, 0))(torch.ones(2, 3, 4))
assert any("select_copy.int" in str(w.message) for w in eager), [str(w.message) for w in eager]
"""


@pytest.mark.parametrize("variant", ["as-shipped", "drop-filter"])
def test_compiling_a_vmapped_scan_prints_no_trace_time_fallback_warning(variant):
    """torch's scan op takes its body's example input with select_copy while dynamo traces, and under
    vmap that op has no batching rule: every compile of a vmapped scan warned of a performance drop
    that the generated code never has. A fresh interpreter with every UserWarning shown (-W always)
    must print none of it, while the same warning from eager vmap code still reaches the user; the
    same run with funrl's filter removed prints it (so the check can fail)."""
    result = subprocess.run(
        [sys.executable, "-W", "always::UserWarning", "-c", _VMAPPED_SCAN_COMPILE, variant],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    warned = "batching rule for aten::select_copy.int" in result.stderr
    assert warned == (variant == "drop-filter"), result.stderr


ZEN3_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 avx fma avx2 bmi2
processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: avx512f
"""


@pytest.mark.parametrize(
    ("cpuinfo", "slow"),
    [
        (ZEN3_CPUINFO, True),  # later processors' lines are not read
        (ZEN3_CPUINFO.replace("avx2", "avx2 avx512f"), False),  # Zen 4: AVX-512 kernels, mask registers
        (ZEN3_CPUINFO.replace("AuthenticAMD", "GenuineIntel"), False),
        (ZEN3_CPUINFO.replace(" avx2", ""), False),  # no AVX2: no vmaskmovps in the kernels
        ("flags\t: avx avx2\nvendor_id\t: AuthenticAMD\n", True),  # field order does not matter
        ("", False),
    ],
)
def test_masked_moves_are_slow_only_on_amd_cpus_with_avx2_kernels(cpuinfo: str, slow: bool):
    from funrl.control import masked_moves_are_slow

    assert masked_moves_are_slow(cpuinfo) is slow


def test_inductor_options_keep_the_loop_tail_scalar_exactly_on_such_cpus():
    import funrl.control as control

    try:
        with open("/proc/cpuinfo") as f:
            slow = control.masked_moves_are_slow(f.read())
    except OSError:
        slow = False
    assert ("cpp.enable_loop_tail_vec" in control.INDUCTOR_OPTIONS) is slow
    assert control.INDUCTOR_OPTIONS.get("cpp.enable_loop_tail_vec", False) is False


def test_scalar_loop_tail_keeps_a_compiled_gather_equal_to_eager():
    """The option INDUCTOR_OPTIONS adds on AMD CPUs with AVX2 kernels, forced here on any CPU:
    rows of 41 floats (a partial last vector) and a bool column, gathered and scaled, compiled
    equal eager bit for bit."""
    from funrl.control import compile

    def gather(floats: torch.Tensor, flags: torch.Tensor, rows: torch.Tensor):
        return torch.index_select(floats, 0, rows) * 2.0, torch.index_select(flags, 0, rows)

    floats = R.normal(R.key(3), (1000, 41))
    flags = R.uniform(R.key(4), (1000, 1)) > 0.5
    rows = R.randint(R.key(5), (256,), 0, 1000)
    expected = gather(floats, flags, rows)
    got = compile(gather, options={"cpp.enable_loop_tail_vec": False})(floats, flags, rows)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
