"""TimeWindowAggregate against a model, with watermarks, batch splits and state moves."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.time_window as time_window_mod
from sparkflux.model.batch import child_minor, rank_within_runs
from sparkflux.model.progress import ENDED, Progress
from sparkflux.operators.base import PlanError
from sparkflux.operators.time_window import TimeWindowAggregate
from tests.op_helpers import (
    assert_sn_increasing,
    make_batch,
    run,
    run_with_move,
    split,
    user_rows,
)

AGGS = {"hi": "max", "lo": "min", "total": "sum", "n": "count", "mean": "avg"}


def factory(size: int, slide: int | None = None, by: tuple[str, ...] = ("g",)):
    return lambda: TimeWindowAggregate(by=list(by), time="t", value="v", size=size,
                                       slide=slide, aggs=AGGS)


class Stream:
    """A random input with bounded disorder in event time, and its honest progress markers."""

    def __init__(self, seed: int, n: int = 400, string_key: bool = False) -> None:
        rng = np.random.default_rng(seed)
        # Some inputs share a major SN (as after an upstream 1:many operator).
        self.sn = np.cumsum(rng.choice([0, 1, 1, 1], n)) + 5
        snm = rank_within_runs(self.sn) * 3
        self.t = np.arange(n) * 2 + rng.integers(0, 9, n) - 20
        g = rng.integers(0, 4, n)
        self.batch = make_batch(
            {"g": [f"g{x}" for x in g] if string_key else g, "t": self.t,
             "v": rng.integers(-100, 100, n)},
            part=rng.integers(0, 3, n), sn=self.sn, snm=snm,
            types={"v": pa.int16()},
        )
        # After the row with SN s: everything with a lower SN is done, and no later row has
        # a time below the minimum of the times still to come.
        future = np.minimum.accumulate(np.r_[self.t, ENDED.wm][::-1])[::-1]
        after = zip(self.sn.tolist(), snm.tolist(), future[1:].tolist(),
                    np.r_[self.sn[1:], ENDED.sn].tolist(), strict=True)
        self.after = {(s, m): Progress(nxt - 1, wm) for s, m, wm, nxt in after}

    def progress(self, batch: pa.RecordBatch) -> Progress | None:
        if batch.num_rows == 0:
            return None
        return self.after[(batch.column("_sn")[-1].as_py(), batch.column("_snm")[-1].as_py())]


def model(batch: pa.RecordBatch, size: int, slide: int) -> list[tuple]:
    """Every (mini-partition, group, window) with its aggregates, in output SN order."""
    windows: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        start = r["t"] // slide * slide
        while start > r["t"] - size:
            windows.setdefault((r["_part"], r["g"], start), []).append(r)
            start -= slide
    out = []
    for (_, g, start), rs in windows.items():
        last = max(rs, key=lambda r: (r["_sn"], r["_snm"]))
        vs = [r["v"] for r in rs]
        j = (start // slide) % (size // slide)
        minor = int(child_minor(np.array([last["_snm"]]), np.array([j]))[0])
        out.append((g, start, start + size, max(vs), min(vs), sum(vs), len(vs),
                    sum(vs) / len(vs), last["_sn"], minor))
    return sorted(out, key=lambda r: (r[-2], r[-1]))


@pytest.mark.parametrize(("size", "slide"), [(10, None), (10, 5), (12, 4), (7, 1)])
def test_matches_model_with_watermarks(size: int, slide: int | None) -> None:
    s = Stream(size)
    batches = split(s.batch, np.random.default_rng(size), 12)
    out = run(factory(size, slide), batches, s.progress, finish=True)
    assert user_rows(out) == model(s.batch, size, slide or size)
    assert_sn_increasing(out)
    assert out.schema.names[:3] == ["g", "window_start", "window_end"]
    assert out.schema.field("hi").type == pa.int64()


def test_progress_claims_are_never_undercut() -> None:
    s = Stream(3)
    op = factory(12, 4)()
    op.bind(s.batch.schema)
    emitted: list[tuple[np.ndarray, int]] = []
    for b in split(s.batch, np.random.default_rng(3), 25):
        assert op.process(b).num_rows == 0  # process itself emits nothing
        p = s.progress(b)
        if p is not None:
            out, claim = op.advance(p)
            assert claim.wm == p.wm and claim.sn <= p.sn
            emitted.append((out.column("_sn").to_numpy(), claim.sn))
    out, claim = op.advance(ENDED)
    emitted.append((out.column("_sn").to_numpy(), claim.sn))
    assert claim == ENDED
    assert sum(len(e) for e, _ in emitted[:-1]) > 0  # windows close before the end
    for k, (rows, claim_k) in enumerate(emitted):
        assert (rows <= claim_k).all()
        for later, _ in emitted[k + 1:]:
            assert (later > claim_k).all()


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    s = Stream(seed, string_key=seed == 2)
    make = factory(10, 5)
    whole = run(make, [s.batch], s.progress, finish=True)
    rng = np.random.default_rng(seed)
    for pieces in (3, 17, 80):
        assert run(make, split(s.batch, rng, pieces), s.progress, finish=True).equals(whole)


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    s = Stream(8, string_key=string_key)
    batches = split(s.batch, np.random.default_rng(8), 10)
    make = factory(12, 4)
    whole = run(make, batches, s.progress, finish=True)
    for cut in (2, 5, 9):
        assert run_with_move(make, batches, cut, s.progress, finish=True).equals(whole)


def test_partition_info_counts_groups() -> None:
    batch = make_batch({"g": [1, 2, 1], "t": [1, 2, 3], "v": [1, 1, 1]}, part=[0, 0, 1])
    op = factory(10, 5)()
    op.bind(batch.schema)
    op.process(batch)
    assert {(i.part, i.keys) for i in op.partition_info()} == {(0, 2), (1, 1)}


def test_unknown_column_and_bad_sizes_are_plan_errors() -> None:
    schema = Stream(0, n=4).batch.schema
    for kwargs, match in (({"by": ["nope"]}, "'nope'"), ({"time": "when"}, "'when'"),
                          ({"value": "x"}, "'x'")):
        args = {"by": ["g"], "time": "t", "value": "v", "size": 10, **kwargs}
        with pytest.raises(PlanError, match=match):
            TimeWindowAggregate(**args).bind(schema)
    with pytest.raises(PlanError, match="multiple"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=10, slide=3)
    with pytest.raises(PlanError, match="size"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=0)
    with pytest.raises(PlanError, match="median"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=4, aggs={"m": "median"})


def test_default_aggregate_is_count() -> None:
    batch = make_batch({"g": [1, 1], "t": [0, 3], "v": [1.5, 2.5]})
    out = run(lambda: TimeWindowAggregate(by=["g"], time="t", value="v", size=5), [batch],
              finish=True)
    assert out.to_pydict()["count"] == [2]


def test_doctests() -> None:
    assert doctest.testmod(time_window_mod).failed == 0
