"""funrl.optim: agreement with torch.optim / lr_scheduler / clip_grad_norm_, composition, vmap,
compile, purity, invariants and input errors."""

from __future__ import annotations

import math

import pytest
import torch
from dynamo_graphs import capturing_compile
from hypothesis import given
from hypothesis import strategies as st

from funrl import optim, tree

STEPS = 200


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def _initial_params(dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().to(dtype) for k, v in _mlp().named_parameters()}


# (id, funrl optimiser factory, torch optimiser from a parameter list)
TORCH_CASES = [
    ("sgd", lambda: optim.sgd(0.05), lambda ps: torch.optim.SGD(ps, lr=0.05)),
    (
        "sgd_momentum",
        lambda: optim.sgd(0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    ),
    (
        "sgd_nesterov",
        lambda: optim.sgd(0.05, momentum=0.9, nesterov=True),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    ),
    (
        "adam",
        lambda: optim.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.01),
        lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01),
    ),
    (
        "adamw",
        lambda: optim.adamw(1e-2, weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    ),
    ("rmsprop", lambda: optim.rmsprop(1e-2), lambda ps: torch.optim.RMSprop(ps, lr=1e-2)),
    (
        "rmsprop_centered",
        lambda: optim.rmsprop(1e-2, centered=True, momentum=0.5, weight_decay=0.01),
        lambda ps: torch.optim.RMSprop(ps, lr=1e-2, centered=True, momentum=0.5, weight_decay=0.01),
    ),
]
CASE_IDS = [c[0] for c in TORCH_CASES]


def _relative_errors(params: dict, reference: dict) -> dict[str, float]:
    """Per-leaf ||p - ref|| / ||ref||."""
    return {
        k: float((params[k] - reference[k].detach()).norm() / reference[k].detach().norm()) for k in params
    }


def _run_fixed_grads(opt: optim.Optimizer, make_torch, grads_seq, p0):
    """STEPS updates from a fixed gradient sequence, functional and torch.optim side by side."""
    torch_params = {k: torch.nn.Parameter(v.clone()) for k, v in p0.items()}
    torch_opt = make_torch(list(torch_params.values()))
    params, state = p0, opt.init(p0)
    for grads in grads_seq:
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        for k, p in torch_params.items():
            p.grad = grads[k].clone()
        torch_opt.step()
    return params, torch_params, state


@pytest.fixture(scope="module")
def grads_seq():
    p0 = _initial_params()
    gen = torch.Generator().manual_seed(1)
    return [{k: torch.randn(v.shape, generator=gen) for k, v in p0.items()} for _ in range(STEPS)]


@pytest.mark.parametrize("case", TORCH_CASES, ids=CASE_IDS)
def test_matches_torch_optim_fixed_grads_float32(case, grads_seq):
    _, make, make_torch = case
    p0 = _initial_params()
    params, torch_params, state = _run_fixed_grads(make(), make_torch, grads_seq, p0)
    errors = _relative_errors(params, torch_params)
    assert max(errors.values()) <= 1e-6, errors
    assert int(state.count) == STEPS


