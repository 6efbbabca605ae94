"""The file-stream source (``sparkflux/io/files.py``): files landing while it reads, files in
progress ignored, positions and resuming, Parquet and JSON lines, malformed records to the
dead letters, and every end condition. The iterator is driven as the driver's feed drives it:
``None`` is "nothing yet"."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkflux.io import FilePosition, FileStreamSource
from sparkflux.model.validate import Malformed, validate

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("s", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"k": list(range(start, start + n)),
                     "s": [f"v{i}" for i in range(start, start + n)]}, schema=SCHEMA)


def land_parquet(d: Path, name: str, table: pa.Table, row_group_size: int = 7) -> None:
    """As a writer should: under a temporary name, then renamed into place."""
    tmp = d / f".{name}.tmp"
    pq.write_table(table, tmp, row_group_size=row_group_size)
    os.replace(tmp, d / name)


def land_json(d: Path, name: str, lines: list[str]) -> None:
    tmp = d / f"_{name}.inprogress"
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, d / name)


def until_idle(it: Iterator[Any], limit: int = 10_000) -> list[Any]:
    """Items up to the next "nothing yet" (or the end)."""
    out = []
    for _ in range(limit):
        try:
            item = next(it)
        except StopIteration:
            break
        if item is None:
            break
        out.append(item)
    return out


def keys(items: list[Any]) -> list[int]:
    out: list[int] = []
    for item in items:
        good, _ = validate(item, SCHEMA)
        out.extend(good.column("k").to_pylist())
    return out


def source(d: Path, **kw: Any) -> FileStreamSource:
    return FileStreamSource(d, SCHEMA, **{"batch_size": 5, "poll_interval": 0.0, **kw})


def test_files_that_land_while_it_reads_are_read_in_name_order(tmp_path: Path) -> None:
    src = source(tmp_path, end_marker="_DONE")
    it = src.batches()
    assert until_idle(it) == []  # an empty directory: nothing yet, no end
    land_parquet(tmp_path, "part-0001.parquet", rows(0, 12))
    got = until_idle(it)
    assert keys(got) == list(range(12)) and all(b.num_rows <= 5 for b in got)
    assert src.position() == FilePosition("part-0001.parquet", 12)
    land_parquet(tmp_path, "part-0003.parquet", rows(20, 3))
    land_parquet(tmp_path, "part-0002.parquet", rows(12, 8))  # both land before a listing
    assert keys(until_idle(it)) == list(range(23))[12:]
    (tmp_path / "_DONE").touch()
    assert until_idle(it) == [] and next(it, "end") == "end"
    assert src.files_read == 3 and src.late_files == []


def test_files_in_progress_markers_and_other_suffixes_are_never_read(tmp_path: Path) -> None:
    land_parquet(tmp_path, "a.parquet", rows(0, 2))
    pq.write_table(rows(100, 2), tmp_path / ".b.parquet")  # hidden: being written
    pq.write_table(rows(200, 2), tmp_path / "_c.parquet")  # underscore: ditto, or a marker
    (tmp_path / "d.parquet.crc").write_text("x")
    (tmp_path / "e.txt").write_text("x")
    (tmp_path / "f.parquet").mkdir()
    (tmp_path / "half.parquet.tmp").write_bytes(b"PAR1 half a file")
    assert keys(until_idle(source(tmp_path, idle_timeout=0.0).batches())) == [0, 1]


def test_a_file_landing_behind_the_position_is_reported_not_read(tmp_path: Path) -> None:
    src = source(tmp_path, max_files=3)
    it = src.batches()
    land_parquet(tmp_path, "b.parquet", rows(0, 2))
    assert keys(until_idle(it)) == [0, 1]
    land_parquet(tmp_path, "a.parquet", rows(10, 2))
    land_parquet(tmp_path, "c.parquet", rows(2, 2))
    assert keys(until_idle(it)) == [2, 3] and src.late_files == ["a.parquet"]


def test_a_source_resumes_from_its_position(tmp_path: Path) -> None:
    for i in range(3):
        land_parquet(tmp_path, f"p{i}.parquet", rows(10 * i, 10))
    first = source(tmp_path, batch_size=4, idle_timeout=0.0)
    it = first.batches()
    got = [next(it) for _ in range(4)]  # p0: 4 + 4 + 2, then 4 of p1
    first.close()
    assert next(it, "end") == "end"  # closed: ends at the batch boundary
    pos = first.position()
    assert pos == FilePosition("p1.parquet", 4)
    rest = until_idle(source(tmp_path, batch_size=4, idle_timeout=0.0, start=pos).batches())
    assert keys(got) + keys(rest) == list(range(30))
    # the row may lie inside a row group (groups of 7 rows here), and at a file's end
    again = source(tmp_path, idle_timeout=0.0, start=FilePosition("p0.parquet", 10))
    assert keys(until_idle(again.batches())) == list(range(10, 30))


def test_json_lines_ignore_undeclared_fields_and_dead_letter_malformed_lines(
        tmp_path: Path) -> None:
    good = [json.dumps({"k": i, "s": f"v{i}", "extra": True}) for i in range(6)]
    land_json(tmp_path, "1.jsonl", good[:3] + [""] + good[3:])
    land_json(tmp_path, "2.jsonl", [json.dumps({"k": 6, "s": "v6"}), "{not json",
                                    json.dumps({"k": "seven", "s": "v7"}), "[1, 2]",
                                    json.dumps({"s": "no k"}), json.dumps({"k": 9})])
    items = until_idle(source(tmp_path, format="json", idle_timeout=0.0).batches())
    assert keys(items) == [0, 1, 2, 3, 4, 5, 6, 9]
    rejected = [r for item in items for r in validate(item, SCHEMA)[1]]
    reasons = [r.reason for r in rejected]
    assert reasons[0].startswith("malformed JSON line: file 2.jsonl line 2:")
    assert rejected[0].record == {"file": "2.jsonl", "line": 2, "text": "{not json"}
    assert "line 4: a JSON list, not an object" in reasons[1]
    assert sorted(reasons[2:]) == ["column 'k': 'seven' is not of type int64: "
                                   "a string, not an integer",
                                   "missing column 'k'"]


def test_json_resumes_by_record_not_by_line(tmp_path: Path) -> None:
    land_json(tmp_path, "1.json", [json.dumps({"k": i, "s": "x"}) for i in range(3)] + [""]
              + [json.dumps({"k": i, "s": "x"}) for i in range(3, 8)])
    src = source(tmp_path, format="json", idle_timeout=0.0,
                 start=FilePosition("1.json", 4))
    assert keys(until_idle(src.batches())) == [4, 5, 6, 7]
    assert src.position() == FilePosition("1.json", 8)


def test_a_file_that_is_not_parquet_is_one_dead_letter_and_reading_goes_on(
        tmp_path: Path) -> None:
    (tmp_path / "a.parquet").write_bytes(b"not parquet at all")
    land_parquet(tmp_path, "b.parquet", rows(0, 3))
    items = until_idle(source(tmp_path, idle_timeout=0.0).batches())
    assert isinstance(items[0], list) and isinstance(items[0][0], Malformed)
    assert items[0][0].reason.startswith("file a.parquet: not readable as Parquet")
    assert keys(items) == [0, 1, 2]


def test_a_parquet_file_missing_a_column_is_rejected_by_the_ingress(tmp_path: Path) -> None:
    land_parquet(tmp_path, "a.parquet", pa.table({"s": ["x"]}))
    items = until_idle(source(tmp_path, idle_timeout=0.0).batches())
    assert [r.reason for r in validate(items[0], SCHEMA)[1]] == ["missing column(s) k"]


def test_idle_timeout_and_max_files_end_the_input(tmp_path: Path) -> None:
    land_parquet(tmp_path, "a.parquet", rows(0, 2))
    land_parquet(tmp_path, "b.parquet", rows(2, 2))
    it = source(tmp_path, max_files=1).batches()
    assert keys(until_idle(it)) == [0, 1] and next(it, "end") == "end"
    src = source(tmp_path, idle_timeout=0.2, poll_interval=0.01)
    t0 = time.monotonic()
    items = list(src.batches())
    assert keys([i for i in items if i is not None]) == [0, 1, 2, 3]
    assert 0.2 <= time.monotonic() - t0 < 2.0


def test_close_from_another_thread_ends_a_waiting_source(tmp_path: Path) -> None:
    src = source(tmp_path, poll_interval=0.01)
    threading.Timer(0.1, src.close).start()
    t0 = time.monotonic()
    assert all(item is None for item in src.batches())
    assert time.monotonic() - t0 < 2.0


def test_bad_options_fail_fast(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format must be one of parquet, json"):
        FileStreamSource(tmp_path, SCHEMA, format="csv")
