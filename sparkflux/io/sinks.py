"""Sinks for the egress output and the dead-letter output.

- ``ParquetSink``: the ordered output as a directory of Parquet part files (``--output PATH``).
- ``CollectSink``: keeps the output in memory (tests, the demo).
- ``NullSink``: counts only (benchmarks).
- ``DeadLetters``: rejected input records with their reasons, as JSON lines.

**``--output`` is readable whatever ends the run, a SIGKILL of the driver included.** A
single Parquet file is readable only once its footer is written, at its close: a driver
killed mid-run left one without a footer, nothing in it readable. So ``ParquetSink`` writes
a directory, as Spark's own writers do (``out/netmon.parquet/``), of part files numbered in
output order::

    part-00000000.parquet   no rows: the columns, so a reader finds them before any row
    part-00000001.parquet   the first rows, in output (SN) order
    ...

Each part is written under a hidden name (``.part-....parquet.tmp``, which Spark and
pyarrow skip, as they skip every name starting with ``.`` or ``_``), synced to disk, and
renamed into place, so a part is there whole or not at all, and a published part is never
written again. A part is published once it holds ``rows_per_file`` rows, once its oldest row
has waited ``flush_interval`` seconds (checked on each write and on the driver's poll, every
0.1 s), and at the end. So after a crash ``pq.read_table(PATH)`` and
``spark.read.parquet(PATH)`` read every row delivered up to about ``flush_interval`` before
it, in output order for pyarrow, which reads the parts in name order (Spark does not keep an
order: sort by ``_sn``, ``_snm``); a hidden leftover of a part being written is removed by the
next run.

A run replaces what an earlier run wrote at ``PATH``: its parts, or the single Parquet file
of a sparkflux before this layout. A directory holding anything else (a name that is neither
a part nor hidden) is refused when the run opens its sinks, before Spark starts: give the
output a path of its own.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Sink
from sparkflux.model.schema import TIMING_COLUMNS
from sparkflux.model.validate import Rejected

PART = re.compile(r"\.?part-\d{8}\.parquet(\.tmp)?")  # a part, or one being written


class ParquetSink(Sink):
    """Writes the output rows (timing columns dropped), in order, as a directory of Parquet
    part files, each published whole: readable after any crash (see the module)."""

    def __init__(self, path: str | Path, *, rows_per_file: int = 1 << 17,
                 flush_interval: float | None = 1.0) -> None:
        if rows_per_file < 1:
            raise ValueError(f"rows_per_file must be >= 1 (got {rows_per_file})")
        if flush_interval is not None and flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0 seconds, or None (got "
                             f"{flush_interval})")
        self.path = Path(path)
        self.rows_per_file = rows_per_file
        self.flush_interval = flush_interval
        self.files_written = 0  # parts published, the one of the columns included
        self._keep: list[str] = []
        self._schema: pa.Schema | None = None
        self._rows: list[pa.RecordBatch] = []
        self._held = 0
        self._unwritten_since: float | None = None
        self._resume_parts: int | None = None  # a restart: the parts its checkpoint kept

    def open(self, schema: pa.Schema) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._keep = [n for n in schema.names if n not in TIMING_COLUMNS]
        self._schema = pa.schema([schema.field(n) for n in self._keep])
        if self._resume_parts is not None and self.path.is_dir():
            for p in self.path.iterdir():  # the dead run's parts after the checkpoint
                m = PART.fullmatch(p.name)
                if m and (p.name.startswith(".") or int(p.name[5:13]) >= self._resume_parts):
                    p.unlink(missing_ok=True)
            self.files_written = self._resume_parts
            return
        self._clear()
        self.path.mkdir(exist_ok=True)
        self._publish()  # no rows: the columns

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._rows.append(batch.select(self._keep))
            self._held += batch.num_rows
            if self._unwritten_since is None:
                self._unwritten_since = time.monotonic()
            if self._held >= self.rows_per_file:
                self._publish()
                return
        self.poll()

    def poll(self) -> None:
        """Publish the rows held once the oldest has waited ``flush_interval``."""
        if (self.flush_interval is not None and self._unwritten_since is not None
                and time.monotonic() - self._unwritten_since >= self.flush_interval):
            self._publish()

    def close(self) -> None:
        if self._rows:
            self._publish()

    def commit(self, cut: int) -> dict[str, Any]:
        """A checkpoint: the rows held published; the parts so far recorded."""
        if self._rows:
            self._publish()
        return {"parts": self.files_written}

    def resume(self, record: dict[str, Any], cut: int) -> None:
        """A restart from a checkpoint: its parts are kept, the dead run's later ones
        removed at ``open``, and the rows after the cut numbered from there."""
        parts = record.get("parts")
        if isinstance(parts, int) and parts >= 1:
            self._resume_parts = parts

    def _clear(self) -> None:
        """Remove what an earlier run wrote at the path; refuse a path holding anything
        else."""
        if self.path.is_file():
            with open(self.path, "rb") as f:
                parquet = f.read(4) == b"PAR1"
            if not parquet:
                raise ValueError(f"output {self.path} is a file, not a Parquet file an earlier "
                                 f"run wrote: the output is a directory of part files; give "
                                 f"it a path of its own")
            self.path.unlink()
            return
        if not self.path.is_dir():
            return
        names = sorted(p.name for p in self.path.iterdir())
        other = [n for n in names if not PART.fullmatch(n) and not n.startswith((".", "_"))]
        if other:
            shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
            raise ValueError(f"output directory {self.path} holds files no run wrote there "
                             f"({shown}): the output replaces an earlier run's parts; give it "
                             f"a path of its own")
        for n in names:
            if PART.fullmatch(n):
                (self.path / n).unlink(missing_ok=True)

    def _publish(self) -> None:
        """The rows held as the next part: written hidden, synced, renamed into place."""
        assert self._schema is not None
        table = pa.Table.from_batches(self._rows, schema=self._schema)
        name = f"part-{self.files_written:08d}.parquet"
        tmp = self.path / f".{name}.tmp"
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / name)
        _sync_directory(self.path)
        self.files_written += 1
        self._rows, self._held, self._unwritten_since = [], 0, None


def _sync_directory(path: Path) -> None:
    """The directory's entries to disk (a rename survives the machine's crash too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CollectSink(Sink):
    """Keeps every output batch in memory."""

    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []
        self.schema: pa.Schema | None = None

    def open(self, schema: pa.Schema) -> None:
        self.schema = schema

    def write(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)

    def table(self) -> pa.Table:
        assert self.schema is not None
        return pa.Table.from_batches(self.batches, schema=self.schema)


