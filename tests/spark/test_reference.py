"""The Spark SQL reference for netmon agrees with an independent, row-by-row Python model.

The model below is written from the semantics in ``examples/netmon.py``'s docstring with dicts
and loops only, so an error in the Spark window formulation (lag/row_number/frame bounds,
classification priority, ISN assignment over valid records) shows up as a row mismatch.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from sparkflux.dataflow.examples import load_example
from sparkflux.model.digest import digest_of
from sparkflux.spark.launcher import spark_session
from sparkflux.spark.reference import (
    RESULT_SCHEMA,
    netmon_reference,
    reference_digest,
    reference_table,
    valid_record,
)
from tests.conftest import ROOT

EVENTS = 20_000
SEED = 7
Row = tuple[int, int, int, float, int, int]


def _load_netmon() -> ModuleType:
    """examples/netmon.py, loaded by path (examples/ is not a package) the way the CLI does."""
    return load_example(ROOT / "examples" / "netmon.py")


netmon = _load_netmon()


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local[2] session for this module, or the already running one (e.g. the suite's shared
    session from conftest), which is then left as it is and not stopped here."""
    running = SparkSession.getActiveSession()
    if running is not None:
        yield running
        return
    session = spark_session("local[2]", app_name="test_reference")
    yield session
    session.stop()


# --- the independent model ---------------------------------------------------------------


def model_app(row: dict, words: list[str] | None) -> int:
    """10 + index of the first word (list order) in the payload, else dport % 10."""
    for m, word in enumerate(words or []):
        if word in row["payload"]:
            return 10 + m
    return (row["dport"] & 0x7FFFFFFF) % 10


def model(rows: list[dict], words: list[str] | None) -> tuple[list[Row], dict[str, int]]:
    """The netmon output for valid ``rows`` in arrival order (``_sn`` = position), plus counters
    of the GB1 cases seen (so tests can check the input exercised them)."""
    open_session: dict[tuple[int, int], int] = {}  # (src, dst) -> START ts
    updates: dict[tuple[int, int], int] = {}  # (app, src) -> GB2 updates so far
    last_dur: dict[tuple[int, int], int] = {}  # (app, src) -> previous dur
    seen = {"restart": 0, "orphan_end": 0, "sessions": 0}
    out: list[Row] = []
    for sn, row in enumerate(rows):
        pair = (row["src"], row["dst"])
        if row["kind"] == 0:
            seen["restart"] += pair in open_session
            open_session[pair] = row["ts"]
            continue
        start = open_session.pop(pair, None)
        if start is None:
            seen["orphan_end"] += 1
            continue
        seen["sessions"] += 1
        app = model_app(row, words)
        dur = row["ts"] - start
        group = (app, row["src"])
        n = updates.get(group, 0) + 1
        updates[group] = n
        previous = last_dur.get(group)
        last_dur[group] = dur
        if n % 2 == 0:
            assert previous is not None
            window = [previous, dur]
            out.append((app, row["src"], max(window), sum(window) / len(window), sn, 0))
    return out, seen


def model_table(rows: list[Row]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in RESULT_SCHEMA]
    return pa.table(
        {f.name: pa.array(c, f.type) for f, c in zip(RESULT_SCHEMA, columns, strict=True)},
        schema=RESULT_SCHEMA,
    )


def spark_rows(table: pa.Table) -> list[Row]:
    return [
        (r["app"], r["src"], r["max_dur"], r["avg_dur"], r["_sn"], r["_snm"])
        for r in table.to_pylist()
    ]


def check_against_model(spark: SparkSession, opts: object, words: list[str] | None) -> dict:
    events = netmon.generate(0, EVENTS, SEED).to_pylist()
    expected, seen = model(events, words)
    df = netmon_reference(spark, netmon.NetmonSource(opts), words)
    table = reference_table(df)
    assert table.schema.equals(RESULT_SCHEMA)
    got = spark_rows(table)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"row {i}: spark {g} != model {e}"
    digest, count = reference_digest(df)
    assert count == len(expected)
    assert digest == digest_of(model_table(expected))
    # The input must exercise the interesting cases, or agreement proves little.
    assert len(expected) > 1_000
    assert seen["restart"] > 0 and seen["orphan_end"] > 0
    return {"rows": got, "seen": seen}


# --- tests -----------------------------------------------------------------------------


def test_reference_matches_model(spark: SparkSession) -> None:
    opts = netmon.NetmonOptions(events=EVENTS, seed=SEED, batch=4096)
    result = check_against_model(spark, opts, None)
    assert {r[0] for r in result["rows"]} <= set(range(10))
    assert [r[4] for r in result["rows"]] == sorted(r[4] for r in result["rows"])


