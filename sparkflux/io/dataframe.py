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
``DataFramePosition(partition, row)``: every partition before ``partition`` and ``row`` rows of
it handed to the driver; ``start=`` one resumes there, for the same DataFrame (the same plan
and partitioning).

``schema`` defaults to the DataFrame's, as Arrow types; every row is validated against it by
the ingress like any source's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.dataflow.api import Source

MAX_GROUP = 64  # partitions one fetch job reads at most


@dataclass(frozen=True, slots=True)
class DataFramePosition:
    """Every partition before ``partition`` read, and ``row`` rows of ``partition``."""

    partition: int = 0
    row: int = 0


class DataFrameSource(Source):
    """A Spark DataFrame or table, read partition by partition through the driver."""

    task_slots = 1  # the fetch job's, beside the sites' (see ``Source``)

    def __init__(self, data: Any, *, spark: Any = None,
                 order_by: str | Sequence[str] | None = None, schema: pa.Schema | None = None,
                 event_time: str | None = None, lateness: int = 0, batch_size: int = 8192,
                 start: DataFramePosition | None = None, fetch_rows: int = 262_144) -> None:
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
        return (f"DataFrameSource: the Spark job fetching partitions from {part} (of {parts}) "
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

        part, skip = self.start.partition, self.start.row
        group = 1  # partitions per job: grows while they are small (see ``_group``)
        pending = fetch(part, group) if part < parts else None
        try:
            while pending is not None and not self._closed.is_set():
                first, job = pending
                if not job.done():
                    if self._fetching is None or self._fetching[0] != first:
                        self._fetching = (first, parts, time.monotonic())
                    yield None  # a Spark job is fetching partitions: nothing yet
                    continue
                self._fetching = None
                fetched = job.result()  # one list of IPC blobs per partition, in order
                count = sum(_rows(blob) for blobs in fetched for blob in blobs)
                group = _group(group, len(fetched), count, self.fetch_rows)
                after = first + len(fetched)
                pending = fetch(after, group) if after < parts else None
                for blobs in fetched:
                    self._pos = DataFramePosition(part, skip)
                    for blob in blobs:
                        for batch in pa.ipc.open_stream(pa.py_buffer(blob)):
                            for at in range(0, batch.num_rows, self.batch_size):
                                rows = batch.slice(at, self.batch_size)
                                if skip:
                                    if skip >= rows.num_rows:
                                        skip -= rows.num_rows
                                        continue
                                    rows, skip = rows.slice(skip), 0
                                self._pos = DataFramePosition(part,
                                                              self._pos.row + rows.num_rows)
                                yield rows
                                if self._closed.is_set():
                                    return
                    part, skip = part + 1, 0
                    self._pos = DataFramePosition(part, 0)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


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
