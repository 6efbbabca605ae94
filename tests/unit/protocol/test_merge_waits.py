"""The delay bound at a merge (``protocol/merge_waits.py``) driven by hand: which partitions
are due, which streams are silent, and exactly which held rows go on tentatively with which
claim; the stable release is untouched.

The ``ConsumerSet`` of ``test_consumer.py``: consumer partitions 0 and 1, producers 0, 1
and 2. Producer 2 goes silent after progress 5; producers 0 and 1 go on."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.model.progress import NO_PROGRESS
from sparkflux.model.schema import PART, SN
from sparkflux.protocol.merge_waits import MergeWaits

from .test_consumer import consumers, frame

X = 10.0


def fed_rows(fed: tuple | None) -> list[tuple[int, int]]:
    assert fed is not None
    rows = fed[0]
    if rows is None:
        return []
    return list(zip(rows.column(PART).to_pylist(), rows.column(SN).to_pylist(), strict=True))


def held_split() -> tuple[object, MergeWaits]:
    """Everyone to 5 (released), then producers 0 and 1 on to 20 with rows; 2 silent."""
    c = consumers()
    w = MergeWaits(c, X)
    for p in (0, 1, 2):
        c.on_data(frame(p, 5, [(0, 3 + p)]), {0: 1, 1: 1, 2: 2}[p])
    assert c.release() is not None
    w.look(0.0)
    c.on_data(frame(0, 12, [(0, 8), (1, 11)]), 1)
    c.on_data(frame(1, 20, [(0, 9), (0, 17)]), 1)
    assert c.release() is None  # the frontier stays at 5: producer 2 is silent
    return c, w


def test_nothing_is_due_before_the_rows_have_waited_the_bound() -> None:
    c, w = held_split()
    assert w.look(1.0).tolist() == [False, False]  # held since 1.0
    assert w.look(10.9).tolist() == [False, False]
    assert w.look(11.0).tolist() == [True, True]


def test_the_streams_still_speaking_bound_what_goes_on() -> None:
    c, w = held_split()
    w.look(1.0)
    c.on_data(frame(0, 14), 1)  # producer 0 speaks at 9.0 (its claim alone)
    w.look(9.0)
    due = w.look(11.0)
    assert due.tolist() == [True, True]
    # at 11.0 producer 2 (last moved at 0.0) and producer 1 (at 1.0) are silent: the bound
    # is producer 0's progress, 14
    assert w.silent(11.0)[0].tolist() == [False, True, True]
    got = w.feed(due, 11.0)
    assert fed_rows(got) == [(0, 8), (0, 9), (1, 11)]
    assert got is not None and got[1:] == (14, 14)
    # the rows stay held for the stable release
    assert c.peek(np.array([5, 5]), np.array([20, 20])).num_rows == 4


def test_what_went_on_does_not_go_again_and_the_rest_follows() -> None:
    c, w = held_split()
    w.look(1.0)
    due = w.look(11.0)
    c.on_data(frame(0, 20), 1)
    c.on_data(frame(1, 20), 1)
    w.look(11.0)  # both moved at 11.0: speaking
    got = w.feed(due, 11.0)
    assert fed_rows(got) == [(0, 8), (0, 9), (1, 11), (0, 17)]
    c.on_data(frame(0, 30, [(1, 25)]), 1)
    c.on_data(frame(1, 30), 1)
    w.look(12.0)
    assert fed_rows(w.feed(due, 12.0)) == [(1, 25)]
    assert w.feed(due, 12.0) is not None and fed_rows(w.feed(due, 12.0)) == []


def test_with_every_stream_silent_nothing_more_is_certain() -> None:
    c, w = held_split()
    w.look(1.0)
    due = w.look(30.0)
    got = w.feed(due, 30.0)
    assert fed_rows(got) == []
    assert got is not None and got[1] == 5  # the frontier the partitions stand at


def test_the_stable_release_after_the_heal_is_untouched_and_the_wait_starts_over() -> None:
    c, w = held_split()
    w.look(1.0)
    due = w.look(11.0)
    w.feed(due, 11.0)
    c.on_data(frame(2, 20), 2)  # the heal
    rel = c.release()
    assert rel is not None
    assert rel[0].column(SN).to_pylist() == [8, 9, 11]  # up to producer 0's 12
    # the frontier moved: partition 0's wait (row 17) starts over, partition 1 holds none
    assert w.look(12.0).tolist() == [False, False]
    assert w.since[0] == 12.0 and np.isnan(w.since[1])
    w.reconciled()
    assert w.fed.tolist() == [NO_PROGRESS, NO_PROGRESS] and not w.forked.any()


def test_a_bound_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        MergeWaits(consumers(), 0.0)
