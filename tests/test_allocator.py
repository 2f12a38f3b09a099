"""funrl.allocator: the caching CPU allocator reuses blocks, never hands out live memory, stays
within its limits, and gives allocation back to torch's default."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from funrl import allocator, control

MAX_BLOCK = 1 << 20
MAX_CACHED = 8 << 20


@pytest.fixture
def caching():
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    try:
        yield
    finally:
        allocator.use_default_cpu_allocator()


def test_a_freed_block_is_handed_out_again_for_the_same_size(caching):
    x = torch.empty(1000)
    address = x.data_ptr()
    del x
    before = allocator.cpu_allocator_stats()
    y = torch.empty(1000)
    after = allocator.cpu_allocator_stats()
    assert after.active
    assert y.data_ptr() == address
    assert after.hits == before.hits + 1
    assert after.cached_bytes == before.cached_bytes - 4032  # 4000 bytes in a 4032-byte class


def test_the_default_allocator_does_not_go_through_the_cache():
    # The contrast to the test above: without the caching allocator the counters do not move, so
    # that test's hit count can fail.
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    allocator.use_default_cpu_allocator()
    before = allocator.cpu_allocator_stats()
    x = torch.empty(1000)
    del x
    torch.empty(1000)
    after = allocator.cpu_allocator_stats()
    assert not after.active
    assert (after.hits, after.misses, after.cached_bytes) == (before.hits, before.misses, 0)


@pytest.mark.parametrize("numel", [1, 3, 16, 1000, 17_000, 300_000, 1 << 20])
def test_data_is_64_byte_aligned(caching, numel):
    tensors = [torch.empty(numel, dtype=torch.uint8) for _ in range(3)]
    assert all(t.data_ptr() % 64 == 0 for t in tensors)


def test_blocks_above_max_block_bytes_bypass_the_cache(caching):
    before = allocator.cpu_allocator_stats()
    big = torch.empty(MAX_BLOCK + 1, dtype=torch.uint8)
    del big
    after = allocator.cpu_allocator_stats()
    assert (after.hits, after.misses, after.cached_bytes) == (before.hits, before.misses, before.cached_bytes)


def test_cached_memory_never_exceeds_max_cached_bytes(caching):
    allocator.empty_cpu_cache()
    blocks = [torch.empty(MAX_BLOCK, dtype=torch.uint8) for _ in range(2 * MAX_CACHED // MAX_BLOCK)]
    del blocks
    stats = allocator.cpu_allocator_stats()
    assert stats.cached_bytes == MAX_CACHED
    assert stats.cached_blocks == MAX_CACHED // MAX_BLOCK
    allocator.empty_cpu_cache()
    stats = allocator.cpu_allocator_stats()
    assert (stats.cached_bytes, stats.cached_blocks) == (0, 0)


def test_memory_freed_after_switching_back_goes_to_the_system_not_the_cache():
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    x = torch.ones(1000)
    allocator.use_default_cpu_allocator()
    x.add_(1.0)  # still usable after the switch
    assert x.sum().item() == 2000.0
    del x
    stats = allocator.cpu_allocator_stats()
    assert not stats.active
    assert stats.cached_bytes == 0


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=70_000), st.integers(0, 50)),
        min_size=1,
        max_size=60,
    )
)
def test_no_two_live_tensors_share_memory(ops):
    """After any sequence of allocations and frees every live tensor keeps the value it was
    given: a block is never handed out while it is still in use."""
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    try:
        live: list[tuple[torch.Tensor, int]] = []
        for allocate, numel, pick in ops:
            if allocate or not live:
                value = len(live) % 251
                live.append((torch.full((numel,), value, dtype=torch.uint8), value))
            else:
                live.pop(pick % len(live))
            for tensor, value in live:
                assert bool((tensor == value).all())
    finally:
        allocator.use_default_cpu_allocator()


def test_results_equal_the_default_allocators_bitwise():
    def grad_step(seed: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        w1, w2 = torch.randn(8, 64, generator=g, requires_grad=True), torch.randn(64, 2, generator=g)
        x = torch.randn(128, 8, generator=g)
        loss = torch.tanh(x @ w1).matmul(w2).pow(2).mean()
        loss.backward()
        return [loss.detach(), w1.grad]

    reference = grad_step(0)
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    try:
        results = [grad_step(0) for _ in range(3)]  # later rounds run on recycled blocks
    finally:
        allocator.use_default_cpu_allocator()
    for result in results:
        for a, b in zip(result, reference, strict=True):
            assert torch.equal(a, b)


@pytest.mark.slow
def test_a_compiled_loop_runs_on_recycled_blocks_and_equals_eager(caching):
    def body(carry, x):
        h = torch.tanh(carry @ x)
        return h, h.sum()

    def run(carry, xs):
        return control.scan(body, carry, xs)

    g = torch.Generator().manual_seed(1)
    carry, xs = torch.randn(4, 16, generator=g), torch.randn(32, 16, 16, generator=g) * 0.3
    compiled = control.compile(run, fullgraph=True, dynamic=False)
    expected = run(carry, xs)
    compiled(carry, xs)  # compiles
    before = allocator.cpu_allocator_stats()
    got = compiled(carry, xs)
    after = allocator.cpu_allocator_stats()
    assert after.hits > before.hits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_threads_allocate_and_free_concurrently(caching):
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            g = torch.Generator().manual_seed(seed)
            for i in range(300):
                n = int(torch.randint(1, 5000, (), generator=g))
                t = torch.full((n,), float(seed), dtype=torch.float64)
                assert t.sum().item() == float(seed) * n, (seed, i)
        except BaseException as exc:  # reported from the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_can_allocate(caching):
    torch.empty(1000)
    pid = os.fork()
    if pid == 0:  # the child: allocate through the inherited allocator, then leave at once
        ok = torch.full((1000,), 3.0).sum().item() == 3000.0
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_block_bytes": -1}, "max_block_bytes"),
        ({"max_block_bytes": 1.5}, "max_block_bytes"),
        ({"max_cached_bytes": True}, "max_cached_bytes"),
        ({"max_cached_bytes": "1 MiB"}, "max_cached_bytes"),
    ],
)
def test_bad_limits_are_a_clear_error(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}: expected a non-negative int"):
        allocator.use_caching_cpu_allocator(**kwargs)


def test_the_build_is_cached_under_its_key_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))
    first = allocator._build()
    assert first.parent == tmp_path and first.exists()
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    mtime = first.stat().st_mtime_ns
    assert allocator._build() == first
    assert first.stat().st_mtime_ns == mtime  # not rebuilt


def test_a_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-compiler-funrl")
    with pytest.raises(RuntimeError, match="CXX='no-such-compiler-funrl' is not an executable"):
        allocator._build()
    assert list(tmp_path.iterdir()) == []


# The command line installs the allocator for the run and gives allocation back afterwards.
TRAIN_ARGS = ["train", "ppo", "--num-envs", "2", "--total-steps", "512", "--no-compile", "--no-progress"]


def _spy_install(monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> list[bool]:
    """Record whether the caching allocator is active when the command line starts training."""
    from funrl.agents import run

    seen: list[bool] = []
    real_train_run = run.train_run

    def train_run(*args, **kwargs):
        seen.append(allocator.cpu_allocator_stats().active)
        return real_train_run(*args, **kwargs)

    monkeypatch.setattr(run, "train_run", train_run)
    if error is not None:

        def fail(*args, **kwargs):
            raise error

        monkeypatch.setattr(allocator, "use_caching_cpu_allocator", fail)
    return seen


def test_train_runs_on_the_caching_allocator_and_restores_the_default(tmp_path, monkeypatch, capsys):
    from funrl.__main__ import main

    seen = _spy_install(monkeypatch)
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "run")]) == 0
    assert seen == [True]
    assert not allocator.cpu_allocator_stats().active


def test_train_with_the_default_allocator_leaves_it_alone(tmp_path, monkeypatch, capsys):
    from funrl.__main__ import main

    seen = _spy_install(monkeypatch)
    assert main([*TRAIN_ARGS, "--cpu-allocator", "default", "--out", str(tmp_path / "run")]) == 0
    assert seen == [False]


def test_train_without_a_compiler_says_so_in_one_line_and_trains(tmp_path, monkeypatch, capsys):
    from funrl.__main__ import main

    seen = _spy_install(monkeypatch, RuntimeError("funrl.allocator: no C++ compiler\ndetails"))
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert seen == [False]
    assert "funrl: funrl.allocator: no C++ compiler; training with torch's default CPU allocator" in err
    assert "details" not in err and "Traceback" not in err


class _Exec(Exception):
    """Raised by the fake ``os.execv``: the process would have been replaced here."""


@pytest.fixture
def exec_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], str | None]]:
    calls: list[tuple[str, list[str], str | None]] = []

    def fake_execv(path: str, argv: list[str]) -> None:
        calls.append((path, argv, os.environ.get("GLIBC_TUNABLES")))
        raise _Exec

    monkeypatch.setattr(os, "execv", fake_execv)
    monkeypatch.setenv("GLIBC_TUNABLES", "")
    return calls


def _cli_main_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    from funrl import __main__ as cli_module

    calls: list[list[str]] = []
    monkeypatch.setattr(cli_module, "main", lambda argv: calls.append(argv) or 0)
    return calls


def test_the_train_command_restarts_once_with_glibcs_malloc_cache_raised(exec_calls, monkeypatch):
    from funrl.__main__ import cli

    argv = ["train", "ppo", "--total-steps", "512"]
    monkeypatch.setattr(sys, "argv", ["funrl", *argv])
    with pytest.raises(_Exec):
        cli()
    assert exec_calls == [(sys.executable, [sys.executable, "-m", "funrl", *argv], allocator.MALLOC_TUNABLES)]


def test_the_restart_keeps_other_glibc_tunables(exec_calls, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mxfast=0")
    with pytest.raises(_Exec):
        allocator.exec_with_malloc_tunables(["script.py"])
    assert exec_calls[0][2] == f"glibc.malloc.mxfast=0:{allocator.MALLOC_TUNABLES}"


@pytest.mark.parametrize(
    ("argv", "tunables", "platform"),
    [
        (["train", "ppo"], "glibc.malloc.tcache_count=7", "linux"),  # the restarted process
        (["train", "ppo", "--cpu-allocator", "default"], "", "linux"),
        (["eval", "runs/x"], "", "linux"),
        (["train", "ppo"], "", "darwin"),
    ],
)
def test_no_restart_when_set_already_not_asked_for_or_not_glibc(
    exec_calls, monkeypatch, argv, tunables, platform
):
    from funrl.__main__ import cli

    main_calls = _cli_main_calls(monkeypatch)
    monkeypatch.setenv("GLIBC_TUNABLES", tunables)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(sys, "argv", ["funrl", *argv])
    assert cli() == 0
    assert exec_calls == []
    assert main_calls == [argv]


@pytest.mark.slow
def test_python_m_funrl_train_restarts_and_trains(tmp_path):
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    result = subprocess.run(
        [sys.executable, "-m", "funrl", *TRAIN_ARGS, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "checkpoint.pt").is_file()


def test_an_unwritable_cache_directory_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(
        RuntimeError, match="cannot write the build of the caching CPU allocator into .*FUNRL_CACHE_DIR"
    ):
        allocator._build()


def test_a_corrupt_cached_build_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FUNRL_CACHE_DIR", str(tmp_path))
    built = allocator._build()
    built.write_bytes(b"\x7fELF truncated")
    monkeypatch.setattr(allocator, "_library", None)
    with pytest.raises(RuntimeError, match="loading .* failed .*delete it to have it rebuilt"):
        allocator.use_caching_cpu_allocator()
    assert allocator._library is None


def test_enabling_again_only_changes_the_limits_and_one_switch_back_restores_the_default():
    allocator.use_caching_cpu_allocator(max_block_bytes=MAX_BLOCK, max_cached_bytes=MAX_CACHED)
    allocator.use_caching_cpu_allocator(max_block_bytes=2 * MAX_BLOCK, max_cached_bytes=2 * MAX_CACHED)
    stats = allocator.cpu_allocator_stats()
    assert stats.active
    assert (stats.max_block_bytes, stats.max_cached_bytes) == (2 * MAX_BLOCK, 2 * MAX_CACHED)
    allocator.use_default_cpu_allocator()
    before = allocator.cpu_allocator_stats()
    x = torch.empty(1000)  # through torch's default again: the counters do not move
    del x
    torch.empty(1000)
    after = allocator.cpu_allocator_stats()
    assert not after.active
    assert (after.hits, after.misses) == (before.hits, before.misses)