class NullSink(Sink):
    """Counts the output rows and keeps none (benchmarks)."""

    def __init__(self) -> None:
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows


class DeadLetters:
    """The dead-letter output: one JSON object per rejected record, with its reason. Each
    call's lines go to the file at once, in one unbuffered write: a crash of the driver
    leaves every line before it whole. A SIGKILL landing inside that write may tear its
    last line (Linux stops a write to a file between pages on a fatal signal): a last line
    without its newline is such a tail, and a restart from a checkpoint cuts it off."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.records: list[Rejected] = []
        self._file: Any = None
        self.bytes = 0  # the file's length: what a checkpoint records
        self._resume: int | None = None

    def commit(self) -> dict[str, Any]:
        """A checkpoint: the lines so far are written (each call writes its own at once)."""
        return {"bytes": self.bytes} if self.path is not None else {"records": len(self.records)}

    def resume(self, record: dict[str, Any]) -> None:
        """A restart from a checkpoint: the file is cut back to its length then (the lines
        of the dead run's records after the cut come again) and added to."""
        if self.path is not None and isinstance(record.get("bytes"), int):
            n = record["bytes"]
            if self.path.exists():
                os.truncate(self.path, min(n, self.path.stat().st_size))
            self._resume, self.bytes = n, n

    def write(self, rejected: list[Rejected]) -> None:
        if self.path is None:
            self.records.extend(rejected)
            return
        if not rejected:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._resume is not None:  # cut back by ``resume``: added to
                self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - see close()
            else:
                self._file = open(self.path, "wb", buffering=0)  # noqa: SIM115 - see close()
        data = "".join(json.dumps({"reason": r.reason, "record": r.record}, default=str) + "\n"
                       for r in rejected).encode()
        view = memoryview(data)
        while view:
            view = view[self._file.write(view):]
        self.bytes += len(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
