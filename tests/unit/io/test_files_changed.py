"""A file that changes or goes while the file-stream source reads it (``sparkflux/io/files.py``,
"A file that changes or goes while it is read"): truncated, rewritten in place or grown,
the input stops with ``FileChanged`` naming the file, how it changed and the position;
replaced by a file renamed onto its name, it is read whole and the new one is a late file
(logged and listed); deleted, it is read to its end through the open file, a warning says
so and the next file is read. Every record of the files is accounted for: handed over as a
row, a dead letter, or counted in the error."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sparkflux.io import FilePosition, FileStreamSource
from sparkflux.io.files import FileChanged
from sparkflux.model.validate import validate

from .test_files import SCHEMA, keys, land_json, land_parquet, rows, until_idle


def json_lines(start: int, n: int) -> list[str]:
    return [json.dumps({"k": i, "s": f"v{i:06d}"}) for i in range(start, start + n)]


def source(d: Path, fmt: str) -> FileStreamSource:
    return FileStreamSource(d, SCHEMA, format=fmt, batch_size=10, poll_interval=0.0,
                            idle_timeout=0.0)


def land(d: Path, fmt: str, name: str, start: int, n: int) -> None:
    if fmt == "json":
        land_json(d, name, json_lines(start, n))
    else:
        land_parquet(d, name, rows(start, n), row_group_size=10)


def read_until_changed(src: FileStreamSource, change: Any) -> tuple[list[Any], FileChanged]:
    """Drive the source; after its first batch call ``change()``; the items handed over and
    the error that ended the input."""
    it = src.batches()
    got = [next(it)]
    change()
    with pytest.raises(FileChanged) as caught:
        for item in it:
            assert item is not None  # the input stops before it waits for another file
            got.append(item)
    return got, caught.value


def a_later_mtime(path: Path) -> None:
    """The file's modification time a second on (a filesystem's timestamps may be coarser
    than the test's steps)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_file_truncated_while_read_stops_the_input_naming_it(tmp_path: Path,
                                                                 fmt: str) -> None:
    name = f"a.{'jsonl' if fmt == 'json' else 'parquet'}"
    land(tmp_path, fmt, name, 0, 100)
    land(tmp_path, fmt, f"b.{'jsonl' if fmt == 'json' else 'parquet'}", 100, 10)
    path = tmp_path / name
    size = path.stat().st_size
    src = source(tmp_path, fmt)
    got, error = read_until_changed(src, lambda: os.truncate(path, size // 3))
    handed = len(keys(got))
    assert keys(got) == list(range(handed)) and 10 <= handed < 100  # b.* never read
    message = str(error)
    assert f"file {path} changed while it was read: truncated from {size:,} to " \
           f"{size // 3:,} bytes" in message
    assert f"{handed:,} of its records were handed over" in message
    assert f"FilePosition({name!r}, {handed})" in message
    assert src.position() == FilePosition(name, handed)


def test_a_file_rewritten_in_place_stops_the_input(tmp_path: Path) -> None:
    """Truncated and written again, larger than before (the issue's case: the new content was
    never read and the rest of the old one lost, silently)."""
    land_json(tmp_path, "a.jsonl", json_lines(0, 100))
    path = tmp_path / "a.jsonl"

    def rewrite() -> None:
        path.write_text("".join(line + "\n" for line in json_lines(1000, 300)))
        a_later_mtime(path)

    got, error = read_until_changed(source(tmp_path, "json"), rewrite)
    assert keys(got) == list(range(10))
    assert "changed while it was read: grown from" in str(error)


def test_a_file_rewritten_to_the_same_size_is_found_by_its_modification_time(
        tmp_path: Path) -> None:
    land_json(tmp_path, "a.jsonl", json_lines(100, 100))
    path = tmp_path / "a.jsonl"

    def rewrite() -> None:
        path.write_text("".join(line + "\n" for line in json_lines(500, 100)))  # same widths
        a_later_mtime(path)

    got, error = read_until_changed(source(tmp_path, "json"), rewrite)
    assert keys(got) == list(range(100, 110))
    assert "rewritten (its size is the same, its modification time is not)" in str(error)


def test_a_rewrite_that_keeps_size_and_time_is_found_by_its_first_bytes(
        tmp_path: Path) -> None:
    """Within the filesystem's timestamp granularity a rewrite may keep the modification
    time: the file's first bytes, compared at its end, still tell."""
    land_json(tmp_path, "a.jsonl", json_lines(100, 30))
    path = tmp_path / "a.jsonl"
    before = path.stat()

    def rewrite() -> None:
        path.write_text("".join(line + "\n" for line in json_lines(500, 30)))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    got, error = read_until_changed(source(tmp_path, "json"), rewrite)
    assert keys(got) == list(range(100, 130))  # read in one block before the rewrite
    assert "its first bytes differ from those read at its opening" in str(error)


def test_a_file_replaced_by_another_while_read_is_read_whole_the_new_one_late(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The earlier file is read whole through the open file; the new one has a name already
    read: as any file landing behind the position, it is logged and listed, not read."""
    land_parquet(tmp_path, "a.parquet", rows(0, 30), row_group_size=10)
    land_parquet(tmp_path, "b.parquet", rows(100, 10))
    src = source(tmp_path, "parquet")
    it = src.batches()
    got = [next(it)]
    land_parquet(tmp_path, "a.parquet", rows(50, 5))
    with caplog.at_level(logging.WARNING, logger="sparkflux.io.files"):
        got.extend(until_idle(it))
    assert keys(got) == [*range(30), *range(100, 110)]
    assert src.late_files == ["a.parquet"]
    assert [r.getMessage() for r in caplog.records] == [
        f"file {tmp_path / 'a.parquet'} was replaced by another file while it was read: the "
        f"earlier file was read whole through the open file (30 records); the new one landed "
        f"under a name already read and is not read (late_files)"]


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_file_deleted_while_read_is_read_to_its_end_and_the_input_goes_on(
        tmp_path: Path, fmt: str, caplog: pytest.LogCaptureFixture) -> None:
    """With a malformed line near its end (JSON): the line-by-line reading that finds it goes
    through the open file too, not the name (the issue's ``FileNotFoundError``)."""
    suffix = "jsonl" if fmt == "json" else "parquet"
    total = 40_000  # JSON: 1.3 MiB, two blocks of pyarrow's: the bad line is in the second
    if fmt == "json":
        land_json(tmp_path, "a.jsonl", [*json_lines(0, total - 5), "{not json",
                                        *json_lines(total - 5, 5)])
        assert (tmp_path / "a.jsonl").stat().st_size > 1 << 20
    else:
        land(tmp_path, fmt, "a.parquet", 0, total)
    land(tmp_path, fmt, f"b.{suffix}", total, 10)
    src = source(tmp_path, fmt)
    it = src.batches()
    got = [next(it)]
    (tmp_path / f"a.{suffix}").unlink()
    with caplog.at_level(logging.WARNING, logger="sparkflux.io.files"):
        got.extend(until_idle(it))
    assert keys(got) == list(range(total + 10))
    dead = [r.reason for item in got for r in validate(item, SCHEMA)[1]]
    assert dead == ([f"malformed JSON line: file a.jsonl line {total - 4}: Expecting property "
                     f"name enclosed in double quotes: line 1 column 2 (char 1)"]
                    if fmt == "json" else [])
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [f"file {tmp_path / f'a.{suffix}'} was deleted while it was read: it was "
                      f"read to its end through the open file ({total + len(dead):,} "
                      f"records); the input goes on"]
    assert src.files_read == 2


def test_a_file_deleted_before_it_is_opened_is_a_dead_letter_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land_json(tmp_path, "a.jsonl", json_lines(0, 5))
    land_json(tmp_path, "b.jsonl", json_lines(5, 5))
    src = source(tmp_path, "json")
    listed = src._complete_files

    def listing_then_gone() -> list[str]:
        names = listed()
        (tmp_path / "a.jsonl").unlink(missing_ok=True)
        return names

    monkeypatch.setattr(src, "_complete_files", listing_then_gone)
    items = until_idle(src.batches())
    dead = [r.reason for item in items for r in validate(item, SCHEMA)[1]]
    assert len(dead) == 1 and dead[0].startswith("file a.jsonl: unreadable (")
    assert keys(items) == list(range(5, 10))


def test_an_unchanged_file_read_through_its_handle_gives_what_the_name_gives(
        tmp_path: Path) -> None:
    """The fast paths still read every row: a large JSON file in several pyarrow blocks,
    resumed inside it."""
    land_json(tmp_path, "a.jsonl", json_lines(0, 50_000))
    src = FileStreamSource(tmp_path, SCHEMA, format="json", idle_timeout=0.0,
                           poll_interval=0.0, start=FilePosition("a.jsonl", 7))
    table = pa.Table.from_batches([b for b in src.batches() if b is not None])
    assert table.column("k").to_pylist() == list(range(7, 50_000))
