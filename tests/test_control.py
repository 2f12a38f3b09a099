"""Tests for funrl.control: the Python-loop path and the higher-order-op path of scan agree;
is_traced; compile's options."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch
from dynamo_graphs import traced_graphs
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.func import vmap

import funrl.random as R
from funrl import control, tree
from funrl.control import compile, fori_loop, is_traced, scan


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


def test_is_traced_under_compile_and_torch_func_transforms_only():
    assert is_traced() is False
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(is_traced())
        return x * 2

    vmap(record)(torch.ones(2, 3))
    torch.func.grad(lambda x: record(x).sum())(torch.ones(3))
    torch.compile(record, backend="eager", fullgraph=True)(torch.ones(3))
    assert seen == [True, True, True]
    assert is_traced() is False


def _branches(calls: list[str]):
    """Two branches of one output structure (a float, an int and a nested tuple) that log calls."""

    def double(x: torch.Tensor, n: torch.Tensor):
        calls.append("true")
        return {"x": x * 2, "pair": (n + 1, x.sum())}

    def keep(x: torch.Tensor, n: torch.Tensor):
        calls.append("false")
        return {"x": x, "pair": (n, torch.zeros(()))}

    return double, keep


@pytest.mark.parametrize("pred", [True, False])
def test_cond_eagerly_runs_only_the_branch_pred_picks(pred):
    calls: list[str] = []
    double, keep = _branches(calls)
    x, n = torch.arange(3.0), torch.tensor(4)
    out = control.cond(torch.tensor(pred), double, keep, x, n)
    assert calls == ["true" if pred else "false"]
    expected = double(x, n) if pred else keep(x, n)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_cond_traced_selects_each_element_of_a_vmapped_predicate_and_compiles_to_the_same():
    """Under vmap each batch element takes its own branch (both run, then a select); compiled
    (fullgraph, no graph break on the predicate) gives what eager gives."""
    calls: list[str] = []
    double, keep = _branches(calls)
    preds = torch.tensor([True, False, True])
    xs, ns = R.normal(R.key(0), (3, 4)), torch.tensor([1, 2, 3])
    batched = vmap(lambda p, x, n: control.cond(p, double, keep, x, n))(preds, xs, ns)
    assert sorted(set(calls)) == ["false", "true"]
    loop = [control.cond(p, double, keep, x, n) for p, x, n in zip(preds, xs, ns, strict=True)]
    torch.testing.assert_close(batched, tree.stack(loop), rtol=0, atol=0)
    compiled = torch.compile(
        lambda p, x, n: control.cond(p, double, keep, x, n), backend="eager", fullgraph=True
    )
    for p, x, n in zip(preds, xs, ns, strict=True):
        torch.testing.assert_close(compiled(p, x, n), control.cond(p, double, keep, x, n), rtol=0, atol=0)


def test_cond_bad_input_names_the_argument():
    calls: list[str] = []
    double, keep = _branches(calls)
    x, n = torch.ones(2), torch.tensor(0)
    with pytest.raises(
        ValueError, match=r"pred: expected a boolean tensor with one element, got torch.int64"
    ):
        control.cond(torch.tensor(1), double, keep, x, n)
    with pytest.raises(ValueError, match=r"pred: .* got torch.bool of shape \[2\]"):
        control.cond(torch.tensor([True, False]), double, keep, x, n)
    with pytest.raises(ValueError, match=r"pred: .* got bool"):
        control.cond(True, double, keep, x, n)
    with pytest.raises(ValueError, match=r"true_fn, false_fn: expected outputs of one structure"):
        vmap(lambda p: control.cond(p, double, lambda x, n: {"x": x}, x, n))(torch.tensor([True]))


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
    return forward, backward, counted, looped, torch.compiler.is_compiling()


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


def test_the_loop_op_gets_dense_xs_whatever_views_the_caller_passes():
    """torch lowers the op to a loop that carries xs along: an xs view (a component unbound from a
    wider array, an expanded scalar) would be copied whole on every iteration."""

    def run(draws: torch.Tensor) -> Any:
        component = draws.unbind(-1)[0]  # [T, N], stride 4
        constant = torch.zeros((), dtype=torch.int32).expand(draws.shape[:2])  # stride 0
        return scan(lambda c, x: (c + x[0] + x[1], c), torch.zeros(draws.shape[1]), (component, constant))

    graphs = traced_graphs(run, R.normal(R.key(5), (6, 3, 4)))
    (op,) = [node for gm in graphs for node in gm.graph.nodes if node.target is torch.ops.higher_order.scan]
    xs = op.args[2]
    assert len(xs) == 2
    for x in xs:
        value = x.meta["example_value"]
        assert value.is_contiguous() and 0 not in value.stride(), (value.shape, value.stride())


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


def test_compile_adds_funrl_options_and_the_caller_wins(monkeypatch):
    """INDUCTOR_OPTIONS go to torch.compile unless ``options`` says otherwise; reduce-overhead becomes
    its option (torch takes a mode or options, not both); another mode goes as it is."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(control.torch, "compile", lambda fn, **kwargs: seen.append(kwargs) or fn)
    compile(abs)
    compile(abs, options={"size_asserts": True})
    compile(abs, mode="reduce-overhead")
    compile(abs, mode="max-autotune")
    funrl_options = {**control.INDUCTOR_OPTIONS, **control._cache_options("cpu")}
    assert seen[0]["options"] == funrl_options and seen[0]["fullgraph"] is True
    assert seen[1]["options"] == {**funrl_options, "size_asserts": True}
    assert seen[2]["options"] == {**funrl_options, "triton.cudagraphs": True}
    assert "mode" not in seen[2]
    assert seen[3]["mode"] == "max-autotune" and "options" not in seen[3]
    assert all(kwargs["isolate_recompiles"] is True for kwargs in seen)


