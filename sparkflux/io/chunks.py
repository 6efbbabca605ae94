"""Parquet files read on the sites: the driver deals out chunks, the sites read the rows.

With ``FileStreamSource(..., read_on="sites")`` the rows never pass through the driver. The
driver lists the files as they land (``FileStreamSource.landed``), reads each one's footer
(and, when the source has an event-time column, that column alone), and admits one small
*chunk* record per run of at most ``chunk_rows`` rows: ``(file, size, row_start, rows,
prior_max, watermark, sns)``. The ingress numbers the chunks and spreads them over the
mini-partitions of a first stage that reads them, ``ReadChunks`` (``io/site_read.py``
puts it in the plan). That stage is a stage like any other: each mini-partition has its
replicas (both read the same chunks and so produce the same rows), its FH-Prod buffer and
its catch-up, so a lost reader is taken over and caught up by the protocol that keeps every
operator. A reader is stateless: its state is nothing, its input the chunks not yet read.

**Numbering: the same as in the driver.** The driver knows how many rows of a chunk pass
(``screen``, below), ``sns``, and the ingress gives the chunk that many input sequence
numbers: the chunk's own ``_sn`` is the first, and the reader numbers the rows it keeps
``_sn, _sn + 1, ...`` in file order (minor 0). So every row gets the ISN it would get if the
driver had read it, and the output of a dataflow is the same whichever side reads its files
(for files whose rows come in event-time order; see below). A chunk none of whose rows pass
is never admitted.

**What is dropped, and where it is reported.** ``screen`` drops a row that is invalid
against the source's schema (``validate``), or late: its event time is behind the largest
event time of the valid rows before it (``prior_max`` carries that maximum over the chunks
before) less the allowed lateness, the sequencer's rule for one stream. The readers drop
silently; the driver computes the same and writes the dead letters. A file whose footer shows
every declared column with its exact type and no null in a required column (``regular``)
needs only its event-time column for that (or nothing, without one); any other file is read
whole on the driver too.

**A file that changes.** A reader checks that the file still has the size the driver saw
and that its chunk keeps the rows the driver counted; a file replaced after it was listed
stops the run with a message that says so (it would otherwise give different rows on
different sites). On a cluster the files must be readable at the same path on every executor
(a shared file system), as they must be for Spark's own file sources.

**What differs from reading in the driver.** The driver's sequencer puts the rows of one
stream in event-time order within the lateness bound; here they keep their order in the
files (the watermark stays a true bound: a row behind it is dropped as late). For files
written in event-time order the rows, their numbers, and so every result are the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.dataflow.api import Source
from sparkflux.model.batch import empty
from sparkflux.model.progress import NO_WATERMARK
from sparkflux.model.schema import PART, SN, SNM, T0, user_fields, with_system
from sparkflux.model.validate import Malformed, Rejected, validate
from sparkflux.operators.base import Operator


class LandingFiles(Protocol):
    """What ``ChunkSource`` deals from: Parquet files in a directory, each handed over once
    it is complete (``FileStreamSource``, or ``DataFrameSource`` writing its partitions on
    the executors), with a position that ``mark`` moves."""

    path: Path
    schema: pa.Schema
    event_time: str | None
    task_slots: int

    def landed(self) -> Iterator[tuple[str, int] | None]: ...
    def mark(self, name: str, row: int) -> None: ...
    def close(self) -> None: ...
    def position(self) -> object: ...
    def waiting_for(self) -> str | None: ...

    @property
    def closed(self) -> bool: ...

CHUNK_SCHEMA = pa.schema([
    pa.field("file", pa.string(), nullable=False),  # its absolute path
    pa.field("size", pa.int64(), nullable=False),  # its size in bytes when the driver read it
    pa.field("row_start", pa.int64(), nullable=False),
    pa.field("rows", pa.int64(), nullable=False),
    # the largest valid event time before the chunk (NO_WATERMARK: none, or no event time)
    pa.field("prior_max", pa.int64(), nullable=False),
    # the source's watermark once the chunk is read: what the ingress may claim after it
    pa.field("watermark", pa.int64(), nullable=False),
    # the rows of the chunk that pass ``screen``: the input sequence numbers it takes
    pa.field("sns", pa.int64(), nullable=False),
])
SPAN = "sns"  # the chunk column that says how many ISNs a chunk record takes
ROW = "__row"  # a row's index in its chunk, carried through validation
MAX_CHUNK_ROWS = 1 << 24  # a chunk is read whole on a site: its rows must fit its memory


def screen(rows: pa.RecordBatch, schema: pa.Schema, event_time: str | None, lateness: int,
           prior_max: int, source: str) -> tuple[pa.RecordBatch, list[Rejected], int]:
    """The rows of one chunk that go on (in ``schema``, in file order), the rejected ones with
    their reasons, and the largest valid event time after the chunk.

    ``rows`` carries every column of ``schema`` the file has. Deterministic: the driver (for
    the dead letters and the count) and every replica of a reader (for the rows) agree."""
    index = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    checked = schema.append(pa.field(ROW, pa.int64(), nullable=False))
    good, rejected = validate(rows.append_column(ROW, index), checked)
    if rejected:  # validation lists them by kind of fault: the dead letters go in file order
        rejected.sort(key=lambda r: r.record.get(ROW, 0))
        rejected = [Rejected({k: v for k, v in r.record.items() if k != ROW}, r.reason)
                    for r in rejected]
    top = prior_max
    if event_time is not None and good.num_rows:
        et = good.column(event_time).cast(pa.int64()).to_numpy(zero_copy_only=False)
        before = np.maximum.accumulate(np.r_[prior_max, et])[:-1]
        wm_before = np.where(before > NO_WATERMARK, before - lateness, NO_WATERMARK)
        late = et < wm_before
        if late.any():
            lagged = wm_before[late]
            late_rows = good.filter(pa.array(late)).drop_columns([ROW]).to_pylist()
            rejected += [Rejected(r, f"late: event time {r[event_time]} of source {source!r} "
                                     f"is behind its watermark {int(w)} (allowed lateness "
                                     f"{lateness})")
                         for r, w in zip(late_rows, lagged.tolist(), strict=True)]
            good = good.filter(pa.array(~late))
            et = et[~late]
        if et.size:
            top = max(prior_max, int(et.max()))
    return good.drop_columns([ROW]), rejected, top


def read_rows(path: str, schema: pa.Schema, row_start: int, rows: int) -> pa.RecordBatch:
    """Rows ``[row_start, row_start + rows)`` of a Parquet file: the columns of ``schema`` it
    has (validation names the missing ones), reading only the row groups that hold them."""
    pf = pq.ParquetFile(path)
    have = set(pf.schema_arrow.names)
    meta = pf.metadata
    groups, first, at = [], -1, 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if at + n > row_start and at < row_start + rows:
            groups.append(g)
            first = at if first < 0 else first
        at += n
    cols = [n for n in schema.names if n in have]
    table = pf.read_row_groups(groups, columns=cols) if groups else \
        pf.schema_arrow.empty_table().select(cols)
    batches = table.slice(row_start - max(first, 0), rows).to_batches()
    # one batch or an error (never the first of several: a string column over 2 GiB)
    return pa.concat_batches(batches) if batches else \
        pa.RecordBatch.from_pylist([], schema=table.schema)


def spans(meta: pq.FileMetaData, skip: int, chunk_rows: int) -> Iterator[tuple[int, int]]:
    """``(first row, rows)`` of each chunk of a file from row ``skip`` on: whole row groups,
    as many as fit in ``chunk_rows`` rows, or one larger group alone, so that a reader
    decodes no row it does not deal (Parquet decodes a row group's pages whole). The
    first chunk starts at ``skip`` inside its group."""
    start, rows, at = skip, 0, 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        lo, hi = max(at, skip), at + n
        at = hi
        if hi <= lo:
            continue
        if rows and rows + (hi - lo) > chunk_rows:
            yield start, rows
            start, rows = lo, 0
        rows += hi - lo
    if rows:
        yield start, rows


def regular(pf: pq.ParquetFile, schema: pa.Schema) -> bool:
    """Whether the footer shows that every row is valid against ``schema``: each declared
    column present with exactly its type, and, where the column is required, statistics
    that count no null in any row group."""
    have = pf.schema_arrow
    meta = pf.metadata
    for f in schema:
        i = have.get_field_index(f.name)
        if i < 0 or not have.field(i).type.equals(f.type):
            return False
        if f.nullable:
            continue
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            cols = [group.column(j) for j in range(group.num_columns)]
            stats = next((c.statistics for c in cols if c.path_in_schema == f.name), None)
            if stats is None or not stats.has_null_count or stats.null_count:
                return False
    return True


class SiteReadError(RuntimeError):
    """A reader cannot give the rows the driver dealt: the run stops (its replicas would
    otherwise disagree, or a row the driver numbered would go missing)."""


class FileChanged(SiteReadError):
    """A file read on the sites is not the file the driver dealt out (see the module)."""


class FileDamaged(SiteReadError):
    """Rows of a file read on the sites cannot be decoded: the driver read only its footer
    and event-time column, so it dealt them."""


class ReadChunks(Operator):
    """The reader stage's operator: each chunk record becomes its rows (see the module).

    Stateless: a chunk is read whole when it arrives, so a partition holds nothing between
    batches, and a replica caught up from its partner reads the chunks it gets next."""

    def __init__(self, schema: pa.Schema, event_time: str | None, lateness: int,
                 source: str) -> None:
        super().__init__()
        self.schema = schema
        self.event_time = event_time
        self.lateness = lateness
        self.source = source

    @property
    def name(self) -> str:
        return f"read {self.source}"

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        return with_system(user_fields(self.schema)).append(
            pa.field(PART, pa.int32(), nullable=False))

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        out = [self._read(c) for c in batch.to_pylist()]
        out = [b for b in out if b.num_rows]
        if not out:
            return empty(self.output_schema)
        # one batch or an error (never the first of several: a string column over 2 GiB)
        return out[0] if len(out) == 1 else pa.concat_batches(out)

    def _read(self, c: dict[str, Any]) -> pa.RecordBatch:
        path, first, last = c["file"], c["row_start"], c["row_start"] + c["rows"] - 1
        try:
            size = os.stat(path).st_size
        except OSError as e:
            raise SiteReadError(
                f"source {self.source!r}: this site cannot open {path} ({e}); files read on "
                f"the sites must be readable at the same path on every executor (a shared "
                f"file system)") from e
        if size != c["size"]:
            raise FileChanged(
                f"source {self.source!r}: {path} changed after it landed (the driver saw "
                f"{c['size']} bytes, this site {size}): a file must not change once it has "
                f"its name (write it under a hidden name and rename it)")
        try:
            rows = read_rows(path, self.schema, c["row_start"], c["rows"])
        except (OSError, pa.ArrowException) as e:
            raise FileDamaged(
                f"source {self.source!r}: rows {first}..{last} of {path} cannot be decoded "
                f"({type(e).__name__}: {e}): the file is damaged. The driver read only its "
                f"footer and event-time column, so it dealt them; read such input with "
                f"read_on='driver', which sends an undecodable file to the dead letters "
                f"and goes on") from e
        good, _, _ = screen(rows, self.schema, self.event_time, self.lateness,
                            c["prior_max"], self.source)
        n = good.num_rows
        if n != c[SPAN]:
            raise FileChanged(
                f"source {self.source!r}: {path} changed after it landed (the driver counted "
                f"{c[SPAN]} valid rows in rows {first}..{last}, this site {n}): a file must "
                f"not change once it has its name (write it under a hidden name and rename "
                f"it)")
        system = {SN: pa.array(np.arange(c[SN], c[SN] + n, dtype=np.int64)),
                  SNM: pa.array(np.full(n, c[SNM], dtype=np.int64)),
                  T0: pa.array(np.full(n, c[T0], dtype=np.float64)),
                  PART: pa.array(np.full(n, c[PART], dtype=np.int32))}
        return pa.RecordBatch.from_arrays(
            [system[f.name] if f.name in system else good.column(f.name)
             for f in self.output_schema], schema=self.output_schema)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk as the driver deals it (a row of ``CHUNK_SCHEMA``)."""

    file: str
    size: int
    row_start: int
    rows: int
    prior_max: int
    watermark: int
    sns: int


class ChunkSource(Source):
    """The driver's side of a source read on the sites: its chunk records, and the dead
    letters of the rows the readers will drop (see the module). The Spark jobs of the source
    it deals from (``task_slots``) and what they wait for are that source's."""

    schema = CHUNK_SCHEMA
    lateness = 0

    def __init__(self, files: LandingFiles, chunk_rows: int, name: str, schema: pa.Schema,
                 lateness: int) -> None:
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise ValueError(f"chunk_rows must be between 1 and {MAX_CHUNK_ROWS} "
                             f"(got {chunk_rows})")
        self.files = files
        self.chunk_rows = chunk_rows
        self.task_slots = files.task_slots
        self.source_name = name  # the dataflow's name for the source (for dead letters)
        self.valid = schema  # a valid record (the event-time column required)
        self.source_lateness = lateness  # the stream's (``source(..., lateness=)`` or its own)
        # the sequencer orders chunks by the watermark after them: in dealing order
        self.event_time = "watermark" if files.event_time is not None else None
        self.max_et = NO_WATERMARK  # the largest valid event time dealt so far
        self.rows_dealt = 0  # rows of the files covered by chunks so far, kept or not

    def close(self) -> None:
        self.files.close()

    def position(self) -> object:
        return self.files.position()

    def waiting_for(self) -> str | None:
        return self.files.waiting_for()

    def batches(self) -> Iterator[pa.RecordBatch | list[Malformed] | None]:
        for landed in self.files.landed():
            if landed is None:
                yield None
                continue
            name, skip = landed
            yield from self._file(self.files.path / name, name, skip)
            if self.files.closed:
                return

    def _file(self, path: Path, name: str, skip: int
              ) -> Iterator[pa.RecordBatch | list[Malformed]]:
        """The chunk records of one file from row ``skip`` on, each with the dead letters of
        its dropped rows before it; the file's position moves past each as it is dealt. A
        file that cannot be read from some row on is one dead letter from that row, as when
        the driver reads it (the chunks before are dealt)."""
        where = str(path.resolve())
        at = skip
        try:
            pf = pq.ParquetFile(where)
            size = os.stat(where).st_size
            whole = not regular(pf, self.valid)
            for start, n in spans(pf.metadata, skip, self.chunk_rows):
                at = start
                pieces: list[tuple[int, int, tuple[Chunk, list[Malformed]] | None]]
                try:
                    pieces = [(start, n, self._chunk(where, size, start, n, whole))]
                except (OSError, pa.ArrowException):
                    # which row group cannot be read: the ones before it go, read alone
                    pieces = [(g, k, None) for g, k in spans(pf.metadata, start, 1)
                              if g < start + n]
                for p_start, p_rows, done in pieces:
                    at = p_start
                    chunk, dead = done or self._chunk(where, size, p_start, p_rows, whole)
                    if dead:
                        yield dead
                    self.files.mark(name, chunk.row_start + chunk.rows)
                    self.rows_dealt += chunk.rows
                    if chunk.sns:
                        yield pa.RecordBatch.from_pylist([asdict(chunk)], schema=CHUNK_SCHEMA)
                if self.files.closed:
                    return
        except (OSError, pa.ArrowException) as e:
            self.files.mark(name, at)
            yield [Malformed({"file": name, "row": at},
                             f"file {name}: not readable as Parquet from row {at} "
                             f"({type(e).__name__}: {e})")]

    def _chunk(self, where: str, size: int, start: int, n: int, whole: bool
               ) -> tuple[Chunk, list[Malformed]]:
        """Rows ``[start, start + n)`` as a chunk, and the dead letters of the rows its
        readers will drop: from the event-time column alone for a regular file (nothing at
        all without an event time), the rows read whole where that is not enough. The
        largest event time moves only once the chunk is read."""
        schema, et_col = self.valid, self.files.event_time
        lateness = self.source_lateness
        prior = top = self.max_et
        if not whole and et_col is None:
            kept, dead = n, []
        else:
            cols = schema if whole else pa.schema([schema.field(et_col)])
            good, rejected, top = screen(read_rows(where, cols, start, n), cols, et_col,
                                         lateness, prior, self.source_name)
            if rejected and not whole:  # late rows of a regular file: their whole records
                good, rejected, top = screen(read_rows(where, schema, start, n), schema,
                                             et_col, lateness, prior, self.source_name)
            kept, dead = good.num_rows, [Malformed(r.record, r.reason) for r in rejected]
        self.max_et = top
        wm = top - lateness if top > NO_WATERMARK else NO_WATERMARK
        return Chunk(where, size, start, n, prior, wm, kept), dead
