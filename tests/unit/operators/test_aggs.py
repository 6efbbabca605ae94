"""The one aggregation spelling (``operators/aggs.py``): every aggregating operator takes
``"count"`` and ``(func, column)`` alike, the older spellings still work, and the errors
say what to write."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.errors import PlanError
from sparkflux.operators.aggs import AGGREGATES, Agg, parse_aggs
from sparkflux.operators.count_window import CountWindowAggregate
from sparkflux.operators.group import FUNCS, GroupAggregate
from sparkflux.operators.session_window import SessionWindowAggregate
from sparkflux.operators.time_window import TimeWindowAggregate
from tests.support.op_helpers import make_batch, per_partition, run, split


def clicks(seed: int, n: int = 300) -> pa.RecordBatch:
    """Pages with two numeric columns (bytes as integers, dwell times as floats), times in
    order, over three partitions."""
    rng = np.random.default_rng(seed)
    return make_batch({"page": rng.integers(0, 5, n), "t": np.arange(n) * 3,
                       "bytes": rng.integers(0, 1000, n), "dwell": rng.random(n) * 100},
                      part=rng.integers(0, 3, n), types={"bytes": pa.int32()})


def test_the_spellings_mean_the_same() -> None:
    assert parse_aggs("Op", {"n": "count"}) == parse_aggs("Op", {"n": ("count", None)}) \
        == {"n": Agg("count")}
    assert parse_aggs("Op", {"s": ("sum", "bytes"), "m": ["max", "dwell"]}) == {
        "s": Agg("sum", "bytes"), "m": Agg("max", "dwell")}
    assert parse_aggs("Op", {"s": "sum", "n": "count"}, value="bytes") == {
        "s": Agg("sum", "bytes"), "n": Agg("count")}
    assert parse_aggs("Op", {"who": ("argmax", "price", "bidder")}, FUNCS) == {
        "who": Agg("argmax", "price", "bidder")}


@pytest.mark.parametrize(("aggs", "funcs", "match"), [
    ({}, AGGREGATES, r"non-empty dict output_name -> aggregate, e\.g\. \{\"n\": \"count\""),
    (["count"], AGGREGATES, "non-empty dict"),
    ({"m": "median"}, AGGREGATES, "unknown function; use one of max, min, sum, count, avg"),
    ({"m": ("median", "v")}, AGGREGATES, "unknown function 'median'"),
    ({"m": ("argmax", "v", "w")}, AGGREGATES, "unknown function 'argmax'"),
    ({"s": "sum"}, AGGREGATES, r"""'s' = 'sum' reads a column: write 's': \("sum", "<col"""),
    ({"s": ("sum", None)}, AGGREGATES, r"""sum takes \(func, column\), e\.g\. \("sum", """),
    ({"s": ("sum",)}, AGGREGATES, r"sum takes \(func, column\)"),
    ({"s": ("sum", "a", "b")}, AGGREGATES, r"sum takes \(func, column\)"),
    ({"n": ("count", "")}, AGGREGATES, r"""or just "count\""""),
    ({"s": 3}, AGGREGATES, r"write an aggregate as \"count\" or \(func, column\)"),
    ({"w": ("argmax", "price")}, FUNCS, r"\(func, value_column, carried_column\)"),
])
def test_errors_say_what_to_write(aggs: Any, funcs: tuple[str, ...], match: str) -> None:
    with pytest.raises(PlanError, match=match):
        parse_aggs("Op", aggs, funcs)