@pytest.mark.parametrize("case", TORCH_CASES, ids=CASE_IDS)
def test_matches_torch_optim_training_float64(case):
    """A real loss drives both runs (gradients depend on the params): elementwise 1e-6 relative."""
    _, make, make_torch = case
    net = _mlp().double()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(32, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(32, 2, generator=gen, dtype=torch.float64)

    def loss_fn(p):
        return ((torch.func.functional_call(net, p, (x,)) - y) ** 2).mean()

    p0 = _initial_params(torch.float64)
    torch_params = {k: torch.nn.Parameter(v.clone()) for k, v in p0.items()}
    torch_opt = make_torch(list(torch_params.values()))
    opt = make()
    params, state = p0, opt.init(p0)
    for _ in range(STEPS):
        updates, state = opt.update(torch.func.grad(loss_fn)(params), state, params)
        params = optim.apply_updates(params, updates)
        torch_opt.zero_grad()
        loss_fn(torch_params).backward()
        torch_opt.step()
    for k in params:
        torch.testing.assert_close(params[k], torch_params[k].detach(), rtol=1e-6, atol=0)
    assert float(loss_fn(params)) < float(loss_fn(p0))


@pytest.mark.parametrize(
    "wrong, make_torch",
    [
        # b2 off by 0.001
        (optim.adam(1e-2, b2=0.998), lambda ps: torch.optim.Adam(ps, lr=1e-2)),
        # L2 decay folded into the gradient is not AdamW's decoupled decay
        (
            optim.chain(optim.add_decayed_weights(0.1), optim.adam(1e-2)),
            lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
        ),
        # a damped first momentum step (buffer starting from zero) is not torch's SGD
        (
            optim.chain(optim.scale(0.9), optim.sgd(0.05, momentum=0.9)),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1),
        ),
        # optax's default RMSprop decay (0.9) is not torch's alpha (0.99)
        (optim.rmsprop(1e-2, alpha=0.9), lambda ps: torch.optim.RMSprop(ps, lr=1e-2)),
    ],
    ids=["adam_b2", "coupled_decay", "damped_first_step", "rmsprop_alpha"],
)
def test_comparison_detects_planted_differences(wrong, make_torch, grads_seq):
    """The 1e-6 criterion above is sharp: near-miss optimisers fail it."""
    params, torch_params, _ = _run_fixed_grads(wrong, make_torch, grads_seq, _initial_params())
    assert max(_relative_errors(params, torch_params).values()) > 1e-5


# ---------------------------------------------------------------------------------------------
# schedules


def _counts(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64)


def _assert_schedule(schedule, expected: list[float], rtol: float = 1e-6, atol: float = 1e-9) -> None:
    got = schedule(_counts(len(expected)))
    assert got.dtype == torch.float32
    torch.testing.assert_close(
        got.double(), torch.tensor(expected, dtype=torch.float64), rtol=rtol, atol=atol
    )


def test_schedules_equal_closed_forms():
    n = 130
    _assert_schedule(optim.constant_schedule(0.3), [0.3] * n)
    _assert_schedule(
        optim.linear_schedule(1.0, 0.1, transition_steps=50, transition_begin=10),
        [1.0 + (0.1 - 1.0) * min(max(t - 10, 0), 50) / 50 for t in range(n)],
    )
    _assert_schedule(
        optim.cosine_decay_schedule(0.5, decay_steps=100, alpha=0.1, exponent=2.0),
        [0.5 * (0.9 * (0.5 * (1 + math.cos(math.pi * min(t, 100) / 100))) ** 2 + 0.1) for t in range(n)],
    )
    _assert_schedule(
        optim.warmup_cosine_decay_schedule(0.0, 1e-3, warmup_steps=20, decay_steps=120, end_value=1e-5),
        [
            1e-3 * t / 20
            if t < 20
            else 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi * min(t - 20, 100) / 100))
            for t in range(n)
        ],
        atol=1e-12,
    )
    _assert_schedule(
        optim.piecewise_constant_schedule(2.0, {30: 0.5, 80: 0.1}),
        [2.0 * (0.5 if t >= 30 else 1.0) * (0.1 if t >= 80 else 1.0) for t in range(n)],
    )
    _assert_schedule(
        optim.join_schedules([optim.constant_schedule(1.0), optim.linear_schedule(1.0, 0.0, 10)], [40]),
        [1.0 if t < 40 else 1.0 - min(t - 40, 10) / 10 for t in range(n)],
    )


def _torch_scheduler_lrs(make_scheduler, n: int, base_lr: float) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    scheduler = make_scheduler(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize(
    "schedule, make_scheduler",
    [
        (
            optim.linear_schedule(0.1 * 0.25, 0.1, transition_steps=40),
            lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=40),
        ),
        (
            optim.cosine_decay_schedule(0.1, decay_steps=80, alpha=0.05),
            lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=80, eta_min=0.005),
        ),
        (
            optim.piecewise_constant_schedule(0.1, {20: 0.5, 50: 0.5}),
            lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[20, 50], gamma=0.5),
        ),
    ],
    ids=["LinearLR", "CosineAnnealingLR", "MultiStepLR"],
)
def test_schedules_equal_torch_lr_scheduler(schedule, make_scheduler):
    n = 81  # CosineAnnealingLR is periodic past T_max; optax-style schedules hold their end value
    expected = _torch_scheduler_lrs(make_scheduler, n, base_lr=0.1)
    _assert_schedule(schedule, expected, rtol=1e-6, atol=1e-9)


