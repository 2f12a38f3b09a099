"""How an invariant battery runs: each invariant under hypothesis, failures named and collected.

An :class:`Invariant` is a name, a strategy of cases and a check that raises on a bad case. The
battery searches every invariant with ``@settings(derandomize=True, database=None)`` (the same
cases on every run and machine, nothing written to disk), lets hypothesis shrink the first
failure, and raises one ``AssertionError`` listing every invariant that broke with its message
and the smallest counter-example found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from funrl.testing.checkers import _first_difference

__all__ = ["Invariant", "run_battery", "expect_close"]


class Invariant(NamedTuple):
    """One promise of an algorithm family: its name, the cases to search and the check."""

    name: str
    cases: st.SearchStrategy[Any]
    check: Callable[[Any], None]


def expect_close(actual: Any, expected: Any, what: str, rtol: float, atol: float) -> None:
    """Raise an ``AssertionError`` naming ``what``'s first element that differs (tree paths too)."""
    difference = _first_difference(actual, expected, what, rtol, atol)
    if difference is not None:
        raise AssertionError(difference)


def _counter_example(invariant: Invariant, max_examples: int, shrink: bool) -> str | None:
    """``None`` when ``invariant`` held on every case searched, else what broke and on which case."""

    @settings(
        derandomize=True,
        database=None,
        max_examples=max_examples,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        # no explain phase: it traces coverage, slow, and the message already says what differs
        phases=[Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])],
    )
    @given(invariant.cases)
    def search(case: Any) -> None:
        invariant.check(case)

    try:
        search()
    except Exception as err:  # the user's function may fail any way: each is a broken promise
        kind = "" if isinstance(err, AssertionError) else f"{type(err).__name__}: "
        example = "\n".join(getattr(err, "__notes__", [])) or "(no example recorded)"
        found = (
            "smallest counter-example found by hypothesis"
            if shrink
            else "first counter-example found (not shrunk)"
        )
        return f"[{invariant.name}] {kind}{err}\n{found}:\n{example}"
    return None


def run_battery(
    battery: str,
    invariants: Sequence[Invariant],
    max_examples: int,
    only: Sequence[str] | None = None,
    shrink: bool = True,
) -> None:
    """Search the invariants (those named in ``only``, or all) with ``max_examples`` cases each;
    raise naming each one that broke, with its counter-example shrunk to the smallest hypothesis
    finds (``shrink=False``: the first one found, much faster when only detection matters)."""
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples: expected a positive int, got {max_examples!r}")
    if only is not None:
        known = [invariant.name for invariant in invariants]
        if isinstance(only, str) or not set(only) <= set(known):
            raise ValueError(f"only: expected a list of invariant names among {known}, got {only!r}")
        invariants = [invariant for invariant in invariants if invariant.name in only]
    failures = [
        (invariant.name, message)
        for invariant in invariants
        if (message := _counter_example(invariant, max_examples, shrink)) is not None
    ]
    if failures:
        names = ", ".join(repr(name) for name, _ in failures)
        details = "\n\n".join(message for _, message in failures)
        raise AssertionError(
            f"{battery}: {len(failures)} of {len(invariants)} invariants broke ({names})\n\n{details}"
        )