def window_model(batch: pa.RecordBatch, size: int) -> set[tuple]:
    """Per (partition, page, tumbling window): count, sum of bytes, max and avg of dwell."""
    groups: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        groups.setdefault((r["_part"], r["page"], r["t"] // size * size), []).append(r)
    return {(p, page, start, len(rs), sum(r["bytes"] for r in rs),
             max(r["dwell"] for r in rs), round(sum(r["dwell"] for r in rs) / len(rs), 9))
            for (p, page, start), rs in groups.items()}


def test_a_time_window_aggregates_several_columns() -> None:
    batch = clicks(1)
    aggs = {"n": "count", "bytes": ("sum", "bytes"), "slowest": ("max", "dwell"),
            "dwell": ("avg", "dwell")}
    out = run(lambda: TimeWindowAggregate(by=["page"], time="t", size=30, aggs=aggs),
              split(batch, np.random.default_rng(1), 7), finish=True)
    assert out.schema.names[:7] == ["page", "window_start", "window_end", "n", "bytes",
                                    "slowest", "dwell"]
    assert [out.schema.field(c).type for c in ("n", "bytes", "slowest", "dwell")] == [
        pa.int64(), pa.int64(), pa.float64(), pa.float64()]
    got = {(r["_part"], r["page"], r["window_start"], r["n"], r["bytes"], r["slowest"],
            round(r["dwell"], 9)) for r in out.to_pylist()}
    assert got == window_model(batch, 30)
    assert len(got) == out.num_rows > 20


def test_the_older_spellings_give_the_same_rows() -> None:
    """``value=`` with bare function names (TimeWindowAggregate, SessionWindowAggregate) and
    ``("count", None)`` (GroupAggregate) give what the tuples give."""
    batch = clicks(2)
    pieces = split(batch, np.random.default_rng(2), 5)
    pairs = [
        (lambda: TimeWindowAggregate(by=["page"], time="t", size=30, value="bytes",
                                     aggs={"n": "count", "s": "sum", "hi": "max"}),
         lambda: TimeWindowAggregate(by=["page"], time="t", size=30,
                                     aggs={"n": "count", "s": ("sum", "bytes"),
                                           "hi": ("max", "bytes")})),
        (lambda: SessionWindowAggregate(by=["page"], time="t", gap=20, value="dwell",
                                        aggs={"n": "count", "lo": "min"}),
         lambda: SessionWindowAggregate(by=["page"], time="t", gap=20,
                                        aggs={"n": "count", "lo": ("min", "dwell")})),
        (lambda: CountWindowAggregate(by=["page"], value="bytes", history=3,
                                      aggs={"n": "count", "avg": "avg"}),
         lambda: CountWindowAggregate(by=["page"], value="bytes", history=3,
                                      aggs={"n": "count", "avg": ("avg", "bytes")})),
        (lambda: GroupAggregate(by=["page"], aggs={"n": ("count", None), "s": ("sum", "bytes")}),
         lambda: GroupAggregate(by=["page"], aggs={"n": "count", "s": ("sum", "bytes")})),
    ]
    for old, new in pairs:
        a, b = (per_partition(run(make, pieces, finish=True)) for make in (old, new))
        assert a.num_rows > 10 and a.equals(b)


def test_a_count_alone_needs_no_column_anywhere() -> None:
    batch = make_batch({"page": [1, 1, 2], "t": [0, 5, 7]})
    time = run(lambda: TimeWindowAggregate(by=["page"], time="t", size=10,
                                           aggs={"n": "count"}), [batch], finish=True)
    assert {(r["page"], r["window_start"], r["n"]) for r in time.to_pylist()} == {
        (1, 0, 2), (2, 0, 1)}
    session = run(lambda: SessionWindowAggregate(by=["page"], time="t", gap=3,
                                                 aggs={"n": "count"}), [batch], finish=True)
    assert session.to_pydict()["n"] == [1, 1, 1]  # t = 0 and 5 are more than gap apart
    group = run(lambda: GroupAggregate(by=["page"], aggs={"n": "count"}), [batch])
    assert group.to_pydict()["n"] == [1, 2, 1]


def test_operators_of_one_value_column_refuse_two() -> None:
    for make in (lambda: SessionWindowAggregate(by=["page"], time="t", gap=5, value="bytes",
                                                aggs={"lo": ("min", "dwell")}),
                 lambda: CountWindowAggregate(by=["page"], value="bytes", history=2,
                                              aggs={"hi": ("max", "bytes"),
                                                    "lo": ("min", "dwell")})):
        with pytest.raises(PlanError, match=r"aggregates one value column, but value= and "
                                            r"aggs name 'bytes', 'dwell'"):
            make()


def test_a_named_column_must_exist() -> None:
    schema = clicks(0, n=3).schema
    for op in (TimeWindowAggregate(by=["page"], time="t", size=5, aggs={"s": ("sum", "b")}),
               TimeWindowAggregate(by=["page"], time="t", size=5, aggs={"n": ("count", "b")}),
               GroupAggregate(by=["page"], aggs={"n": ("count", "b")})):
        with pytest.raises(PlanError, match="'b'"):
            op.bind(schema)
