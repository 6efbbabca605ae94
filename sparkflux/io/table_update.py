"""``TableSink(path, mode="update", key=[...])``: the latest row of every key, kept compacted
in one snapshot file, so that ``spark.read.parquet(path)`` returns one row per key (a running
count per user: one row per user, not one per click).

**Publishing.** The sink folds the output into a table of one row per key in memory (the
row that came last in SN order wins) and publishes that table whole, as a new snapshot file
``snapshot-<n>.parquet`` (``n`` counting the publishes of the table, never reused), once the
oldest row not yet published has waited ``flush_interval`` (on a write or on the driver's
poll, ``Sink.poll``, every 0.1 s), and at the end. Memory and the cost of a publish grow with
the number of keys, never with the rows: meant for aggregates of up to some millions of keys
(with more, give ``flush_interval`` seconds more).

**Readers see one snapshot, whole.** Spark reads a Parquet directory that holds a
``_spark_metadata`` folder through it instead of listing the directory: that folder is the
log Spark Structured Streaming's own file sink keeps, and ``spark.read.parquet(path)`` reads
exactly the files its newest entry names. Each publish writes its snapshot under a hidden
name, renames it into place, then commits it with one new log entry
(``_spark_metadata/<n>.compact``, itself written hidden and renamed): a Spark reader sees the
previous snapshot or the new one, never both, never half of one. A superseded snapshot stays
``retain_superseded`` seconds (30) for the readers that listed it before the switch (Spark
reads each file's footer at the size the log gave, so a file must not change or vanish under
a reader), then it and its log entry are removed; at the end every superseded snapshot is
removed, and the directory holds exactly the final one, for any Parquet reader. While the
run goes on, a reader that lists the directory itself instead of following the log
(``pyarrow``, ``pandas``) sees the snapshots kept for Spark's readers too: read
``snapshot_file(path)`` instead, the one the newest log entry names.

**Exactly once, and a restart.** The egress delivers the output exactly once and in SN order,
and a rerun over the same input delivers the same rows with the same SNs. Each snapshot
records the last ``(_sn, _snm)`` it folded in (the file's metadata). A sink opened on a table
that has snapshots loads the newest committed one and skips the rows up to that mark: a rerun
from the start after a crash goes on from the state the table shows, so a reader never sees
the table go back, and every row is folded in once. What a crash leaves half done is
finished or undone at the next open: hidden temporary files are removed, and so is a snapshot
renamed into place but never committed to the log. As with the append table, a run over
*other* input numbers its output from 0 again: give it a directory of its own.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sparkflux.model.schema import SN, SNM

LOG = "_spark_metadata"  # Spark's file-sink log: spark.read.parquet reads what it names
LOG_VERSION = "v1"
LOG_ENTRY = re.compile(r"^(\d+)\.compact$")
SNAPSHOT = re.compile(r"^snapshot-(\d+)\.parquet$")
MARK_SN, MARK_SNM = b"sparkflux.last_sn", b"sparkflux.last_snm"
FOLD_ROWS = 1 << 16  # fold the held rows into the table once this many (and the table's size)
ROW = "__row"  # the row index column of latest_per_key (user columns never start with "_")


def snapshot_name(n: int) -> str:
    return f"snapshot-{n:019d}.parquet"


def log_entries(path: Path) -> list[int]:
    """The committed snapshots' numbers, ascending (the log entries present)."""
    log = path / LOG
    if not log.is_dir():
        return []
    found = []
    for p in log.iterdir():
        m = LOG_ENTRY.match(p.name)
        if m:
            found.append(int(m.group(1)))
        elif not p.name.startswith("."):
            raise ValueError(f"{log} holds {p.name!r}, which TableSink(mode='update') does not "
                             f"write: the directory is another writer's (a Spark file sink's?); "
                             f"give the sink a directory of its own")
    return sorted(found)


def snapshot_file(path: str | Path) -> Path | None:
    """The snapshot a reader should read now: the file the newest log entry names (None
    before the first publish). A reader that lists the directory itself may meanwhile see
    superseded snapshots kept for Spark's readers (see the module)."""
    entries = log_entries(Path(path))
    if not entries:
        return None
    text = (Path(path) / LOG / f"{entries[-1]}.compact").read_text().splitlines()
    return Path(unquote(urlparse(json.loads(text[1])["path"]).path))


