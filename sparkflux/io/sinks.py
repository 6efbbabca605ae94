"""Sinks for the egress output and the dead-letter output.

- ``ParquetSink``: the ordered output to a Parquet file (``--output PATH``).
- ``CollectSink``: keeps the output in memory (tests, the demo).
- ``NullSink``: counts only (benchmarks).
- ``DeadLetters``: rejected input records with their reasons, as JSON lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Sink
from sparkflux.model.schema import TIMING_COLUMNS
from sparkflux.model.validate import Rejected


class ParquetSink(Sink):
    """Writes the output rows (timing columns dropped) to one Parquet file, in order."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writer: pq.ParquetWriter | None = None
        self._keep: list[str] = []

    def open(self, schema: pa.Schema) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._keep = [n for n in schema.names if n not in TIMING_COLUMNS]
        out = pa.schema([schema.field(n) for n in self._keep])
        self._writer = pq.ParquetWriter(self.path, out)

    def write(self, batch: pa.RecordBatch) -> None:
        assert self._writer is not None
        self._writer.write_batch(batch.select(self._keep))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


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
    """The dead-letter output: one JSON object per rejected record, with its reason."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.records: list[Rejected] = []
        self._file: Any = None

    def write(self, rejected: list[Rejected]) -> None:
        if self.path is None:
            self.records.extend(rejected)
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w")  # noqa: SIM115 - closed in close()
        for r in rejected:
            self._file.write(json.dumps({"reason": r.reason, "record": r.record}, default=str))
            self._file.write("\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