def test_scheduled_adam_matches_torch_adam_with_scheduler(grads_seq):
    """The count in the state drives the schedule exactly as scheduler.step() does."""
    opt = optim.adam(optim.linear_schedule(1e-2 * 0.1, 1e-2, transition_steps=100))
    make_torch = lambda ps: torch.optim.Adam(ps, lr=1e-2)
    p0 = _initial_params()
    torch_params = {k: torch.nn.Parameter(v.clone()) for k, v in p0.items()}
    torch_opt = make_torch(list(torch_params.values()))
    scheduler = torch.optim.lr_scheduler.LinearLR(torch_opt, start_factor=0.1, total_iters=100)
    params, state = p0, opt.init(p0)
    for grads in grads_seq:
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        for k, p in torch_params.items():
            p.grad = grads[k].clone()
        torch_opt.step()
        scheduler.step()
    assert max(_relative_errors(params, torch_params).values()) <= 1e-6


@given(
    init=st.floats(0.0, 1.0),
    peak=st.floats(1e-4, 10.0),
    end_fraction=st.floats(0.0, 1.0),
    warmup=st.integers(0, 50),
    decay=st.integers(1, 200),
)
def test_warmup_cosine_invariants(init, peak, end_fraction, warmup, decay):
    end = peak * end_fraction
    total = warmup + decay
    values = optim.warmup_cosine_decay_schedule(init, peak, warmup, total, end)(_counts(total + 20)).double()
    tol = 1e-6 * max(peak, init)
    assert float(values.max()) <= max(init, peak) + tol
    assert float(values.min()) >= min(init, end) - tol
    decaying = values[warmup:]
    assert bool((decaying[1:] <= decaying[:-1] + tol).all())  # non-increasing after warm-up
    assert abs(float(values[warmup]) - peak) <= tol  # the peak is reached at the boundary
    assert bool(torch.all((values[total:] - end).abs() <= tol))  # then held at end_value


# ---------------------------------------------------------------------------------------------
# clipping and composition


@pytest.mark.parametrize("max_norm", [0.5, 1e3], ids=["clipped", "unclipped"])
def test_clip_by_global_norm_equals_clip_grad_norm(max_norm, grads_seq):
    grads = grads_seq[0]
    torch_params = {k: torch.nn.Parameter(torch.zeros_like(v)) for k, v in grads.items()}
    for k, p in torch_params.items():
        p.grad = grads[k].clone()
    total = torch.nn.utils.clip_grad_norm_(list(torch_params.values()), max_norm)
    clip = optim.clip_by_global_norm(max_norm)
    clipped, state = clip.update(grads, clip.init(grads))
    assert state == optim.EmptyState()
    torch.testing.assert_close(optim.global_norm(grads), total, rtol=1e-6, atol=0)
    for k in grads:
        torch.testing.assert_close(clipped[k], torch_params[k].grad, rtol=1e-6, atol=0)


@given(
    shapes=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=4),
    max_norm=st.floats(1e-3, 100.0),
    seed=st.integers(0, 2**31 - 1),
    magnitude=st.floats(1e-3, 1e3),
)
def test_clip_invariants(shapes, max_norm, seed, magnitude):
    gen = torch.Generator().manual_seed(seed)
    grads = {
        f"g{i}": magnitude * torch.randn(s, generator=gen, dtype=torch.float64) for i, s in enumerate(shapes)
    }
    clip = optim.clip_by_global_norm(max_norm)
    clipped, _ = clip.update(grads, clip.init(grads))
    norm, new_norm = float(optim.global_norm(grads)), float(optim.global_norm(clipped))
    assert new_norm <= max_norm * (1 + 1e-9)
    if norm + 1e-6 <= max_norm:
        assert tree.tree_equal(clipped, grads)  # below the threshold nothing changes
    else:
        assert new_norm == pytest.approx(max_norm * norm / (norm + 1e-6), rel=1e-9)
    # the direction is kept: clipped = c * grads for one c in (0, 1]
    ratio = float(optim.global_norm(clipped)) / norm
    assert tree.tree_allclose(clipped, tree.map(lambda g: g * ratio, grads), rtol=1e-9, atol=0)