def latest_per_key(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last row of every key (rows in SN order: the newest), ordered by the key."""
    if table.num_rows == 0:
        return table
    rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
    last = (table.select(list(key)).append_column(ROW, rows)
            .group_by(list(key), use_threads=False).aggregate([(ROW, "max")]))
    order = pc.sort_indices(last, sort_keys=[(k, "ascending") for k in key])
    return table.take(last.column(f"{ROW}_max").take(order))


def _replace(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


class SnapshotTable:
    """The update mode's writer (``TableSink`` delegates to it; see the module)."""

    def __init__(self, path: Path, key: Sequence[str], flush_interval: float | None,
                 retain_superseded: float) -> None:
        self.path = path
        self.key = list(key)
        self.flush_interval = flush_interval
        self.retain_superseded = retain_superseded
        self.files_written = 0
        self._schema: pa.Schema | None = None
        self._state: pa.Table | None = None  # one row per key: the published and folded rows
        self._pending: list[pa.RecordBatch] = []  # rows after those, not yet folded in
        self._held = 0  # their rows
        self._last: tuple[int, int] | None = None  # (_sn, _snm) of the last row taken
        self._folded: tuple[int, int] | None = None  # ... of the last row in _state
        self._skip: tuple[int, int] | None = None  # a reopened table's mark: rows up to it
        self._latest = -1  # the newest committed snapshot's number
        self._superseded: list[tuple[int, float]] = []  # (number, when superseded), oldest first
        self._unpublished_since: float | None = None  # when the oldest unpublished row came

    def open(self, schema: pa.Schema) -> None:
        """Take the output's columns (``schema``: what the sink writes); load the newest
        committed snapshot, if any, and finish or undo what a crashed writer left."""
        names = schema.names
        missing = [k for k in self.key if k not in names]
        if missing:
            user = ", ".join(n for n in names if n not in (SN, SNM))
            raise ValueError(
                f"TableSink(mode='update', key={self.key}): the output has no column "
                f"{', '.join(map(repr, missing))} (its columns: {user}); name the key among them")
        nested = [k for k in self.key if pa.types.is_nested(schema.field(k).type)]
        if nested:
            raise ValueError(f"TableSink(mode='update', key={self.key}): key column "
                             f"{nested[0]!r} is {schema.field(nested[0]).type}; a key must be "
                             f"of a plain type (numbers, strings, dates)")
        self._schema = schema
        self._state = schema.empty_table()
        for stale in [*self.path.glob(".*.tmp"), *self.path.glob(f"{LOG}/.*.tmp")]:
            stale.unlink(missing_ok=True)  # a crashed writer's
        entries = log_entries(self.path)
        committed = set(entries)
        for p in self.path.glob("snapshot-*.parquet"):
            m = SNAPSHOT.match(p.name)
            if m and int(m.group(1)) not in committed:
                p.unlink(missing_ok=True)  # renamed into place, never committed (or retired)
        if not entries:
            return
        self._latest = entries[-1]
        for n in entries[:-1]:  # superseded when the entry after it was committed
            after = self.path / LOG / f"{n + 1}.compact"
            self._superseded.append((n, after.stat().st_mtime if after.exists() else time.time()))
        self._load(self.path / snapshot_name(self._latest))

    def _load(self, file: Path) -> None:
        assert self._schema is not None
        if not file.exists():
            raise ValueError(f"{self.path}: the newest log entry names {file.name}, which is "
                             f"gone; the table was damaged: give the sink a new directory")
        table = pq.read_table(file)
        if (table.schema.names, table.schema.types) != (self._schema.names, self._schema.types):
            raise ValueError(
                f"table {self.path} holds the columns {table.schema.names} "
                f"({', '.join(str(t) for t in table.schema.types)}); this output's are "
                f"{self._schema.names} ({', '.join(str(t) for t in self._schema.types)}): "
                f"give the sink a new directory")
        meta = table.schema.metadata or {}
        if MARK_SN in meta:
            self._skip = self._folded = (int(meta[MARK_SN]), int(meta[MARK_SNM]))
        self._state = table.replace_schema_metadata(None)

    def write(self, batch: pa.RecordBatch) -> None:
        """Take rows of the output (with ``_sn``/``_snm``, in SN order): rows up to a
        reopened table's mark were folded in by the run that wrote it, and are skipped."""
        assert self._schema is not None
        if self._skip is not None and batch.num_rows:
            sn, snm = batch.column(SN).to_numpy(), batch.column(SNM).to_numpy()
            newer = (sn > self._skip[0]) | ((sn == self._skip[0]) & (snm > self._skip[1]))
            if newer.any():
                self._skip = None  # the output is in SN order: every later row is newer
                batch = batch.slice(int(np.argmax(newer)))
            else:
                batch = batch.slice(0, 0)
        if batch.num_rows:
            self._last = (batch.column(SN)[-1].as_py(), batch.column(SNM)[-1].as_py())
            self._pending.append(batch.select(self._schema.names))
            self._held += batch.num_rows
            if self._unpublished_since is None:
                self._unpublished_since = time.monotonic()
            assert self._state is not None
            if self._held >= max(FOLD_ROWS, self._state.num_rows):
                self._fold()
        self.poll()

    def poll(self) -> None:
        """Publish once the oldest unpublished row has waited ``flush_interval``; retire
        snapshots superseded ``retain_superseded`` seconds ago."""
        if (self.flush_interval is not None and self._unpublished_since is not None
                and time.monotonic() - self._unpublished_since >= self.flush_interval):
            self._publish()
        if self._superseded and self._superseded[0][1] <= time.time() - self.retain_superseded:
            self._retire(time.time() - self.retain_superseded)

    def commit(self) -> None:
        """A checkpoint: publish what is held, so that every row up to the cut is in a
        committed snapshot (a restart skips the rows up to the newest one's mark)."""
        if self._schema is not None and self._unpublished_since is not None:
            self._publish()

    def close(self) -> None:
        """Publish what is held (an empty table when nothing was ever published, so that a
        reader finds the columns), then remove every superseded snapshot: the directory holds
        the final one alone."""
        if self._schema is None:
            return
        if self._unpublished_since is not None or self._latest < 0:
            self._publish()
        self._retire(float("inf"))

    def _fold(self) -> None:
        assert self._state is not None and self._schema is not None
        if not self._pending:
            return
        held = pa.Table.from_batches(self._pending, schema=self._schema)
        self._state = latest_per_key(pa.concat_tables([self._state, held]), self.key)
        self._pending, self._held, self._folded = [], 0, self._last

    def _publish(self) -> None:
        """Write the table as the next snapshot, then commit it with a log entry."""
        self._fold()
        assert self._state is not None
        n = self._latest + 1
        name = snapshot_name(n)
        mark = {} if self._folded is None else {MARK_SN: str(self._folded[0]).encode(),
                                                 MARK_SNM: str(self._folded[1]).encode()}
        tmp = self.path / f".{name}.tmp"
        pq.write_table(self._state.replace_schema_metadata(mark), tmp)
        file = self.path / name
        os.replace(tmp, file)
        st = file.stat()
        entry = {"path": file.resolve().as_uri(), "size": st.st_size, "isDir": False,
                 "modificationTime": int(st.st_mtime * 1000), "blockReplication": 1,
                 "blockSize": 32 << 20, "action": "add"}
        (self.path / LOG).mkdir(exist_ok=True)
        _replace(self.path / LOG / f"{n}.compact",
                 f"{LOG_VERSION}\n{json.dumps(entry)}".encode())  # the commit
        if self._latest >= 0:
            self._superseded.append((self._latest, time.time()))
        self._latest, self._unpublished_since = n, None
        self.files_written += 1

    def _retire(self, before: float) -> None:
        """Remove the snapshots superseded before ``before`` (wall time), each log entry
        first: a new reader never picks it, one that already has it had its grace."""
        while self._superseded and self._superseded[0][1] <= before:
            n, _ = self._superseded.pop(0)
            (self.path / LOG / f"{n}.compact").unlink(missing_ok=True)
            (self.path / snapshot_name(n)).unlink(missing_ok=True)
