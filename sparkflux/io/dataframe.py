"""A Spark DataFrame (or table) as a bounded source, read through the driver.

The ingress runs in the driver, so every row of the DataFrame travels to the driver and from
there to the sites: this source suits tables that fit the driver's bandwidth (a reference
table, a replay of a recorded stream, a test), not a large table Spark could scan in
parallel. It reads the partitions in order, several to a Spark job: each job turns its
partitions into Arrow batches on an executor (``mapInArrow``) and brings them to the driver,
where they are handed to the ingress in slices of ``batch_size`` rows. A job costs its
latency however little it reads, so the group starts at one partition and grows (at most
doubling, up to 64) to about ``fetch_rows`` rows at the rows per partition seen so far. The
next group is fetched in a background thread while the current one is handed over, and
while a fetch runs the source says "nothing yet" (it yields ``None``), so the driver's event
loop is never blocked by a Spark job. Memory: about two groups (``fetch_rows`` rows each, or
two partitions where a partition is larger: ``repartition`` a DataFrame whose partitions
are large). The jobs need a free task slot beside the sites' tasks (``task_slots``): a
session without one is refused at the start, and a fetch that does not finish within
``--stall-timeout`` is reported (``waiting_for``).

**Order and position.** Rows come in partition order, then in each partition's own order.
With ``order_by`` the DataFrame is sorted first (``orderBy``: range-partitioned, so partition
order is the sort order), which makes the order the same in every run as long as the sort
keys are unique. Without it the order is whatever the DataFrame's partitioning gives: the same
for the same files and plan, but say ``order_by`` when it matters. ``position()`` is
``DataFramePosition(partition, row, offset)``: every partition before ``partition`` and
``row`` rows of it handed over, ``offset`` rows in all. ``start=`` one taken from a run
resumes at its ``offset`` in the source's order: the rows of this run's partitions are
counted on the executors, a group of partitions per job, up to the offset, because Spark cuts
an ordered DataFrame's partitions afresh for every new source (it samples the range bounds
anew), so ``(partition, row)`` would name other rows. A position made by hand without an
offset resumes at its partition and row.

``schema`` defaults to the DataFrame's, as Arrow types; every row is validated against it by
the ingress like any source's.

**Read on the sites** (``read_on="sites"``): the rows never reach the driver. The same jobs,
grouped the same way, write each partition on its executor as one Parquet file,
``part-<partition>-<task attempt>.parquet`` under a directory of ``staging`` made for the
run, and bring the driver its row count and file name alone; the driver deals the files in
chunks to a reader stage on the sites, as for a file source read there (``io/chunks.py``).
Another attempt of a task (a retry, a lost executor's task still running) writes a file of
its own, which is never dealt. ``staging`` must be readable
and writable at the same path by the driver and every executor (a shared file system);
in local mode it defaults to a temporary directory. The staged copy is left there when the
run ends (the sites may read it to the last row): remove it then. ``position()`` and
``start=`` are the same as through the driver.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Source
from sparkflux.io.site_read import SiteReadable

MAX_GROUP = 64  # partitions one fetch job reads at most


@dataclass(frozen=True, slots=True)
class DataFramePosition:
    """Every partition before ``partition`` read, and ``row`` rows of ``partition``; and
    ``offset``, the rows handed over in all (None: not known, as after a start given by
    partition and row alone: the rows before it were never counted). A source resumes by
    ``offset`` when it is set: the partitions of an ordered DataFrame are cut afresh in
    every run (Spark samples the range bounds anew), so only the offset names the same
    rows in the next run."""

    partition: int = 0
    row: int = 0
    offset: int | None = None


class DataFrameSource(SiteReadable, Source):
    """A Spark DataFrame or table, read partition by partition: through the driver, or
    written on the executors for the sites to read (``read_on="sites"``; see the module)."""

    task_slots = 1  # the fetch job's, beside the sites' (see ``Source``)

    def __init__(self, data: Any, *, spark: Any = None,
                 order_by: str | Sequence[str] | None = None, schema: pa.Schema | None = None,
                 event_time: str | None = None, lateness: int = 0, batch_size: int = 8192,
                 start: DataFramePosition | None = None, fetch_rows: int = 262_144,
                 read_on: str = "driver", staging: str | Path | None = None,
                 chunk_rows: int = 65_536) -> None:
        from sparkflux.io.chunks import MAX_CHUNK_ROWS

        if read_on not in ("driver", "sites"):
            raise ValueError(f"read_on must be 'driver' or 'sites' (got {read_on!r})")
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise ValueError(f"chunk_rows must be between 1 and {MAX_CHUNK_ROWS} "
                             f"(got {chunk_rows})")
        if isinstance(data, str):
            from pyspark.sql import SparkSession

            session = spark or SparkSession.getActiveSession()
            if session is None:
                raise ValueError(f"DataFrameSource({data!r}) reads a table: pass spark=")
            data = session.table(data)
        if order_by:
            data = data.orderBy(*([order_by] if isinstance(order_by, str) else order_by))
        if schema is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(data.schema)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        if read_on == "sites" and staging is None:
            if not data.sparkSession.sparkContext.master.startswith("local"):
                raise ValueError("DataFrameSource(read_on='sites') on a cluster needs staging=: "
                                 "a directory the driver and every executor can read and "
                                 "write at the same path (a shared file system)")
            staging = tempfile.mkdtemp(prefix="sparkflux-staging-")
        self.read_on = read_on
        self.staging = None if staging is None else Path(staging)
        self.chunk_rows = chunk_rows
        self.path = Path()  # read on the sites: the run's directory of staged partitions
        self.df = data
        self.schema = schema
        self.event_time = event_time
        self.lateness = lateness
        self.batch_size = batch_size
        self.fetch_rows = fetch_rows
        self.start = start or DataFramePosition()
        self._pos = self.start
        self._closed = threading.Event()
        self._fetching: tuple[int, int, float] | None = None  # (partition, of, since)
        self._bases: dict[str, int] = {}  # read on the sites: rows before each staged file
        # offsets are known from the very beginning or from a start that names one
        self._counted = self.start.offset is not None or (self.start.partition,
                                                          self.start.row) == (0, 0)

    def position(self) -> DataFramePosition:
        """Where the source stands: what it has handed to the driver (see the module)."""
        return self._pos

    def close(self) -> None:
        """End the input at the next batch boundary (thread-safe)."""
        self._closed.set()

    def waiting_for(self) -> str | None:
        fetching = self._fetching
        if fetching is None:
            return None
        part, parts, since = fetching
        doing = "writing" if self.read_on == "sites" else "fetching"
        return (f"DataFrameSource: the Spark job {doing} partitions from {part} (of {parts}) "
                f"has not finished after {time.monotonic() - since:.0f} s (it needs a free "
                f"task slot beside the sites'; see the Spark UI or log)")

    def batches(self) -> Iterator[pa.RecordBatch | None]:
        ipc = self.df.mapInArrow(_to_ipc, "ipc binary").rdd
        context = self.df.sparkSession.sparkContext
        parts = ipc.getNumPartitions()
        pool = ThreadPoolExecutor(1, thread_name_prefix="sparkflux-dataframe-source")

        def fetch(first: int, count: int) -> tuple[int, Future[list[list[bytes]]]]:
            group = list(range(first, min(first + count, parts)))
            return first, pool.submit(context.runJob, ipc, _collect, group)

        try:
            part, skip, base = yield from self._resume(ipc, parts, pool)
            group = 1  # partitions per job: grows while they are small (see ``_group``)
            pending = fetch(part, group) if part < parts else None
            while pending is not None and not self._closed.is_set():
                first, job = pending
                if not job.done():
                    self._waiting(first, parts)
                    yield None  # a Spark job is fetching partitions: nothing yet
                    continue
                self._fetching = None
                fetched = job.result()  # one list of IPC blobs per partition, in order
                count = sum(_rows(blob) for blobs in fetched for blob in blobs)
                group = _group(group, len(fetched), count, self.fetch_rows)
                after = first + len(fetched)
                pending = fetch(after, group) if after < parts else None
                for blobs in fetched:
                    self._at(part, skip, base)
                    total = 0
                    for blob in blobs:
                        for batch in pa.ipc.open_stream(pa.py_buffer(blob)):
                            total += batch.num_rows
                            for at in range(0, batch.num_rows, self.batch_size):
                                rows = batch.slice(at, self.batch_size)
                                if skip:
                                    if skip >= rows.num_rows:
                                        skip -= rows.num_rows
                                        continue
                                    rows, skip = rows.slice(skip), 0
                                self._at(part, self._pos.row + rows.num_rows, base)
                                yield rows
                                if self._closed.is_set():
                                    return
                    part, skip, base = part + 1, 0, base + total
                    self._at(part, 0, base)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _at(self, partition: int, row: int, base: int) -> None:
        """The position: ``row`` rows of ``partition``, after ``base`` rows before it."""
        self._pos = DataFramePosition(partition, row,
                                      base + row if self._counted else None)

    def _waiting(self, first: int, parts: int) -> None:
        if self._fetching is None or self._fetching[0] != first:
            self._fetching = (first, parts, time.monotonic())

    def _resume(self, ipc: Any, parts: int, pool: ThreadPoolExecutor
                ) -> Generator[None, None, tuple[int, int, int]]:
        """Where to start in this run's partitions: ``(partition, rows to skip in it, rows
        before it)``. From ``start.offset``: the partitions' rows are counted on the
        executors, group by group, until the offset falls in one (yielding ``None`` while a
        count job runs); from ``start`` without one: its partition and row."""
        start = self.start
        if start.offset is None:
            return start.partition, start.row, 0
        context = self.df.sparkSession.sparkContext
        part, base, group = 0, 0, 1
        while part < parts:
            job = pool.submit(context.runJob, ipc, _count,
                              list(range(part, min(part + group, parts))))
            while not job.done():
                self._waiting(part, parts)
                yield None
            self._fetching = None
            counts = job.result()
            for n in counts:
                if base + n > start.offset:
                    return part, start.offset - base, base
                part, base = part + 1, base + n
            group = _group(group, len(counts), sum(counts), self.fetch_rows)
        return parts, 0, base

    # -- read on the sites: partitions written on the executors --------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def mark(self, name: str, row: int) -> None:
        """The position moves to row ``row`` of the partition staged as ``name``."""
        self._at(int(name.split("-")[1]), row, self._bases.get(name, 0))

    def landed(self) -> Iterator[tuple[str, int] | None]:
        """``read_on="sites"``: each partition from the start position on, once a Spark job
        has written it under ``path`` (see the module), as ``(file name, rows to skip)``;
        ``None`` while a job runs. Empty partitions are skipped."""
        assert self.staging is not None
        self.path = self.staging / f"dataframe-{uuid.uuid4().hex[:12]}"
        self.path.mkdir(parents=True)
        ipc = self.df.mapInArrow(_to_ipc, "ipc binary").rdd
        written = ipc.mapPartitionsWithIndex(partial(_write_partition, str(self.path)))
        context = self.df.sparkSession.sparkContext
        parts = ipc.getNumPartitions()
        pool = ThreadPoolExecutor(1, thread_name_prefix="sparkflux-dataframe-stage")

        def write(first: int, count: int) -> tuple[int, Future[list[tuple[int, str]]]]:
            group = list(range(first, min(first + count, parts)))
            return first, pool.submit(context.runJob, written, _first, group)

        try:
            part, skip, base = yield from self._resume(ipc, parts, pool)
            self._at(part, skip, base)
            group = 1
            pending = write(part, group) if part < parts else None
            while pending is not None and not self._closed.is_set():
                first, job = pending
                if not job.done():
                    self._waiting(first, parts)
                    yield None  # a Spark job is writing partitions: nothing yet
                    continue
                self._fetching = None
                staged = job.result()  # (rows, file) of each partition written, in order
                group = _group(group, len(staged), sum(n for n, _ in staged), self.fetch_rows)
                after = first + len(staged)
                pending = write(after, group) if after < parts else None
                for rows, name in staged:
                    self._bases[name] = base
                    if rows > skip:
                        self._at(part, skip, base)
                        yield name, skip
                        if self._closed.is_set():
                            return
                    part, skip, base = part + 1, 0, base + rows
                    self._at(part, 0, base)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def _write_partition(directory: str, partition: int, rows: Iterator[Any]
                     ) -> Iterator[tuple[int, str]]:
    """On an executor: the partition's IPC blobs written as one Parquet file, its name the
    partition's and the task attempt's (written under a hidden name, then renamed: complete
    once it has its name); yields its row count and name. Another attempt of the same
    partition (a retry, a lost executor's task still running) writes a file of its own,
    which is never dealt: only the name the job returns is."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else 0
    name = f"part-{partition:05d}-{attempt}.parquet"
    tmp = os.path.join(directory, f".{name}.tmp")
    writer = None
    count = 0
    try:
        for r in rows:
            for batch in pa.ipc.open_stream(pa.py_buffer(bytes(r[0]))):
                if writer is None:
                    writer = pq.ParquetWriter(tmp, batch.schema)
                writer.write_batch(batch)
                count += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is not None and count:
        os.replace(tmp, os.path.join(directory, name))
    elif writer is not None:
        os.remove(tmp)
    yield count, name


def _count(rows: Iterator[Any]) -> list[int]:
    """One partition's row count (its IPC blobs' headers) as one item of the job's result."""
    return [sum(_rows(bytes(r[0])) for r in rows)]


def _first(results: Iterator[tuple[int, str]]) -> list[tuple[int, str]]:
    """One partition's (rows, file name) as one item of the job's result."""
    return [next(results)]


def _group(group: int, fetched: int, rows: int, target: int) -> int:
    """Partitions for the next job: as many as hold about ``target`` rows at the last job's
    rows per partition (a job per small partition would cost a job's latency each), between
    1 and ``MAX_GROUP``, at most doubling from one job to the next."""
    per = rows / max(fetched, 1)
    want = int(target / per) if per > 0 else 2 * group
    return max(1, min(MAX_GROUP, 2 * group, want))


def _rows(blob: bytes) -> int:
    """The rows of one IPC stream blob (its batches' headers only)."""
    return sum(b.num_rows for b in pa.ipc.open_stream(pa.py_buffer(blob)))


def _to_ipc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """On an executor: each Arrow batch of the partition as one row of IPC bytes."""
    for b in batches:
        out = pa.BufferOutputStream()
        with pa.ipc.new_stream(out, b.schema) as writer:
            writer.write_batch(b)
        yield pa.RecordBatch.from_arrays([pa.array([out.getvalue().to_pybytes()], pa.binary())],
                                         names=["ipc"])


def _collect(rows: Iterator[Any]) -> list[list[bytes]]:
    """One partition's blobs as one item, so a job over several keeps them apart."""
    return [[bytes(r[0]) for r in rows]]