def test_chain_composes_parts_into_adam(grads_seq):
    """add_decayed_weights -> scale_by_adam -> scale_by_learning_rate is Adam with L2 decay."""
    composed = optim.chain(
        optim.add_decayed_weights(0.01),
        optim.scale_by_adam(b1=0.8, b2=0.99, eps=1e-6),
        optim.scale_by_learning_rate(1e-2),
    )
    fused = optim.adam(1e-2, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.01)
    p0 = _initial_params(torch.float64)
    pc, sc = p0, composed.init(p0)
    pf, sf = p0, fused.init(p0)
    for grads in tree.to(grads_seq[:50], dtype=torch.float64):
        uc, sc = composed.update(grads, sc, pc)
        uf, sf = fused.update(grads, sf, pf)
        pc, pf = optim.apply_updates(pc, uc), optim.apply_updates(pf, uf)
    assert isinstance(sc, tuple) and len(sc) == 3
    assert isinstance(sc[1], optim.AdamState)
    assert tree.tree_allclose(pc, pf, rtol=1e-6, atol=0)
    assert tree.tree_allclose((sc[1].mu, sc[1].nu), (sf.mu, sf.nu), rtol=1e-6, atol=0)


def test_chain_clip_then_adam_equals_torch(grads_seq):
    opt = optim.chain(optim.clip_by_global_norm(2.0), optim.adam(1e-2))
    p0 = _initial_params()
    torch_params = {k: torch.nn.Parameter(v.clone()) for k, v in p0.items()}
    torch_opt = torch.optim.Adam(list(torch_params.values()), lr=1e-2)
    params, state = p0, opt.init(p0)
    for grads in grads_seq[:100]:
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        for k, p in torch_params.items():
            p.grad = grads[k].clone()
        torch.nn.utils.clip_grad_norm_(list(torch_params.values()), 2.0)
        torch_opt.step()
    assert max(_relative_errors(params, torch_params).values()) <= 1e-6


def test_scale_by_schedule_and_scale_by_learning_rate():
    grads = {"w": torch.tensor([1.0, -2.0])}
    by_schedule = optim.scale_by_schedule(lambda count: 0.5 * (count + 1))
    state = by_schedule.init(grads)
    first, state = by_schedule.update(grads, state)
    second, state = by_schedule.update(grads, state)
    assert torch.equal(first["w"], torch.tensor([0.5, -1.0]))
    assert torch.equal(second["w"], torch.tensor([1.0, -2.0]))
    assert int(state.count) == 2
    for lr in (0.1, torch.tensor(0.1), optim.constant_schedule(0.1)):
        sgd_like = optim.scale_by_learning_rate(lr)
        updates, _ = sgd_like.update(grads, sgd_like.init(grads))
        torch.testing.assert_close(updates["w"], torch.tensor([-0.1, 0.2]), rtol=1e-7, atol=0)


# ---------------------------------------------------------------------------------------------
# vmap, compile, purity


def _make_for_member(name: str, lr):
    return {
        "sgd": lambda: optim.sgd(lr),
        "sgd_nesterov": lambda: optim.sgd(lr, momentum=0.9, nesterov=True),
        "rmsprop": lambda: optim.rmsprop(lr),
        "adam": lambda: optim.adam(lr),
        "adamw": lambda: optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(lr, weight_decay=0.1)),
        "rmsprop_centered": lambda: optim.rmsprop(lr, centered=True, momentum=0.5),
    }[name]()