def test_reference_matches_model_cpu_work(spark: SparkSession) -> None:
    words = netmon.dictionary(SEED)
    # The model's classification is the one netmon's own (Arrow) classify implements.
    batch = netmon.generate(0, 4_000, SEED)
    expected_apps = [model_app(r, words) for r in batch.to_pylist()]
    assert netmon.classify(batch, words).to_pylist() == expected_apps
    assert any(a >= 10 for a in expected_apps)

    opts = netmon.NetmonOptions(events=EVENTS, seed=SEED, batch=4096, cpu_work=True)
    result = check_against_model(spark, opts, words)
    assert any(r[0] >= 10 for r in result["rows"])


def test_reference_skips_bad_records(spark: SparkSession) -> None:
    opts = netmon.NetmonOptions(events=EVENTS, seed=SEED, batch=4096, bad_every=97)
    items = list(netmon.NetmonSource(opts).batches())
    records = [r for item in items for r in item]
    assert all(isinstance(item, list) for item in items)
    assert len(records) == EVENTS + EVENTS // 97
    assert sum(valid_record(r, netmon.SCHEMA) for r in records) == EVENTS
    # The model runs on the clean events only: ISNs must be dense over the valid records.
    check_against_model(spark, opts, None)


def test_valid_record() -> None:
    good = netmon.generate(0, 1, SEED).to_pylist()[0]
    assert valid_record(good, netmon.SCHEMA)
    assert valid_record({**good, "extra": "ignored"}, netmon.SCHEMA)
    assert not valid_record({k: v for k, v in good.items() if k != "dst"}, netmon.SCHEMA)
    assert not valid_record({**good, "ts": "not-a-time"}, netmon.SCHEMA)
    assert not valid_record({**good, "ts": None}, netmon.SCHEMA)
    assert not valid_record({**good, "kind": True}, netmon.SCHEMA)
    assert not valid_record({**good, "kind": 300}, netmon.SCHEMA)  # out of int8 range
    assert not valid_record({**good, "payload": 5}, netmon.SCHEMA)


class _Handmade:
    """A tiny source exercising restart, orphan END, and first-word classification."""

    schema = netmon.SCHEMA

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def batches(self) -> Iterator[pa.RecordBatch | list[dict]]:
        yield self.rows[:3]
        yield pa.RecordBatch.from_pylist(self.rows[3:], schema=self.schema)


def test_reference_handmade_cases(spark: SparkSession) -> None:
    def ev(src: int, dst: int, kind: int, ts: int, dport: int = 3, payload: str = "x") -> dict:
        return {"src": src, "dst": dst, "sport": 1, "dport": dport, "kind": kind,
                "length": 64, "ts": ts, "payload": payload}  # fmt: skip

    words = ["aaa", "bbb"]
    rows = [
        ev(1, 1, 1, 5),  # sn 0: END with no open session -> nothing
        ev(1, 1, 0, 10),  # sn 1: START
        ev(1, 1, 0, 20),  # sn 2: START again restarts the session
        ev(1, 1, 1, 50, payload="zbbbaaaz"),  # sn 3: END dur 30, app 10 (word 0 wins)
        ev(1, 1, 1, 60),  # sn 4: END, session already closed -> nothing
        ev(1, 2, 0, 70),  # sn 5
        ev(1, 2, 1, 90, payload="aaa"),  # sn 6: dur 20, app 10, 2nd update -> emit
        ev(1, 2, 0, 100, dport=17),  # sn 7
        ev(1, 2, 1, 101, dport=17),  # sn 8: dur 1, app 7, 1st update of (7, 1)
        ev(1, 2, 0, 110),  # sn 9
        ev(1, 2, 1, 200, payload="bbb"),  # sn 10: dur 90, app 11
        ev(1, 3, 0, 200, payload="aaa"),  # sn 11
        ev(1, 3, 1, 300, payload="zzz"),  # sn 12: dur 100, app 3 (END's payload decides)
        ev(1, 3, 0, 300),  # sn 13
        ev(1, 3, 1, 301),  # sn 14: dur 1, app 3, 2nd update of (3, 1) -> emit
    ]
    expected = [(10, 1, 30, 25.0, 6, 0), (3, 1, 100, 50.5, 14, 0)]
    assert model(rows, words)[0] == expected
    df = netmon_reference(spark, _Handmade(rows), words)
    assert spark_rows(reference_table(df)) == expected


def test_reference_digest_is_stable(spark: SparkSession) -> None:
    """Same input, same digest; a different seed gives a different digest."""
    small = netmon.NetmonOptions(events=3_000, seed=SEED, batch=1000)
    other = netmon.NetmonOptions(events=3_000, seed=SEED + 1, batch=1000)
    a = reference_digest(netmon_reference(spark, netmon.NetmonSource(small), None))
    b = reference_digest(netmon_reference(spark, netmon.NetmonSource(small), None))
    c = reference_digest(netmon_reference(spark, netmon.NetmonSource(other), None))
    assert a == b
    assert a[0] != c[0]
