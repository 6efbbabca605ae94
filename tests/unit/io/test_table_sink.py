"""The table sink (``sparkflux/io/table_sink.py``) and ``foreach_batch``: part files named by
output SN range, written whole and renamed, replaced by a rewrite of the same output (write,
"crash", rewrite from the start: the same rows, none twice), and each batch's SN range."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkflux.io import TableSink, foreach_batch
from sparkflux.model.schema import with_system

USER = [pa.field("key", pa.int64()), pa.field("value", pa.string())]
SCHEMA = pa.schema([*with_system(USER), pa.field("_part", pa.int32())])


def output(n: int = 5_000, seed: int = 3) -> pa.RecordBatch:
    """An egress output: increasing, sparse SNs, some with several rows (minor numbers)."""
    rng = np.random.default_rng(seed)
    sn = np.repeat(np.cumsum(rng.integers(1, 40, n)), 1)
    snm = np.zeros(n, dtype=np.int64)
    twice = rng.random(n) < 0.2  # a row that shares its SN with the one before
    for i in np.flatnonzero(twice[1:]) + 1:
        sn[i], snm[i] = sn[i - 1], snm[i - 1] + 1
    return pa.RecordBatch.from_arrays([
        pa.array(np.arange(n)), pa.array([f"v{i}" for i in range(n)]), pa.array(sn),
        pa.array(snm), pa.array(np.full(n, 1.5)), pa.array(np.zeros(n, dtype=np.int32))],
        schema=SCHEMA)


def deliveries(rows: pa.RecordBatch, seed: int) -> list[pa.RecordBatch]:
    """The output cut into batches at random points, as the egress delivers it."""
    rnd = random.Random(seed)
    out, at = [], 0
    while at < rows.num_rows:
        n = rnd.randint(0, 400)
        out.append(rows.slice(at, n))
        at += n
    return out


def user_rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("key", "value", "_sn", "_snm")),
                      strict=True))


def expected(rows: pa.RecordBatch) -> list[tuple]:
    return user_rows(pa.Table.from_batches([rows]))


def parts(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith("part-"))


def write(d: Path, batches: list[pa.RecordBatch], close: bool = True, **kw: object) -> TableSink:
    sink = TableSink(d, **{"sn_span": 4_096, "rows_per_file": 300, **kw})  # type: ignore[arg-type]
    sink.open(SCHEMA)
    for b in batches:
        sink.write(b)
    if close:
        sink.close()
    return sink


def test_the_table_holds_the_output_in_files_named_by_sn_range(tmp_path: Path) -> None:
    rows = output()
    write(tmp_path, deliveries(rows, 1))
    table = pq.read_table(tmp_path)  # skips _sparkflux_table.json, as Spark does
    assert table.column_names == ["key", "value", "_sn", "_snm"]  # no timing columns
    assert user_rows(table) == expected(rows)
    for name in parts(tmp_path):
        _, lo, hi, _ = name.removesuffix(".parquet").split("-")
        sn = pq.read_table(tmp_path / name).column("_sn").to_numpy()
        assert int(lo) <= sn.min() and sn.max() < int(hi) == int(lo) + 4_096
        assert len(sn) <= 300
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_without_flushes_the_names_depend_on_the_output_only(tmp_path: Path) -> None:
    rows = output()
    write(tmp_path / "a", deliveries(rows, 1), flush_interval=None)
    write(tmp_path / "b", deliveries(rows, 2), flush_interval=None)
    assert parts(tmp_path / "a") == parts(tmp_path / "b")
    for name in parts(tmp_path / "a"):
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))


def test_a_published_file_is_never_written_again_in_a_run(tmp_path: Path) -> None:
    """Spark lists files with their sizes and reads footers later: a file must not change
    under a reader, even when the flush interval publishes a range's rows in pieces."""
    rows = output()
    sink = TableSink(tmp_path, sn_span=4_096, rows_per_file=300, flush_interval=0.0)
    sink.open(SCHEMA)
    seen: dict[str, tuple[int, int]] = {}
    for b in deliveries(rows, 4):
        sink.write(b)
        for name in parts(tmp_path):
            st = (tmp_path / name).stat()
            assert seen.setdefault(name, (st.st_ino, st.st_size)) == (st.st_ino, st.st_size)
    sink.close()
    assert user_rows(pq.read_table(tmp_path)) == expected(rows)