@pytest.mark.parametrize("name", ["sgd", "sgd_nesterov", "adam", "adamw", "rmsprop", "rmsprop_centered"])
def test_vmap_per_member_learning_rate_equals_loop(name):
    members = 4
    gen = torch.Generator().manual_seed(3)
    params = tree.stack(
        [{"w": torch.randn(5, 3, generator=gen), "b": torch.randn(3, generator=gen)} for _ in range(members)]
    )
    grads_seq = [tree.map(lambda x: torch.randn(x.shape, generator=gen), params) for _ in range(5)]
    lrs = torch.tensor([0.3, 0.1, 0.01, 0.0])

    def train(p, grads_list, lr):
        opt = _make_for_member(name, lr)
        state = opt.init(p)
        for grads in grads_list:
            updates, state = opt.update(grads, state, p)
            p = optim.apply_updates(p, updates)
        return p, state

    batched = torch.func.vmap(train)(params, grads_seq, lrs)
    for i in range(members):
        expected = train(tree.index(params, i), [tree.index(g, i) for g in grads_seq], float(lrs[i]))
        assert tree.tree_allclose(tree.index(batched, i), expected, rtol=1e-6, atol=1e-7)
    assert tree.tree_equal(tree.index(batched[0], 3), tree.index(params, 3))  # lr 0 moves nothing


