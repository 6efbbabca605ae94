"""A directory of Parquet or JSON-lines files as an unbounded source: new files are read as
they land.

**Which files, in what order.** The source reads the directory's files (not its
subdirectories) in name order. A file is taken only when it is complete: its name must not
start with ``.`` or ``_`` (Spark, Hadoop and most writers use such names for files in
progress and for markers, and Spark's readers ignore them too) and must end with the format's
suffix (``.parquet``; ``.json``, ``.jsonl`` or ``.ndjson``). So a writer writes under a
temporary name (``.part-7.parquet.tmp``, ``_tmp/...``) and renames the finished file into
place, as Spark's file sink does: a rename within a directory is atomic, so the source never
sees half a file. A file that lands with a name sorting at or before a file already read is
never read (the order, and so the position, would no longer mean anything): it is logged
and listed in ``late_files``. Name files so that they sort in the order they are written
(a zero-padded counter, a fixed-width timestamp).

**Position.** ``position()`` is where the source stands: ``FilePosition(file, row)``, every
file before ``file`` in name order read, and ``row`` records of ``file`` (for JSON lines, the
non-blank lines). ``start=`` a position resumes there: the files before it are skipped, and
``row`` records of its file. It moves as the source hands each batch to the driver, so after
a run that ended cleanly (its input ended, or ``close()``) every record before it was
processed and written.

**The end.** The input ends when ``end_marker`` (e.g. ``_DONE`` or Spark's ``_SUCCESS``)
exists and every file present when it was seen has been read; when no new file has landed for
``idle_timeout`` seconds; after ``max_files`` files; or at the next batch boundary after
``close()``. With none of them it runs until closed.

**Waiting never blocks.** When no new file is there the source yields ``None`` (see
``Source``): the driver's loop goes on serving the sites and asks again; the directory is
listed at most every ``poll_interval`` seconds.

**Bad input.** Parquet is read with pyarrow in slices of ``batch_size`` rows (only the
schema's columns); JSON lines with ``pyarrow.json`` against the declared schema (fields it
does not declare are ignored). Every record is validated by the ingress against ``schema``:
a missing column, a null in a required one or a value of the wrong type goes to the dead
letters with its reason. A JSON file that pyarrow cannot convert is read again line by line
from where it failed, so that each line that is not a JSON object is dead-lettered
(``Malformed``: the file, the line number, its text, the parse error) and the others go on; a
file that is not readable Parquet is one dead letter naming the file. The run goes on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Source
from sparkflux.io.chunks import MAX_CHUNK_ROWS
from sparkflux.io.site_read import SiteReadable
from sparkflux.model.validate import Malformed

log = logging.getLogger(__name__)

SUFFIXES = {"parquet": (".parquet",), "json": (".json", ".jsonl", ".ndjson")}
TEXT_LIMIT = 200  # characters of a malformed line kept in its dead letter


@dataclass(frozen=True, slots=True)
class FilePosition:
    """Every file before ``file`` (name order) read, and ``row`` records of ``file``."""

    file: str = ""
    row: int = 0


Item: TypeAlias = pa.RecordBatch | list[dict[str, Any] | Malformed] | None  # explicit: pa is Any


class FileStreamSource(SiteReadable, Source):
    """New Parquet or JSON-lines files of a directory, in name order (see the module)."""

    def __init__(self, path: str | Path, schema: pa.Schema, *, format: str = "parquet",
                 event_time: str | None = None, lateness: int = 0, batch_size: int = 8192,
                 start: FilePosition | None = None, end_marker: str | None = None,
                 idle_timeout: float | None = None, max_files: int | None = None,
                 poll_interval: float = 0.1, read_on: str = "driver",
                 chunk_rows: int = 65_536) -> None:
        if format not in SUFFIXES:
            raise ValueError(f"format must be one of {', '.join(SUFFIXES)} (got {format!r})")
        if read_on not in ("driver", "sites"):
            raise ValueError(f"read_on must be 'driver' or 'sites' (got {read_on!r})")
        if read_on == "sites" and format != "parquet":
            raise ValueError("read_on='sites' reads Parquet only (a chunk's rows are found "
                             "from the file's footer); read JSON lines with read_on='driver'")
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise ValueError(f"chunk_rows must be between 1 and {MAX_CHUNK_ROWS} "
                             f"(got {chunk_rows})")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        self.path = Path(path)
        self.schema = schema
        self.format = format
        self.event_time = event_time
        self.lateness = lateness
        self.batch_size = batch_size
        self.start = start or FilePosition()
        self.end_marker = end_marker
        self.idle_timeout = idle_timeout
        self.max_files = max_files
        self.poll_interval = poll_interval
        self.read_on = read_on
        self.chunk_rows = chunk_rows
        self.late_files: list[str] = []
        self.files_read = 0
        self._pos = self.start
        self._closed = threading.Event()

    def position(self) -> FilePosition:
        """Where the source stands: what it has handed to the driver (see the module)."""
        return self._pos

    def close(self) -> None:
        """End the input at the next batch boundary (thread-safe)."""
        self._closed.set()

    # -- the iterator ------------------------------------------------------------------------
    def batches(self) -> Iterator[Item]:
        for landed in self.landed():
            if landed is None:
                yield None
                continue
            for item in self._read(*landed):
                yield item
                if self.closed:
                    return

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def mark(self, name: str, row: int) -> None:
        """The position moves to row ``row`` of file ``name`` (what has been handed over)."""
        self._pos = FilePosition(name, row)

    def landed(self) -> Iterator[tuple[str, int] | None]:
        """Each complete file to read, in name order, from the position's file on, as
        ``(name, rows to skip)``; ``None`` while none is there yet. The caller reads a file to
        its end (or stops at ``close()``), moving the position with ``mark``, before it asks
        for the next; the input's end (see the module) ends the iterator."""
        self._pos = self.start
        finished = False  # whether the file of the position is read to its end
        seen: set[str] = set()
        idle_since = time.monotonic()
        next_listing = 0.0
        while not self._closed.is_set():
            now = time.monotonic()
            if now < next_listing:
                yield None
                continue
            next_listing = now + self.poll_interval
            # The marker is looked for before listing: every file renamed into place before
            # the marker was written is in the listing that follows.
            marked = self.end_marker is not None and (self.path / self.end_marker).exists()
            names = self._complete_files()
            late = [n for n in names if n not in seen and (
                n < self._pos.file or (n == self._pos.file and finished)) and seen]
            for n in late:
                log.warning("file %s landed after files that sort after it were read: it is "
                            "not read (name files so that they sort in the order written)", n)
                self.late_files.append(n)
            seen.update(names)
            pending = [n for n in names if n > self._pos.file
                       or (n == self._pos.file and not finished)]
            if not pending:
                if marked or (self.idle_timeout is not None
                              and now - idle_since >= self.idle_timeout):
                    return
                yield None
                continue
            for name in pending:
                if self.max_files is not None and self.files_read >= self.max_files:
                    return
                finished = False
                skip = self._pos.row if name == self._pos.file else 0
                self._pos = FilePosition(name, skip)
                yield name, skip
                if self._closed.is_set():
                    return
                finished = True
                self.files_read += 1
            if self.max_files is not None and self.files_read >= self.max_files:
                return
            idle_since = time.monotonic()
            next_listing = 0.0  # more may have landed meanwhile: look again at once

    def _complete_files(self) -> list[str]:
        try:
            entries = list(self.path.iterdir())
        except FileNotFoundError:
            return []
        suffixes = SUFFIXES[self.format]
        return sorted(p.name for p in entries if not p.name.startswith((".", "_"))
                      and p.name.endswith(suffixes) and p.is_file())

    def _advance(self, name: str, rows: int) -> None:
        self._pos = FilePosition(name, self._pos.row + rows)

    def _read(self, name: str, skip: int) -> Iterator[Item]:
        if self.format == "parquet":
            yield from self._read_parquet(name, skip)
        else:
            yield from self._read_json(name, skip)

    # -- Parquet -----------------------------------------------------------------------------
    def _read_parquet(self, name: str, skip: int) -> Iterator[Item]:
        """The file a row group at a time (in slices of ``batch_size``): a group that cannot
        be decoded is one dead letter from its first row, the groups before it handed over
        whole (the rule a source read on the sites follows too)."""
        try:
            pf = pq.ParquetFile(self.path / name)
            have = set(pf.schema_arrow.names)
            groups, skip = _row_groups_from(pf, skip)
            columns = [n for n in self.schema.names if n in have]
            for g in groups:
                table = pf.read_row_group(g, columns=columns)
                batches = (b for big in table.to_batches()
                           for b in _slices(big, self.batch_size))
                yield from self._from_row(name, batches, skip)
                skip = 0
                if self._closed.is_set():
                    return
        except (OSError, pa.ArrowException) as e:
            self._advance(name, 0)
            yield [Malformed({"file": name, "row": self._pos.row},
                             f"file {name}: not readable as Parquet from row {self._pos.row} "
                             f"({type(e).__name__}: {e})")]

    def _from_row(self, name: str, batches: Iterable[pa.RecordBatch], skip: int
                  ) -> Iterator[pa.RecordBatch]:
        """``batches`` of file ``name`` from its row ``skip`` on, each counted into the
        position as it is handed over; none after ``close()``."""
        for b in batches:
            if skip:
                if skip >= b.num_rows:
                    skip -= b.num_rows
                    continue
                b, skip = b.slice(skip), 0
            self._advance(name, b.num_rows)
            yield b
            if self._closed.is_set():
                return

    # -- JSON lines --------------------------------------------------------------------------
    def _read_json(self, name: str, skip: int) -> Iterator[Item]:
        """The fast path (``pyarrow.json``, streamed in blocks, sliced into batches); on a
        conversion error, line by line from the first record not yet handed over."""
        nullable = pa.schema([pa.field(f.name, f.type) for f in self.schema])
        options = pj.ParseOptions(explicit_schema=nullable, unexpected_field_behavior="ignore")
        try:
            reader = pj.open_json(self.path / name, parse_options=options)
            yield from self._from_row(
                name, (b for block in reader for b in _slices(block, self.batch_size)), skip)
            return
        except pa.ArrowInvalid:
            pass  # a line pyarrow cannot convert: go through the lines to find it
        except OSError as e:
            yield [Malformed({"file": name}, f"file {name}: unreadable ({e})")]
            return
        yield from self._read_json_lines(name, self._pos.row)

    def _read_json_lines(self, name: str, skip: int) -> Iterator[Item]:
        # as on the fast path, an absent nullable field is a null, an absent required one is
        # missing (a dead letter)
        optional = [f.name for f in self.schema if f.nullable]
        out: list[dict[str, Any] | Malformed] = []
        record = -1
        with open(self.path / name, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                record += 1
                if record < skip:
                    continue
                try:
                    value = json.loads(line)
                    if not isinstance(value, dict):
                        raise ValueError(f"a JSON {type(value).__name__}, not an object")
                    out.append({**dict.fromkeys(optional), **value})
                except ValueError as e:
                    out.append(Malformed(
                        {"file": name, "line": lineno, "text": line.rstrip("\n")[:TEXT_LIMIT]},
                        f"malformed JSON line: file {name} line {lineno}: {e}"))
                if len(out) >= self.batch_size:
                    self._advance(name, len(out))
                    yield out
                    out = []
                    if self._closed.is_set():
                        return
        if out:
            self._advance(name, len(out))
            yield out


def _row_groups_from(pf: pq.ParquetFile, skip: int) -> tuple[list[int], int]:
    """The row groups holding row ``skip`` onwards, and the rows to skip in the first."""
    meta = pf.metadata
    first = 0
    while first < meta.num_row_groups and skip >= meta.row_group(first).num_rows:
        skip -= meta.row_group(first).num_rows
        first += 1
    return list(range(first, meta.num_row_groups)), skip


def _slices(batch: pa.RecordBatch, size: int) -> Iterator[pa.RecordBatch]:
    for i in range(0, batch.num_rows, size):
        yield batch.slice(i, size)