@pytest.mark.slow
def test_each_compiled_function_has_its_own_recompile_limit():
    """funrl compiles one function (an agent's step) once per static config; dynamo keeps compiled
    entries per code object and allows eight recompiles by default, so with a shared count the
    ninth config raises under fullgraph. Every config's graph here is the same (one cheap compile,
    then cache hits); dynamo still guards on each config's value and recompiles for it."""

    def make_step(config: int):
        def step(x: torch.Tensor) -> torch.Tensor:
            return x + 1.0 if config >= 0 else x

        return step

    x = torch.zeros(3)
    for config in range(12):
        assert torch.equal(compile(make_step(config), dynamic=False)(x), x + 1.0)


def test_register_pytree_node_lets_vmap_see_through_a_container():
    class Pair:
        def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
            self.a, self.b = a, b

    control.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda children, _: Pair(*children))
    out = vmap(lambda p: Pair(p.a + p.b, p.a * p.b))(Pair(torch.arange(3.0), torch.ones(3)))
    assert (
        isinstance(out, Pair)
        and torch.equal(out.a, torch.arange(3.0) + 1)
        and torch.equal(out.b, torch.arange(3.0))
    )


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


@pytest.mark.slow
@pytest.mark.parametrize("seed_dim", [0, 2])
def test_compiled_scan_under_vmap_with_a_fresh_zero_carry(seed_dim):
    """A carry made by ``zeros_like`` inside a vmapped function sits in memory with the seed
    dimension first, while the step's arithmetic may put it elsewhere; the compiled scan op
    refuses a carry whose strides change, unless scan writes each new carry in the old layout
    (the failure of 8-seed PPO's GAE)."""

    def backward_sum(errors, decays):
        def step(carry, x):
            later, bias = carry  # bias: a size-1 leaf, like a value head's bias in a minibatch loop
            error, decay = x
            total = error + decay * later + bias
            return (total, bias * decay.mean()), total

        init = (torch.zeros_like(errors[0]), errors[0, :1] * 0 + 1)
        return scan(step, init, (errors, decays), reverse=True)[1]

    g = torch.Generator().manual_seed(0)
    shape = [6, 4]
    shape.insert(seed_dim, 3)
    errors, decays = torch.randn(shape, generator=g), torch.rand(shape, generator=g)
    batched = torch.func.vmap(backward_sum, in_dims=(seed_dim, seed_dim))
    compiled = control.compile(batched, dynamic=False)
    torch.testing.assert_close(compiled(errors, decays), batched(errors, decays))


@pytest.mark.slow
def test_compiled_scan_under_vmap_with_size_one_carry_inputs():
    """Carry leaves of one element per seed taken straight from the vmapped inputs (one env per
    seed): the op moves the seed dim last, inductor strides the size-1 dim of the init otherwise
    than the body's output, and the op refused the scan (compiled PPO with ``--num-envs 1``)."""

    def run(xs, bias, count):
        def step(carry, x):
            later, b, c = carry
            total = later * 0.9 + x + b
            return (total, b * x.mean(), c + 1), total

        return scan(step, (torch.zeros_like(xs[0]), bias, count), xs)

    g = torch.Generator().manual_seed(0)
    xs, bias = torch.randn(2, 6, 1, generator=g), torch.randn(2, 1, generator=g)
    count = torch.zeros(2, 1)
    batched = torch.func.vmap(run)
    compiled = control.compile(batched, dynamic=False, fullgraph=True)
    torch.testing.assert_close(compiled(xs, bias, count), batched(xs, bias, count))