@pytest.mark.slow
def test_compiled_step_equals_eager(grads_seq):
    """One graph: clipping, AdamW with a warm-up cosine schedule and apply_updates."""
    opt = optim.chain(
        optim.clip_by_global_norm(1.0),
        optim.adamw(optim.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10), weight_decay=0.1),
    )

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state

    compiled = torch.compile(step, fullgraph=True)
    p0 = _initial_params()
    eager, fast = (p0, opt.init(p0)), (p0, opt.init(p0))
    for i, grads in enumerate(grads_seq[:3]):
        eager = step(*eager, grads)
        # The count is a tensor, so later steps (other schedule values) reuse the first graph.
        with torch.compiler.set_stance("fail_on_recompile" if i > 0 else "default"):
            fast = compiled(*fast, grads)
        assert tree.tree_allclose(fast, eager, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make", [optim.sgd, optim.adam], ids=["sgd", "adam"])
def test_grad_through_update_wrt_learning_rate(make):
    """An update differentiates under torch.func.grad w.r.t. a tensor learning rate:
    for loss(p) = |p|^2 / 2 and p' = p + u(lr), d loss(p') / d lr = p' . du/dlr = p' . u / lr."""
    gen = torch.Generator().manual_seed(4)
    params = {"w": torch.randn(6, generator=gen, dtype=torch.float64)}
    grads = {"w": torch.randn(6, generator=gen, dtype=torch.float64)}

    def loss_after_step(lr):
        opt = make(lr)
        updates, _ = opt.update(grads, opt.init(params), params)
        new = optim.apply_updates(params, updates)
        return 0.5 * (new["w"] ** 2).sum(), (new, updates)

    lr = torch.tensor(0.1, dtype=torch.float64)
    d_lr, (new, updates) = torch.func.grad(loss_after_step, has_aux=True)(lr)
    expected = (new["w"] * updates["w"] / lr).sum()  # both optimisers' first step is linear in lr
    torch.testing.assert_close(d_lr, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("case", TORCH_CASES, ids=CASE_IDS)
def test_update_is_pure(case, grads_seq):
    _, make, _ = case
    opt = make()
    params = _initial_params()
    state = opt.init(params)
    state = opt.update(grads_seq[0], state, params)[1]  # non-zero buffers
    snapshot = tree.map(torch.clone, (params, state, grads_seq[1]))
    first = opt.update(grads_seq[1], state, params)
    second = opt.update(grads_seq[1], state, params)
    assert tree.tree_equal(first, second)
    assert tree.tree_equal((params, state, grads_seq[1]), snapshot)
    new_params = optim.apply_updates(params, first[0])
    assert tree.tree_equal(params, snapshot[0]) and not tree.tree_equal(new_params, params)


def test_value_and_grad_step(grads_seq):
    net = _mlp()
    x, y = torch.randn(8, 4), torch.randn(8, 2)

    def loss_fn(p, xb, yb):
        err = torch.func.functional_call(net, p, (xb,)) - yb
        return (err**2).mean(), {"max_error": err.abs().max()}

    opt = optim.adam(1e-2)
    step = optim.value_and_grad_step(loss_fn, opt, has_aux=True)
    p0 = _initial_params()
    params, state, (loss, aux) = step(p0, opt.init(p0), x, y)
    grads = torch.func.grad(lambda p: loss_fn(p, x, y)[0])(p0)
    updates, expected_state = opt.update(grads, opt.init(p0), p0)
    assert tree.tree_equal(params, optim.apply_updates(p0, updates))
    assert tree.tree_equal(state, expected_state)
    assert torch.equal(loss, loss_fn(p0, x, y)[0]) and set(aux) == {"max_error"}


# ---------------------------------------------------------------------------------------------
# invariants


@given(
    shape=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    lr=st.floats(0.0, 10.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_plain_sgd_and_first_adam_step(shape, lr, seed):
    gen = torch.Generator().manual_seed(seed)
    params = {"p": torch.randn(shape, generator=gen)}
    grads = {"p": torch.randn(shape, generator=gen)}
    updates, _ = optim.sgd(lr).update(grads, optim.sgd(lr).init(params))
    assert torch.equal(updates["p"], grads["p"] * -lr)
    # Adam's first bias-corrected step is -lr * g / (|g| + eps): at most lr, against the gradient.
    adam = optim.adam(lr)
    updates, state = adam.update(grads, adam.init(params), params)
    assert bool((updates["p"].abs() <= lr * (1 + 1e-6)).all())
    assert bool((updates["p"] * grads["p"] <= 0).all())
    assert int(state.count) == 1
    assert tree.tree_equal(optim.apply_updates(params, tree.zeros_like(params)), params)


@given(
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    members=st.integers(1, 3),
)
def test_dtypes_and_state_layout(dtype, members):
    params = {"layer": {"w": torch.ones(members, 2, dtype=dtype)}, "scale": torch.ones((), dtype=dtype)}
    for opt in (optim.adam(1e-3), optim.rmsprop(1e-3, centered=True, momentum=0.9), optim.sgd(1e-3, 0.9)):
        state = opt.init(params)
        assert state.count.dtype == torch.int64 and state.count.shape == ()
        updates, state = opt.update(tree.map(torch.ones_like, params), state, params)
        new = optim.apply_updates(params, updates)
        assert tree.structure(new) == tree.structure(params)
        assert all(x.dtype == dtype for x in tree.leaves(new))
        assert all(x.dtype == dtype for x in tree.leaves(state)[1:])


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    "lr, error, match",
    [
        (-0.1, ValueError, "learning_rate: expected a finite value >= 0, got -0.1"),
        (float("nan"), ValueError, "learning_rate: expected a finite value"),
        (True, TypeError, "learning_rate: expected a float, a 0-dim tensor or a schedule"),
        ("0.1", TypeError, "got str"),
        (torch.tensor([0.1, 0.2]), ValueError, r"expected a 0-dim tensor, got shape \(2,\).*vmap"),
        (
            torch.tensor(1),
            TypeError,
            "learning_rate: expected a floating-point tensor, got dtype torch.int64",
        ),
    ],
)
def test_bad_learning_rate(lr, error, match):
    for make in (optim.sgd, optim.adam, optim.adamw, optim.rmsprop):
        with pytest.raises(error, match=match):
            make(lr)


def test_bad_hyper_parameters():
    with pytest.raises(ValueError, match=r"b1: expected a value in \[0.0, 1.0\), got 1.0"):
        optim.adam(1e-3, b1=1.0)
    with pytest.raises(ValueError, match="eps: expected a value in"):
        optim.rmsprop(1e-3, eps=-1.0)
    with pytest.raises(ValueError, match="nesterov: requires momentum > 0 and dampening == 0"):
        optim.sgd(1e-3, nesterov=True)
    with pytest.raises(ValueError, match="max_norm: expected a value > 0"):
        optim.clip_by_global_norm(0.0)
    with pytest.raises(TypeError, match=r"transforms\[1\]: expected an Optimizer, got function"):
        optim.chain(optim.adam(1e-3), lambda g: g)
    with pytest.raises(ValueError, match="decay_steps: expected more than warmup_steps=10, got 5"):
        optim.warmup_cosine_decay_schedule(0.0, 1.0, 10, 5)
    with pytest.raises(ValueError, match="boundaries: expected 1 boundaries for 2 schedules, got 2"):
        optim.join_schedules([optim.constant_schedule(1.0)] * 2, [1, 2])
    with pytest.raises(TypeError, match="count: expected an integer tensor or int"):
        optim.constant_schedule(1.0)(torch.tensor(1.5))


def test_apply_updates_errors():
    params = {"w": torch.zeros(2), "b": torch.zeros(1)}
    with pytest.raises(ValueError, match="updates: expected tree structure"):
        optim.apply_updates(params, {"w": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"updates: expected shape \(1,\) for leaf 0, got \(3,\)"):
        optim.apply_updates(params, {"w": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(
        TypeError, match="params: expected a pytree of floating-point tensors, got a str leaf"
    ):
        optim.apply_updates({"w": "weights"}, {"w": torch.zeros(2)})
    with pytest.raises(TypeError, match="params: expected a pytree of floating-point tensors, got a Linear"):
        optim.adam(1e-3).init(torch.nn.Linear(2, 2))
    with pytest.raises(
        TypeError, match="params: expected floating-point tensor leaves, got dtype torch.int64"
    ):
        optim.adam(1e-3).init({"w": torch.zeros(2, dtype=torch.int64)})


def test_update_errors():
    params = {"w": torch.zeros(2), "b": torch.zeros(1)}
    opt = optim.adam(1e-3)
    state = opt.init(params)
    with pytest.raises(ValueError, match="grads: expected tree structure"):
        opt.update({"w": torch.zeros(2)}, state, params)
    with pytest.raises(TypeError, match="state: expected AdamState, got SgdState"):
        opt.update(params, optim.sgd(1e-3).init(params), params)
    decayed = optim.adamw(1e-3)
    with pytest.raises(ValueError, match="params: weight_decay needs the current params, got None"):
        decayed.update(params, decayed.init(params))
    chained = optim.chain(optim.clip_by_global_norm(1.0), opt)
    with pytest.raises(ValueError, match="state: expected a tuple of 2 states"):
        chained.update(params, state, params)


# ---------------------------------------------------------------------------------------------
# inject_hyperparams


def _run(opt: optim.Optimizer, params, state, grads_list):
    for grads in grads_list:
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
    return params, state


def test_inject_hyperparams_state_and_equality_with_plain(grads_seq):
    injected = optim.inject_hyperparams(optim.adam)(learning_rate=1e-2, b1=0.8, eps=1e-6)
    plain = optim.adam(1e-2, b1=0.8, eps=1e-6)
    p0 = _initial_params()
    state = injected.init(p0)
    assert isinstance(state, optim.InjectHyperparamsState)
    assert set(state.hyperparams) == {"learning_rate", "b1", "eps"}  # defaults stay static
    for value in state.hyperparams.values():
        assert value.dtype == torch.float32 and value.shape == () and value.device == p0["0.weight"].device
    assert isinstance(state.inner_state, optim.AdamState)
    params, state = _run(injected, p0, state, grads_seq[:20])
    expected, expected_state = _run(plain, p0, plain.init(p0), grads_seq[:20])
    # float32 b1 and eps against their double values: close, not bitwise
    assert tree.tree_allclose((params, state.inner_state), (expected, expected_state), rtol=1e-5, atol=1e-7)


def test_inject_hyperparams_annealing_changes_the_step(grads_seq):
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1, momentum=0.5)
    p0 = _initial_params()
    state = opt.init(p0)
    _, state = opt.update(grads_seq[0], state, p0)
    annealed = state._replace(hyperparams={**state.hyperparams, "learning_rate": torch.tensor(0.025)})
    updates, _ = opt.update(grads_seq[1], state, p0)
    annealed_updates, annealed_state = opt.update(grads_seq[1], annealed, p0)
    assert tree.tree_allclose(annealed_updates, tree.map(lambda u: u / 4, updates), rtol=1e-6, atol=0)
    assert annealed_state.hyperparams["learning_rate"] is annealed.hyperparams["learning_rate"]


def test_inject_hyperparams_vmap_over_learning_rates_equals_loop(grads_seq):
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=1e-3, eps=1e-5)
    p0 = _initial_params()
    lrs = [0.1, 0.01, 0.0]
    states = [
        opt.init(p0)._replace(hyperparams={"learning_rate": torch.tensor(lr), "eps": torch.tensor(1e-5)})
        for lr in lrs
    ]
    stacked_params = tree.stack([p0] * len(lrs))
    batched = torch.func.vmap(lambda p, s: _run(opt, p, s, grads_seq[:5]))(stacked_params, tree.stack(states))
    for i, state in enumerate(states):
        expected = _run(opt, p0, state, grads_seq[:5])
        assert tree.tree_allclose(tree.index(batched, i), expected, rtol=1e-6, atol=1e-7)
    assert tree.tree_equal(tree.index(batched[0], 2), p0)  # lr 0 moves nothing


def test_inject_hyperparams_compiled_update_compiles_once(grads_seq):
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=1e-2)

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optim.apply_updates(params, updates), state

    compiled, graphs = capturing_compile(step)
    p0 = _initial_params()
    state = opt.init(p0)
    for _ in range(2):
        fast = compiled(p0, state, grads_seq[0])
        assert tree.tree_allclose(fast, step(p0, state, grads_seq[0]), rtol=1e-6, atol=1e-8)
        # annealing as a train step would: a new value of whatever init stored
        state = state._replace(hyperparams={"learning_rate": state.hyperparams["learning_rate"] * 0.3})
    assert len(graphs) == 1


def test_inject_hyperparams_clip_and_scale_by_adam_accept_tensors(grads_seq):
    clip = optim.inject_hyperparams(optim.clip_by_global_norm)(max_norm=0.5)
    direction = optim.inject_hyperparams(optim.scale_by_adam)(b1=0.8, b2=0.99, eps=1e-6)
    grads = grads_seq[0]
    clipped, _ = clip.update(grads, clip.init(grads))
    expected, _ = optim.clip_by_global_norm(0.5).update(grads, optim.EmptyState())
    assert tree.tree_allclose(clipped, expected, rtol=1e-6, atol=0)
    p0 = _initial_params()
    got, _ = _run(direction, p0, direction.init(p0), grads_seq[:5])
    plain = optim.scale_by_adam(b1=0.8, b2=0.99, eps=1e-6)
    assert tree.tree_allclose(got, _run(plain, p0, plain.init(p0), grads_seq[:5])[0], rtol=1e-5, atol=1e-6)


def test_inject_hyperparams_static_args_and_errors():
    params = {"w": torch.zeros(2)}
    opt = optim.inject_hyperparams(optim.rmsprop, static_args=("alpha",))(1e-2, alpha=0.9, centered=True)
    state = opt.init(params)
    assert set(state.hyperparams) == {"learning_rate"}  # alpha static; centered a bool
    assert isinstance(state.inner_state.grad_avg, dict)
    with pytest.raises(ValueError, match="learning_rate: expected a finite value >= 0, got -1"):
        optim.inject_hyperparams(optim.adam)(learning_rate=-1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lr'"):
        optim.inject_hyperparams(optim.adam)(lr=1e-3)
    with pytest.raises(TypeError, match="factory: expected named arguments only"):
        optim.inject_hyperparams(optim.chain)
    with pytest.raises(ValueError, match=r"static_args: expected names of adam's arguments, got \['beta'\]"):
        optim.inject_hyperparams(optim.adam, static_args=("beta",))
    with pytest.raises(
        ValueError, match=r"state.hyperparams: expected the keys \['learning_rate'\], got \[\]"
    ):
        opt.update(params, state._replace(hyperparams={}), params)
    with pytest.raises(TypeError, match="state: expected InjectHyperparamsState, got tuple"):
        opt.update(params, (), params)
    with pytest.raises(
        TypeError, match=r"b1: expected a float or a 0-dim floating tensor, got a tensor of shape \(2,\)"
    ):
        optim.adam(1e-3, b1=torch.tensor([0.9, 0.8]))
