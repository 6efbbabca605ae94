"""The output as a directory of Parquet part files that Spark reads while the dataflow runs
(``spark.read.parquet(path)``), written so that a rewrite replaces rather than adds.

**Files are named by fixed sequence-number ranges.** The egress delivers the output exactly
once and in SN order, and a rerun over the same input delivers the same rows with the same
SNs (the ingress numbers the input in one order; every replica and rerun computes the same
output from it). So the sink cuts the output at fixed multiples of ``sn_span``: range ``b``
holds the rows with ``b * sn_span <= _sn < (b + 1) * sn_span``, in files numbered from 0::

    part-<first SN of the range>-<end SN of the range, exclusive>-<file in the range>.parquet

(each number zero-padded, so names sort in output order). A file ends when it holds
``rows_per_file`` rows, when the output passes its range, at the end of the run, or, with
``flush_interval``, once its oldest row has waited that long, checked on every write and on
the driver's poll (``Sink.poll``, every 0.1 s) whether or not more rows come: a window's rows
are readable about ``flush_interval`` after the window closes, even when nothing follows.
A directory records the settings in ``_sparkflux_table.json``; a sink with other settings
for it is refused.

**Readers never see half a file, nor a file change.** Each file is written under a hidden
temporary name (``.part-...parquet.tmp``, which Spark's and pyarrow's readers skip, as they
skip every name starting with ``.`` or ``_``) and renamed into place, atomically, and within a
run a published file is never written again: Spark lists a directory's files with their
sizes and reads each footer at that size later, so a file replaced in between cannot be read
(``CANNOT_READ_FILE_FOOTER``). Memory: at most ``rows_per_file`` rows.

**What a rewrite leaves.** A run that writes the same output into the same directory again
(a rerun from the start after a crash) writes each range's files afresh, replacing files of
the same name, and when its output passes a range it removes that range's files numbered
beyond its own (the earlier run may have cut the range into more files: ``flush_interval``
depends on timing). Once the rewrite has passed a range, that range holds exactly its rows,
once each, and at the end the whole table does (``tests/unit/io/test_table_sink.py`` writes,
"crashes" halfway, rewrites from the start); meanwhile a range being rewritten may show rows
of both runs. A run over *different* input (other files, another start position) numbers its
output from SN 0 again, so its ranges would replace the earlier run's: give it a directory
of its own.

Columns: the sink's user columns, and ``_sn`` and ``_snm`` unless ``sequence_columns`` is
False (they let a reader order the rows as the output did); the timing columns (``_t0``,
``_part``) never.

**Update mode.** ``TableSink(path, mode="update", key=[...])`` keeps the latest row of every
key instead, compacted into one snapshot file that is replaced whole at each publish (a
running count per user reads as one row per user): ``io/table_update.py``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Sink
from sparkflux.io.table_update import SnapshotTable
from sparkflux.model.schema import SN, SNM, TIMING_COLUMNS

log = logging.getLogger(__name__)

META = "_sparkflux_table.json"
DIGITS = 19  # int64's decimal digits: every SN fits, and names sort by number
MODES = ("append", "update")


class TableSink(Sink):
    """The output as a Parquet table that ``spark.read.parquet(path)`` reads while the
    dataflow runs.

    ``mode="append"`` (the default): every output row, in part files named by output SN
    range (``sn_span``, ``rows_per_file``; see the module). ``mode="update"`` with
    ``key=[columns]``: the latest row of every key, one snapshot file replaced whole at each
    publish, a superseded one kept ``retain_superseded`` seconds for readers that listed it
    (``io/table_update.py``). Either publishes what it holds once its oldest row has waited
    ``flush_interval`` seconds (None: only when a file fills, and at the end), and at the
    end. ``sequence_columns``: write ``_sn`` and ``_snm`` beside the user columns."""

    def __init__(self, path: str | Path, *, mode: str = "append",
                 key: Sequence[str] | None = None, sn_span: int = 1 << 16,
                 rows_per_file: int = 1 << 16, flush_interval: float | None = 1.0,
                 sequence_columns: bool = True, retain_superseded: float = 30.0) -> None:
        if mode not in MODES:
            raise ValueError(f"TableSink mode={mode!r}: give mode='append' (every row) or "
                             f"mode='update' with key=[...] (the latest row of every key)")
        if mode == "update":
            if isinstance(key, str) or not key or not all(isinstance(k, str) for k in key):
                example = [key] if isinstance(key, str) else ["user"]
                raise ValueError(f"TableSink mode='update' keeps the latest row of every key: "
                                 f"give key= a list of column names, e.g. key={example!r} "
                                 f"(got {key!r})")
            if retain_superseded < 0:
                raise ValueError(f"retain_superseded must be >= 0 seconds (got "
                                 f"{retain_superseded})")
        elif key is not None:
            raise ValueError(f"TableSink key={key!r} is for mode='update' (the latest row of "
                             f"every key); mode='append' writes every row: drop key=, or add "
                             f"mode='update'")
        if sn_span < 1 or rows_per_file < 1:
            raise ValueError(f"sn_span and rows_per_file must be >= 1 (got {sn_span}, "
                             f"{rows_per_file})")
        if flush_interval is not None and flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0 seconds, or None (got "
                             f"{flush_interval})")
        self.path = Path(path)
        self.mode = mode
        self.key = list(key) if key is not None else None
        self.sn_span = sn_span
        self.rows_per_file = rows_per_file
        self.flush_interval = flush_interval
        self.sequence_columns = sequence_columns
        self._files_written = 0
        self._update = (SnapshotTable(self.path, list(key), flush_interval, retain_superseded)
                        if mode == "update" and key is not None else None)
        self._check_settings()
        self._keep: list[str] = []
        self._schema: pa.Schema | None = None
        self._range = -1  # the SN range being filled
        self._file = 0  # its file being filled
        self._rows: list[pa.RecordBatch] = []
        self._held = 0  # rows of that file
        self._unwritten_since: float | None = None  # when its oldest unwritten row came

    @property
    def files_written(self) -> int:
        """Files published by this sink: part files, or snapshots in update mode."""
        return self._update.files_written if self._update else self._files_written

    def _settings(self) -> dict[str, object]:
        if self._update is not None:
            return {"mode": "update", "key": self.key}
        return {"sn_span": self.sn_span, "rows_per_file": self.rows_per_file}

    def _check_settings(self) -> None:
        meta = self.path / META
        if not meta.exists():
            return
        before = json.loads(meta.read_text())
        was = before.get("mode", "append")  # tables written before update mode: append
        if was != self.mode:
            keyed = f", key={before.get('key')}" if was == "update" else ""
            raise ValueError(
                f"table {self.path} was written in mode={was!r}{keyed}: a sink in "
                f"mode={self.mode!r} would mix rows of both kinds; use a new directory")
        if {k: before.get(k) for k in self._settings()} == self._settings():
            return
        if self._update is not None:
            raise ValueError(
                f"table {self.path} keeps the latest row per key={before.get('key')}: a sink "
                f"with key={self.key} would fold other rows together; use the same key, or a "
                f"new directory")
        raise ValueError(
            f"table {self.path} was written with sn_span={before.get('sn_span')}, "
            f"rows_per_file={before.get('rows_per_file')}: a sink with other settings "
            f"would cut other files and add to its rows instead of replacing them; use "
            f"the same settings, or a new directory")

    def open(self, schema: pa.Schema) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in self.path.glob(".part-*.parquet.tmp"):  # a crashed writer's
            stale.unlink(missing_ok=True)
        drop = set(TIMING_COLUMNS) | (set() if self.sequence_columns else {SN, SNM})
        self._keep = [n for n in schema.names if n not in drop]
        self._schema = pa.schema([schema.field(n) for n in self._keep])
        if self._update is not None:  # checks the key against the columns first
            self._update.open(self._schema)
        self._replace(self.path / META, json.dumps(self._settings()).encode())

    def write(self, batch: pa.RecordBatch) -> None:
        if self._update is not None:
            self._update.write(batch)
            return
        if not batch.num_rows:
            return
        ranges = batch.column(SN).to_numpy() // self.sn_span
        cuts = np.flatnonzero(ranges[1:] != ranges[:-1]) + 1  # the output is in SN order
        for lo, hi in zip([0, *cuts], [*cuts, batch.num_rows], strict=True):
            self._add(int(ranges[lo]), batch.slice(lo, hi - lo).select(self._keep))
        self.poll()

    def poll(self) -> None:
        """Publish the file being filled once its oldest row has waited ``flush_interval``."""
        if self._update is not None:
            self._update.poll()
            return
        if (self.flush_interval is not None and self._unwritten_since is not None
                and time.monotonic() - self._unwritten_since >= self.flush_interval):
            self._write_file()

    def close(self) -> None:
        if self._update is not None:
            self._update.close()
            return
        self._end_range()

    def commit(self, cut: int) -> dict[str, object]:
        """A checkpoint at input SN ``cut``: the rows held are published, and the file the
        rows after the cut start is recorded (their range and its file number)."""
        if self._update is not None:
            self._update.commit()
            return {}
        if self._unwritten_since is not None:
            self._write_file()
        return {"range": self._range, "file": self._file}

    def resume(self, record: dict[str, object], cut: int) -> None:
        """A restart from a checkpoint: the rows after its cut go on in the range and file
        it recorded, replacing the files the dead run wrote after it (``_end_range`` removes
        any left beyond what the rewrite writes, as a rewrite from the start does)."""
        if self._update is not None or "range" not in record:
            return  # update mode skips the rows its newest snapshot has folded in
        rng, file = record["range"], record["file"]
        assert isinstance(rng, int) and isinstance(file, int)
        self._range, self._file = rng, file

    def _add(self, rng: int, rows: pa.RecordBatch) -> None:
        if rng != self._range:
            self._end_range()  # the output has passed that range
            self._range, self._file, self._rows, self._held = rng, 0, [], 0
        while rows.num_rows:
            take = rows.slice(0, self.rows_per_file - self._held)
            rows = rows.slice(take.num_rows)
            self._rows.append(take)
            self._held += take.num_rows
            if self._unwritten_since is None:
                self._unwritten_since = time.monotonic()
            if self._held == self.rows_per_file:
                self._write_file()

    def _prefix(self, rng: int) -> str:
        lo = rng * self.sn_span
        return f"part-{lo:0{DIGITS}d}-{lo + self.sn_span:0{DIGITS}d}-"

    def _write_file(self) -> None:
        """Publish the file being filled under its final name; the next rows start the next
        file of the range (a published file is not written again in this run)."""
        assert self._schema is not None
        name = f"{self._prefix(self._range)}{self._file:04d}.parquet"
        table = pa.Table.from_batches(self._rows, schema=self._schema)
        tmp = self.path / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / name)
        self._files_written += 1
        self._file, self._rows, self._held = self._file + 1, [], 0
        self._unwritten_since = None

    def _end_range(self) -> None:
        """The range is done: its last file published, and files of an earlier run's that
        cut it into more files removed."""
        if self._range < 0:
            return
        if self._unwritten_since is not None:
            self._write_file()
        prefix = self._prefix(self._range)
        for old in self.path.glob(f"{prefix}*.parquet"):
            index = old.name[len(prefix):-len(".parquet")]
            if index.isdigit() and int(index) >= self._file:
                old.unlink(missing_ok=True)

    def _replace(self, target: Path, data: bytes) -> None:
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
