"""Dedup against a row-by-row model, with watermarks, batch splits and state moves."""

from __future__ import annotations

import doctest
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.dedup as dedup_mod
from sparkflux.model.batch import rank_within_runs
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import ENDED, Progress
from sparkflux.operators.base import Operator
from sparkflux.operators.dedup import Dedup, _RangeMax
from tests.support.op_helpers import everywhere, make_batch, run, run_with_move, split, user_rows


class Stream:
    """Keys that repeat often, times in bounded disorder, and honest progress markers."""

    def __init__(self, seed: int, n: int = 500, string_key: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.sn = np.cumsum(rng.choice([0, 1, 1, 1], n)) + 5
        snm = rank_within_runs(self.sn) * 3
        self.t = np.arange(n) + rng.integers(0, 15, n) - 20
        k = rng.integers(0, 8, n)
        self.batch = make_batch({"k": [f"k{x}" for x in k] if string_key else k, "t": self.t,
                                 "x": rng.normal(0, 1, n)},
                                part=rng.integers(0, 3, n), sn=self.sn, snm=snm)
        future = np.minimum.accumulate(np.r_[self.t, ENDED.wm][::-1])[::-1]
        after = zip(self.sn.tolist(), snm.tolist(), future[1:].tolist(),
                    np.r_[self.sn[1:], ENDED.sn].tolist(), strict=True)
        self.after = {(s, m): Progress(nxt - 1, wm) for s, m, wm, nxt in after}

    def progress(self, batch: pa.RecordBatch) -> Progress | None:
        if batch.num_rows == 0:
            return None
        return self.after[(batch.column("_sn")[-1].as_py(), batch.column("_snm")[-1].as_py())]


def model(batch: pa.RecordBatch, within: int | None) -> list[tuple]:
    last: dict[tuple, int] = {}
    out = []
    for r in batch.to_pylist():
        key = (r["_part"], r["k"])
        if key not in last or (within is not None and r["t"] >= last[key] + within):
            last[key] = r["t"]
            out.append((r["k"], r["t"], r["x"], r["_sn"], r["_snm"]))
    return out


def factory(within: int | None) -> Callable[[], Operator]:
    return lambda: Dedup(by=["k"], within=within, time=None if within is None else "t")


@pytest.mark.parametrize("within", [None, 1, 4, 30, 1000])
def test_matches_row_by_row_model(within: int | None) -> None:
    s = Stream(within or 0)
    out = run(factory(within), split(s.batch, np.random.default_rng(1), 9), s.progress,
              finish=True)
    expected = model(s.batch, within)
    assert user_rows(out) == expected
    assert 8 <= len(expected) < s.batch.num_rows
    assert out.schema.names[:3] == ["k", "t", "x"]


@pytest.mark.parametrize("within", [None, 3, 25])
@pytest.mark.parametrize("string_key", [False, True])
def test_batch_boundaries_do_not_matter(within: int | None, string_key: bool) -> None:
    s = Stream(2, string_key=string_key)
    whole = run(factory(within), [s.batch], s.progress, finish=True)
    rng = np.random.default_rng(2)
    for pieces in (3, 17, 120):
        assert run(factory(within), split(s.batch, rng, pieces), s.progress).equals(whole)


@pytest.mark.parametrize("within", [None, 6])
@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(within: int | None, string_key: bool) -> None:
    s = Stream(3, string_key=string_key)
    batches = split(s.batch, np.random.default_rng(3), 8)
    whole = run(factory(within), batches, s.progress)
    for cut in (1, 4, 7):
        for wire in (False, True):
            assert run_with_move(factory(within), batches, cut, s.progress,
                                 wire=wire).equals(whole)


def test_the_watermark_forgets_keys_and_a_late_row_of_one_passes() -> None:
    op = factory(10)()
    first = make_batch({"k": [1, 2, 1], "t": [0, 5, 8], "x": [0.0, 0.0, 0.0]})
    op.bind(first.schema)
    assert op.process(first).num_rows == 2
    out, frontier = op.advance(everywhere(Progress(2, 12)))
    assert out.num_rows == 0 and frontier.of(0) == Progress(2, 12)
    assert [(i.part, i.keys) for i in op.partition_info()] == [(0, 1)]  # key 1 forgotten
    late = make_batch({"k": [1, 2], "t": [9, 9], "x": [0.0, 0.0]}, sn=[3, 4])
    assert op.process(late).to_pydict()["_sn"] == [3]  # behind the watermark: passes


def test_without_within_keys_are_remembered_for_ever() -> None:
    op = factory(None)()
    batch = make_batch({"k": [1, 1], "t": [0, 1000], "x": [0.0, 0.0]})
    op.bind(batch.schema)
    assert op.process(batch).num_rows == 1
    op.advance(everywhere(Progress(1, 10_000)))
    again = make_batch({"k": [1], "t": [20_000], "x": [0.0]}, sn=[2])
    assert op.process(again).num_rows == 0


def test_range_max_finds_the_first_element_at_least_x() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 100, 257)
    lo = rng.integers(0, 257, 400)
    hi = np.minimum(lo + rng.integers(-3, 80, 400), 256)
    x = rng.integers(0, 110, 400)
    got = _RangeMax(values).first_at_least(lo, hi, x)
    for a, b, want, g in zip(lo, hi, x, got, strict=True):
        hits = [p for p in range(a, b + 1) if values[p] >= want]
        assert g == (hits[0] if hits else values.size)


def test_plan_errors_say_what_to_change() -> None:
    schema = Stream(0, n=3).batch.schema
    with pytest.raises(PlanError, match="together"):
        Dedup(by=["k"], within=5)
    with pytest.raises(PlanError, match="together"):
        Dedup(by=["k"], time="t")
    with pytest.raises(PlanError, match="within must be"):
        Dedup(by=["k"], within=0, time="t")
    with pytest.raises(PlanError, match="'nope'"):
        Dedup(by=["nope"]).bind(schema)
    with pytest.raises(PlanError, match="'when'"):
        Dedup(by=["k"], within=3, time="when").bind(schema)
    with pytest.raises(PlanError, match="integer or a time"):
        Dedup(by=["k"], within=3, time="x").bind(schema)


def test_doctests() -> None:
    assert doctest.testmod(dedup_mod).failed == 0