@pytest.mark.parametrize("first,second", [(None, 0.0), (0.0, None)],
                         ids=["whole-then-flushed", "flushed-then-whole"])
def test_a_rewrite_cut_otherwise_leaves_no_stale_files(tmp_path: Path, first: float | None,
                                                       second: float | None) -> None:
    rows = output()
    write(tmp_path, deliveries(rows, 1), flush_interval=first)
    write(tmp_path, deliveries(rows, 2), flush_interval=second)
    assert user_rows(pq.read_table(tmp_path)) == expected(rows)
    again = tmp_path / "again"
    write(again, deliveries(rows, 2), flush_interval=second)
    assert parts(tmp_path) == parts(again)  # exactly the second run's files


def test_a_reader_meanwhile_sees_whole_files_and_a_prefix_of_the_output(
        tmp_path: Path) -> None:
    rows = output()
    sink = TableSink(tmp_path, sn_span=4_096, rows_per_file=300, flush_interval=0.0)
    sink.open(SCHEMA)
    want = expected(rows)
    for b in deliveries(rows, 9)[:25]:
        sink.write(b)
        seen = user_rows(pq.read_table(tmp_path))
        assert seen == sorted(want, key=lambda r: (r[2], r[3]))[: len(seen)]


def test_other_settings_for_an_existing_table_are_refused(tmp_path: Path) -> None:
    write(tmp_path, deliveries(output(200), 1))
    with pytest.raises(ValueError, match="sn_span=4096, rows_per_file=300: a sink with other"):
        TableSink(tmp_path, sn_span=1_000, rows_per_file=300)
    TableSink(tmp_path, sn_span=4_096, rows_per_file=300)  # the same: fine


def test_without_sequence_columns_only_user_columns_are_written(tmp_path: Path) -> None:
    write(tmp_path, [output(50)], sequence_columns=False)
    assert pq.read_table(tmp_path).column_names == ["key", "value"]


def test_foreach_batch_gets_every_batch_once_with_its_sn_range() -> None:
    rows = output(2_000)
    calls: list[tuple[pa.RecordBatch, int, int]] = []
    sink = foreach_batch(lambda b, first, last: calls.append((b, first, last)))
    sink.open(SCHEMA)
    for b in deliveries(rows, 4):
        sink.write(b)
    sink.close()
    assert all(b.num_rows for b, _, _ in calls)  # empty batches are skipped
    assert all(b.column("_sn")[0].as_py() == first and b.column("_sn")[-1].as_py() == last
               for b, first, last in calls)
    assert all(a[2] <= b[1] for a, b in zip(calls, calls[1:], strict=False))  # in order
    assert calls[0][0].schema.names == ["key", "value", "_sn", "_snm"]
    got = pa.Table.from_batches([b for b, _, _ in calls])
    assert user_rows(got) == expected(rows)


def test_a_poll_publishes_held_rows_once_they_have_waited_with_no_more_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sparse output (a window's rows, then nothing): the rows are published by the driver's
    poll once they have waited ``flush_interval``, not when more rows come."""
    import sparkflux.io.table_sink as table_sink

    now = [100.0]
    monkeypatch.setattr(table_sink.time, "monotonic", lambda: now[0])
    rows = output(50)
    sink = write(tmp_path, [rows], close=False, flush_interval=1.0)
    sink.poll()
    assert parts(tmp_path) == []  # held: it has not waited a second yet
    now[0] += 0.99
    sink.poll()
    assert parts(tmp_path) == []
    now[0] += 0.02
    sink.poll()  # no write came, the poll publishes
    assert len(parts(tmp_path)) == 1
    assert user_rows(pq.read_table(tmp_path)) == expected(rows)
    sink.poll()  # nothing held: nothing more
    assert len(parts(tmp_path)) == 1 and sink.files_written == 1


def test_without_a_flush_interval_a_poll_publishes_nothing(tmp_path: Path) -> None:
    sink = write(tmp_path, [output(50)], close=False, flush_interval=None)
    sink.poll()
    assert parts(tmp_path) == []
    sink.close()
    assert len(parts(tmp_path)) == 1
