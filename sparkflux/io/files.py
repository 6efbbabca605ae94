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

**A file that changes or goes while it is read.** A file is opened once and read through that
open file to its end, never reopened by name. Before each batch is handed over, and at the
file's end, the open file is compared with what it was when it was opened: its size and its
modification time (``fstat``), and at the end its first 4 KiB too (a rewrite within the
filesystem's timestamp granularity).

- *Changed* (truncated, rewritten in place, appended to): the records already handed over
  came from the earlier content, so neither reading on (the rest of the earlier content is
  gone, the new content's records before the position would be skipped) nor reading it again
  (those records twice) is right. The source raises ``FileChanged``, naming the file, what
  changed, how many of its records were handed over and the position to resume from; the run
  stops with it (``the ingress failed: FileChanged: ...``). Nothing is skipped silently.
- *Replaced* (another file renamed onto its name while it was read): the open file is the
  earlier one, read whole, so nothing of it is lost; the new one lands under a name already
  read, which is the rule for a file landing behind the position: it is not read, and is
  logged (a warning) and listed in ``late_files``. (A rerun that lands the same files again
  into a directory being read does exactly this.)
- *Deleted* while it is read: the open file stays readable (POSIX keeps a removed file's data
  while it is open), so the source reads it to its end, logs a warning naming it, and goes on.
  A file deleted between the listing and its opening is one dead letter naming it.

A change after a file was read to its end is not looked for (the source would have to stat
every file it has read, at every listing): a file must not change once it has its name.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeAlias

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
HEAD_BYTES = 4096  # a file's first bytes, compared at its end with those read at its opening
LINE_BLOCK = 1 << 20  # bytes read at a time when going through a JSON file line by line


class FileChanged(RuntimeError):
    """A file changed (truncated, rewritten, appended to) while the source read it (see the
    module): the input stops here rather than skip or mix records."""


class _Opened:
    """A file opened for reading, and what it was at its opening: the one handle every read
    of the file goes through, and the checks that it has not changed (see the module)."""

    def __init__(self, directory: Path, name: str, handle: IO[bytes]) -> None:
        self.path = directory / name
        self.name = name
        self.handle = handle
        self.fd = handle.fileno()
        self.at_open = os.fstat(self.fd)
        self.head = os.pread(self.fd, HEAD_BYTES, 0)

    def check(self, handed: int) -> None:
        """Raise ``FileChanged`` when the open file's size or modification time is not what
        it was at its opening (``handed``: its records handed over so far)."""
        now = os.fstat(self.fd)
        was = self.at_open
        if now.st_size < was.st_size:
            self._changed(f"truncated from {was.st_size:,} to {now.st_size:,} bytes", handed)
        if now.st_size > was.st_size:
            self._changed(f"grown from {was.st_size:,} to {now.st_size:,} bytes", handed)
        if now.st_mtime_ns != was.st_mtime_ns:
            self._changed("rewritten (its size is the same, its modification time is not)",
                          handed)

    def end(self, handed: int) -> bool:
        """At the file's end: the checks, its first bytes against those read at its opening,
        and its name: deleted (a warning; the file was read to its end through the open
        file) or now another file's (a warning; True: the new file is a late one)."""
        self.check(handed)
        if os.pread(self.fd, HEAD_BYTES, 0) != self.head:
            self._changed("rewritten (its first bytes differ from those read at its opening)",
                          handed)
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            log.warning("file %s was deleted while it was read: it was read to its end through "
                        "the open file (%s records); the input goes on", self.path,
                        f"{handed:,}")
            return False
        if (named.st_dev, named.st_ino) != (self.at_open.st_dev, self.at_open.st_ino):
            log.warning("file %s was replaced by another file while it was read: the earlier "
                        "file was read whole through the open file (%s records); the new one "
                        "landed under a name already read and is not read (late_files)",
                        self.path, f"{handed:,}")
            return True
        return False

    def _changed(self, how: str, handed: int) -> None:
        raise FileChanged(
            f"file {self.path} changed while it was read: {how}. {handed:,} of its records "
            f"were handed over, read from its earlier content; the input stops here rather "
            f"than skip records or mix two contents. A file must not change once it has its "
            f"name: write it under a name starting with '.' or '_' and rename it into place. "
            f"To go on, start a source at FilePosition({self.name!r}, {handed}) once the file "
            f"holds what it should, or at the next file")


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
        """The file ``name`` from its record ``skip`` on, through one open file (see the
        module): a file that cannot be opened is one dead letter naming it."""
        try:
            handle = open(self.path / name, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            self._advance(name, 0)
            yield [Malformed({"file": name}, f"file {name}: unreadable ({e})")]
            return
        with handle:
            opened = _Opened(self.path, name, handle)
            if self.format == "parquet":
                yield from self._read_parquet(opened, skip)
            else:
                yield from self._read_json(opened, skip)
            if not self._closed.is_set() and opened.end(self._pos.row):
                self.late_files.append(name)

    # -- Parquet -----------------------------------------------------------------------------
    def _read_parquet(self, opened: _Opened, skip: int) -> Iterator[Item]:
        """The file a row group at a time (in slices of ``batch_size``): a group that cannot
        be decoded is one dead letter from its first row, the groups before it handed over
        whole (the rule a source read on the sites follows too), unless the file changed
        meanwhile (``FileChanged``)."""
        name = opened.name
        try:
            pf = pq.ParquetFile(opened.handle)
            have = set(pf.schema_arrow.names)
            groups, skip = _row_groups_from(pf, skip)
            columns = [n for n in self.schema.names if n in have]
            for g in groups:
                table = pf.read_row_group(g, columns=columns)
                batches = (b for big in table.to_batches()
                           for b in _slices(big, self.batch_size))
                yield from self._from_row(opened, batches, skip)
                skip = 0
                if self._closed.is_set():
                    return
        except (OSError, pa.ArrowException) as e:
            opened.check(self._pos.row)  # damaged, or changed while read
            self._advance(name, 0)
            yield [Malformed({"file": name, "row": self._pos.row},
                             f"file {name}: not readable as Parquet from row {self._pos.row} "
                             f"({type(e).__name__}: {e})")]

    def _from_row(self, opened: _Opened, batches: Iterable[pa.RecordBatch], skip: int
                  ) -> Iterator[pa.RecordBatch]:
        """``batches`` of the file from its row ``skip`` on, each checked against a change
        of the file and counted into the position as it is handed over; none after
        ``close()``."""
        for b in batches:
            if skip:
                if skip >= b.num_rows:
                    skip -= b.num_rows
                    continue
                b, skip = b.slice(skip), 0
            opened.check(self._pos.row)
            self._advance(opened.name, b.num_rows)
            yield b
            if self._closed.is_set():
                return

    # -- JSON lines --------------------------------------------------------------------------
    def _read_json(self, opened: _Opened, skip: int) -> Iterator[Item]:
        """The fast path (``pyarrow.json``, streamed in blocks, sliced into batches); on a
        conversion error, line by line from the first record not yet handed over. Float
        columns are parsed as float64, so that the ingress finds a value beyond a narrower
        float's range (``model/validate.py``) rather than an infinity."""
        parsed = pa.schema([pa.field(f.name, pa.float64() if pa.types.is_floating(f.type)
                                     else f.type) for f in self.schema])
        options = pj.ParseOptions(explicit_schema=parsed, unexpected_field_behavior="ignore")
        try:
            reader = pj.open_json(opened.handle, parse_options=options)
            yield from self._from_row(
                opened, (b for block in reader for b in _slices(block, self.batch_size)), skip)
            return
        except pa.ArrowInvalid:
            pass  # a line pyarrow cannot convert: go through the lines to find it
        except OSError as e:
            opened.check(self._pos.row)
            yield [Malformed({"file": opened.name}, f"file {opened.name}: unreadable ({e})")]
            return
        opened.check(self._pos.row)
        yield from self._read_json_lines(opened, self._pos.row)

    def _read_json_lines(self, opened: _Opened, skip: int) -> Iterator[Item]:
        # as on the fast path, an absent nullable field is a null, an absent required one is
        # missing (a dead letter)
        name = opened.name
        optional = [f.name for f in self.schema if f.nullable]
        out: list[dict[str, Any] | Malformed] = []
        record = -1
        for lineno, raw in enumerate(_lines(opened.fd), start=1):
            line = raw.decode("utf-8", errors="replace")
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
                    {"file": name, "line": lineno, "text": line.rstrip("\r")[:TEXT_LIMIT]},
                    f"malformed JSON line: file {name} line {lineno}: {e}"))
            if len(out) >= self.batch_size:
                opened.check(self._pos.row)
                self._advance(name, len(out))
                yield out
                out = []
                if self._closed.is_set():
                    return
        if out:
            opened.check(self._pos.row)
            self._advance(name, len(out))
            yield out


def _lines(fd: int) -> Iterator[bytes]:
    """The lines of the open file ``fd`` from its start, without their ``\\n``, read at
    explicit offsets (``pread``): nothing else's reads of the file move them."""
    offset, rest = 0, b""
    while block := os.pread(fd, LINE_BLOCK, offset):
        offset += len(block)
        *lines, rest = (rest + block).split(b"\n")
        yield from lines
    if rest:
        yield rest


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
