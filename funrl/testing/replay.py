"""Invariants of replay buffers of single items: FIFO overwrite, written rows only, distribution.

``make_buffer(capacity)`` returns a buffer shaped like :func:`funrl.buffers.flat` (or
:func:`funrl.buffers.prioritised`): ``init(example_item)``, ``add(state, batch) -> state``
(the returned state is the one used from then on, as funrl's donating ``add`` requires) and
``sample(state, key, batch_size)`` returning an object with ``.items`` (and ``.indices`` for a
prioritised buffer, which also has ``update_priorities(state, indices, priorities) -> state``).
The items are :func:`funrl.testing.strategies.transitions` with an ``id`` leaf (1, 2, ... in
the order added), so every sampled item can be traced to the add that wrote it. The invariants:

- ``FIFO overwrite order``: after ``N`` items, a buffer of capacity ``C`` holds exactly the last
  ``min(N, C)`` of them: samples come from those only, and enough draws see each of them;
- ``sample only written rows``: every sampled item is one that was added, whole (all leaves
  from the same add), also while the buffer is not yet full;
- ``sampling distribution (chi-squared)``: over the stored items, draws follow the uniform
  distribution, or ``P(i) ∝ p_i ** alpha`` after ``update_priorities`` set drawn priorities
  ``p_i``; Pearson's χ² test at significance ``1e-6`` (stratified sampling, as funrl's
  prioritised buffer does it, only makes the counts tighter).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any, NamedTuple

import torch
from hypothesis import strategies as st

from funrl import random as frandom
from funrl import tree as ftree
from funrl.testing.battery import Invariant, expect_close, run_battery
from funrl.testing.strategies import transition_batches

__all__ = ["ReplayCase", "chi_squared_critical_value", "replay_buffer_invariants"]

_SIGNIFICANCE = 1e-6  # chance that a correct buffer fails the χ² test on one case
_DRAWS_PER_ITEM = 32  # draws per stored item when every item must be seen at least once
_CHI2_DRAWS_PER_ITEM = 200  # expected count per item in the χ² test (Pearson wants >= 5)


class ReplayCase(NamedTuple):
    """One drawn case: the capacity, the batches added in turn (with ``id`` leaves), priorities
    for the stored items (used by prioritised buffers) and a seed for the sampling keys."""

    capacity: int
    batches: list[dict[str, torch.Tensor]]
    priorities: list[float]
    seed: int


@st.composite
def _replay_cases(draw: st.DrawFn, max_capacity: int) -> ReplayCase:
    capacity = draw(st.integers(1, max_capacity))
    batches = []
    first_id = 1
    for batch in draw(st.lists(transition_batches(1, 2 * capacity + 1), min_size=1, max_size=4)):
        size = batch["reward"].shape[0]
        batches.append({**batch, "id": torch.arange(first_id, first_id + size)})
        first_id += size
    priorities = draw(st.lists(st.floats(0.1, 10.0), min_size=capacity, max_size=capacity))
    return ReplayCase(capacity, batches, priorities, draw(st.integers(0, 2**32 - 1)))


def chi_squared_critical_value(degrees_of_freedom: int, significance: float) -> float:
    """The χ² quantile ``1 - significance`` by the Wilson–Hilferty cube-root approximation
    (Wilson & Hilferty 1931); a little above the exact value for one degree of freedom."""
    k = degrees_of_freedom
    z = NormalDist().inv_cdf(1.0 - significance)
    return k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)) ** 0.5) ** 3


def replay_buffer_invariants(
    make_buffer: Callable[[int], Any],
    *,
    alpha: float | None = None,
    max_examples: int = 20,
    only: Sequence[str] | None = None,
    shrink: bool = True,
    max_capacity: int = 6,
) -> None:
    """Check the buffers ``make_buffer(capacity)`` builds against the invariants of replay.

    Args:
        make_buffer: ``capacity -> buffer``, e.g. ``funrl.buffers.flat`` itself, or
            ``functools.partial(funrl.buffers.prioritised, alpha=0.6)``.
        alpha: the priority exponent, required for a buffer with ``update_priorities`` (its
            expected distribution is ``p ** alpha``).
        max_examples: hypothesis cases per invariant (capacities up to ``max_capacity``, one to
            four adds of up to ``2 * capacity + 1`` items each).
        only: names of the invariants to check (all by default).
        shrink: shrink a counter-example to the smallest hypothesis finds (``False``: report the
            first one found, much faster when only detection matters).

    Raises:
        ValueError: a prioritised buffer without ``alpha``.
        AssertionError: naming every invariant that broke and the smallest counter-example.
    """
    prioritised = hasattr(make_buffer(1), "update_priorities")
    if prioritised and alpha is None:
        raise ValueError(
            "alpha: expected the priority exponent of this buffer (it has update_priorities), got None"
        )

    def fill(case: ReplayCase) -> Any:
        """Each add in turn: yields ``(buffer, state, number of items added so far)``."""
        buffer = make_buffer(case.capacity)
        state = buffer.init(ftree.index(case.batches[0], 0))
        added = 0
        for batch in case.batches:
            state = buffer.add(state, batch)
            added += batch["id"].shape[0]
            yield buffer, state, added

    def sample_only_written_rows(case: ReplayCase) -> None:
        added_items = ftree.concatenate(case.batches)
        key = frandom.key(case.seed)
        for stage, (buffer, state, added) in enumerate(fill(case)):
            items = buffer.sample(state, frandom.fold_in(key, stage), _DRAWS_PER_ITEM * case.capacity).items
            ids = items["id"]
            unknown = (ids < 1) | (ids > added)
            if bool(unknown.any()):
                raise AssertionError(
                    f"after {added} items added, sampled id {ids[unknown][0].item()}, never added "
                    "(id 0 is a row no add wrote)"
                )
            expected = ftree.map(lambda x, rows=ids - 1: x[rows], added_items)
            expect_close(items, expected, "sampled items (against the items added under their ids)", 0.0, 0.0)

    def fifo_overwrite_order(case: ReplayCase) -> None:
        key = frandom.key(case.seed)
        for stage, (buffer, state, added) in enumerate(fill(case)):
            draws = _DRAWS_PER_ITEM * case.capacity
            ids = buffer.sample(state, frandom.fold_in(key, stage), draws).items["id"]
            oldest = max(added - case.capacity, 0) + 1
            outside = (ids < oldest) | (ids > added)
            if bool(outside.any()):
                raise AssertionError(
                    f"after {added} items into capacity {case.capacity}, sampled id {ids[outside][0].item()}; "
                    f"FIFO keeps ids {oldest}..{added}"
                )
            seen = set(ids.tolist())
            missing = [i for i in range(oldest, added + 1) if i not in seen]
            if missing:
                raise AssertionError(
                    f"after {added} items into capacity {case.capacity}, ids {missing} (among the last "
                    f"{added - oldest + 1} added) were never sampled in {draws} draws"
                )

    def sampling_distribution(case: ReplayCase) -> None:
        *_, (buffer, state, added) = fill(case)
        oldest = max(added - case.capacity, 0) + 1
        stored = list(range(oldest, added + 1))
        if len(stored) < 2:
            return  # one item: nothing to compare (the other invariants check it is the one)
        key = frandom.key(case.seed)
        if prioritised:
            covering = buffer.sample(state, frandom.fold_in(key, 0), _DRAWS_PER_ITEM * case.capacity)
            index_of = dict(zip(covering.items["id"].tolist(), covering.indices.tolist(), strict=True))
            if sorted(index_of) != stored:
                raise AssertionError(
                    f"sampled ids {sorted(index_of)} with equal priorities, expected each of {stored}"
                )
            indices = torch.tensor([index_of[i] for i in stored], dtype=torch.int64)
            priorities = torch.tensor(case.priorities[: len(stored)], dtype=torch.float64)
            state = buffer.update_priorities(state, indices, priorities)
            weights = priorities**alpha
        else:
            weights = torch.ones(len(stored), dtype=torch.float64)
        counts = torch.zeros(len(stored), dtype=torch.float64)
        for call in range(1, 5):
            draws = _CHI2_DRAWS_PER_ITEM * len(stored) // 4
            ids = buffer.sample(state, frandom.fold_in(key, call), draws).items["id"]
            if bool(((ids < oldest) | (ids > added)).any()):
                raise AssertionError(
                    f"sampled ids {sorted(set(ids.tolist()))}, but the buffer stores ids {stored}"
                )
            counts += torch.bincount(ids - oldest, minlength=len(stored))[: len(stored)].to(torch.float64)
        expected = counts.sum() * weights / weights.sum()
        statistic = float(((counts - expected) ** 2 / expected).sum())
        critical = chi_squared_critical_value(len(stored) - 1, _SIGNIFICANCE)
        if statistic > critical:
            raise AssertionError(
                f"χ² = {statistic:.1f} > {critical:.1f} (significance {_SIGNIFICANCE}, {len(stored) - 1} degrees of "
                f"freedom): ids {stored} drawn {counts.tolist()} times, expected {expected.tolist()}"
            )

    cases = _replay_cases(max_capacity)
    invariants = [
        Invariant("FIFO overwrite order", cases, fifo_overwrite_order),
        Invariant("sample only written rows", cases, sample_only_written_rows),
        Invariant("sampling distribution (chi-squared)", cases, sampling_distribution),
    ]
    run_battery("replay_buffer_invariants", invariants, max_examples, only, shrink)
