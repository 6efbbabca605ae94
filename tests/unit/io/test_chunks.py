"""The pieces of a file source read on the sites, without Spark (``io/chunks.py``,
``io/site_read.py``): what the driver deals, what a reader makes of it, what the
ingress numbers, and the errors a user gets.

- ``screen`` drops invalid and late rows, in file order, with the sequencer's reasons;
- ``regular`` trusts a footer only when it shows every declared column with its type and
  no null in a required one;
- the chunks cover every row of every file once, in order; their spans add up to the valid
  rows; a chunk with none is not dealt; positions move chunk by chunk and resume mid-file;
- the driver's dead letters for them are the ones the driver writes when it reads the files
  itself (the driver's own core, ``Boundary``, fed either way);
- the ingress gives each chunk as many sequence numbers as its span, the first its own, and
  deals chunks to the reader partitions in turn (exact actions);
- a reader numbers its rows from the chunk's SN, and stops with a clear error when a file
  changed after it landed or cannot be read where it runs;
- bad configurations fail at once, saying what to change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sparkflux.control.boundary import Input, InputEnd, Rejects, boundary_for
from sparkflux.dataflow.api import Dataflow
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.io.chunks import (
    CHUNK_SCHEMA,
    ChunkSource,
    FileChanged,
    FileDamaged,
    ReadChunks,
    SiteReadError,
    regular,
    screen,
    spans,
)
from sparkflux.io.files import FilePosition, FileStreamSource
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import NO_WATERMARK
from sparkflux.model.schema import PART, SN, SNM, T0
from sparkflux.protocol.messages import Data, Outgoing
from sparkflux.sim.workload import SCHEMA, tiny_files_plan, write_tiny_files

LOOSE = pa.schema([f.with_nullable(True) for f in SCHEMA])


def rows(**cols: list) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols, schema=pa.schema([LOOSE.field(c) for c in cols]))


# -- screen --------------------------------------------------------------------------------------
def test_screen_drops_invalid_and_late_rows_in_file_order() -> None:
    b = rows(src=[1, 2, 3, 4, 5, 6], dst=[0] * 6, kind=[0] * 6, ts=[10, 30, 20, 31, 5, 40],
             app=[1, None, 1, 1, 1, None])
    good, rejected, top = screen(b, SCHEMA, "ts", 5, 12, "events")
    # ts 10 is behind 12 - 5? no (10 >= 7); 30 invalid (app); 20 ok (max 12 -> wm 7);
    # 31 ok; 5 late (max 31 -> wm 26); 40 invalid
    assert good.column("src").to_pylist() == [1, 3, 4]
    assert [r.record["src"] for r in rejected] == [2, 6, 5]  # invalid ones first, by row
    assert rejected[0].reason == "missing value for column 'app'"
    assert rejected[2].reason == ("late: event time 5 of source 'events' is behind its "
                                  "watermark 26 (allowed lateness 5)")
    assert "__row" not in rejected[0].record
    assert top == 31  # invalid rows' times do not count


def test_screen_without_event_time_keeps_every_valid_row() -> None:
    b = rows(src=[1, 2], dst=[0, 0], kind=[0, 0], ts=[9, 1], app=[1, 1])
    good, rejected, top = screen(b, SCHEMA, None, 0, NO_WATERMARK, "s")
    assert good.num_rows == 2 and rejected == [] and top == NO_WATERMARK


# -- regular -------------------------------------------------------------------------------------
def test_regular_is_read_off_the_footer(tmp_path: Path) -> None:
    ok = pa.table(rows(src=[1], dst=[0], kind=[0], ts=[1], app=[1])).cast(SCHEMA)
    pq.write_table(ok, tmp_path / "ok.parquet")
    assert regular(pq.ParquetFile(tmp_path / "ok.parquet"), SCHEMA)
    nulls = pa.table(rows(src=[1], dst=[0], kind=[0], ts=[1], app=[None]))
    pq.write_table(nulls, tmp_path / "nulls.parquet")
    assert not regular(pq.ParquetFile(tmp_path / "nulls.parquet"), SCHEMA)
    wide = ok.set_column(4, "app", pa.array([1], pa.int64()))  # int64 for an int32 column
    pq.write_table(wide, tmp_path / "wide.parquet")
    assert not regular(pq.ParquetFile(tmp_path / "wide.parquet"), SCHEMA)
    pq.write_table(ok.drop_columns(["app"]), tmp_path / "short.parquet")
    assert not regular(pq.ParquetFile(tmp_path / "short.parquet"), SCHEMA)
    nostats = tmp_path / "nostats.parquet"
    pq.write_table(ok, nostats, write_statistics=False)
    assert not regular(pq.ParquetFile(nostats), SCHEMA)


# -- what the driver deals -------------------------------------------------------------------------
def files(tmp_path: Path, **kw: Any) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    write_tiny_files(str(d), **kw)
    return d


def dealt(d: Path, chunk_rows: int = 16, **kw: Any) -> tuple[list[dict], list, ChunkSource]:
    src = FileStreamSource(d, SCHEMA, event_time="ts", end_marker="_DONE", read_on="sites",
                           chunk_rows=chunk_rows, poll_interval=0.0, **kw)
    chunks = ChunkSource(src, chunk_rows, "events", SCHEMA, 0)
    records: list[dict] = []
    dead: list = []
    for item in chunks.batches():
        if isinstance(item, pa.RecordBatch):
            records += item.to_pylist()
        elif isinstance(item, list):
            dead += item
    return records, dead, chunks


def test_chunks_cover_every_row_once_and_span_the_valid_ones(tmp_path: Path) -> None:
    d = files(tmp_path, bad_every=7, late_every=9)
    records, dead, source = dealt(d)
    by_file: dict[str, list[tuple[int, int]]] = {}
    for c in records:
        assert 1 <= c["sns"] <= c["rows"] <= 16
        assert c["size"] == os.stat(c["file"]).st_size
        by_file.setdefault(Path(c["file"]).name, []).append((c["row_start"], c["rows"]))
    assert sorted(by_file) == sorted(p.name for p in d.glob("*.parquet"))
    for name, cut in by_file.items():  # contiguous, from row 0 to the file's end
        assert cut[0][0] == 0
        assert all(a + n == b for (a, n), (b, _) in zip(cut, cut[1:], strict=False))
        assert cut[-1][0] + cut[-1][1] == pq.ParquetFile(d / name).metadata.num_rows
    assert source.rows_dealt == 400
    assert sum(c["sns"] for c in records) + len(dead) == 400
    wms = [c["watermark"] for c in records]
    assert wms == sorted(wms) and all(c["prior_max"] <= c["watermark"] for c in records)
    assert source.position() == FilePosition("part-0005.parquet", 50)


def test_a_chunk_with_no_valid_row_is_not_dealt(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    t = pa.table(rows(src=[1, 2, 3, 4], dst=[0] * 4, kind=[0] * 4, ts=[1, 2, 3, 4],
                      app=[1, 1, None, None]))
    pq.write_table(t, d / "a.parquet", row_group_size=2)
    (d / "_DONE").touch()
    records, dead, _ = dealt(d, chunk_rows=2)
    assert [(c["row_start"], c["sns"]) for c in records] == [(0, 2)]
    assert len(dead) == 2


def test_a_position_resumes_inside_a_file(tmp_path: Path) -> None:
    d = files(tmp_path)
    records, _, _ = dealt(d, start=FilePosition("part-0002.parquet", 40))
    first = records[0]
    assert (Path(first["file"]).name, first["row_start"]) == ("part-0002.parquet", 40)
    assert sum(c["rows"] for c in records) == 400 - 140 - 40


def test_close_ends_the_deal_at_a_chunk_boundary(tmp_path: Path) -> None:
    d = files(tmp_path)
    src = FileStreamSource(d, SCHEMA, event_time="ts", read_on="sites", chunk_rows=16,
                           poll_interval=0.0)
    chunks = ChunkSource(src, 16, "events", SCHEMA, 0)
    it = chunks.batches()
    got = [next(it) for _ in range(3)]
    chunks.close()
    assert list(it) == []
    last = got[-1].to_pylist()[0]
    assert src.position() == FilePosition("part-0000.parquet",
                                          last["row_start"] + last["rows"])


def test_the_dead_letters_are_the_ones_the_driver_writes_reading_itself(
        tmp_path: Path) -> None:
    """Both ways through the driver's own core: the same records, the same reasons."""
    d = files(tmp_path, bad_every=7, late_every=9)

    def rejects(read_on: str) -> list[tuple]:
        plan, items = tiny_files_plan(str(d), read_on=read_on)
        b = boundary_for(plan, 2)
        out = []
        for item in items:
            out += [a for a in b.handle(Input(batch=item, now=0.0)) if isinstance(a, Rejects)]
        b.handle(InputEnd())
        return sorted(repr((sorted(r.record.items()), r.reason))
                      for a in out for r in a.rejected)

    on_driver = rejects("driver")
    # every 7th row invalid (57), every 9th late (44); the 6 that are both are invalid only
    assert len(on_driver) == 57 + 44 - 6
    assert rejects("sites") == on_driver


# -- the ingress: spans and dealing, exact actions -------------------------------------------------
def test_the_ingress_numbers_a_chunk_by_its_span_and_deals_chunks_in_turn(
        tmp_path: Path) -> None:
    d = files(tmp_path)
    plan, items = tiny_files_plan(str(d), sites=4, partitions=8)
    b = boundary_for(plan, 2)
    first = items[0]
    batch = pa.concat_batches([first, items[1], items[2]])
    spans = batch.column("sns").to_pylist()
    acts = b.handle(Input(batch=batch, now=5.0))
    sent: dict[int, list[tuple[int, int]]] = {}
    for o in acts:
        assert isinstance(o, Outgoing) and isinstance(o.message, Data)
        m = o.message
        assert m.stage == 0
        assert set(m.streams.sn.tolist()) == {sum(spans) - 1}  # the claim covers every row
        sent[o.site] = list(zip(m.batch.column(SN).to_pylist(),
                                m.batch.column(PART).to_pylist(), strict=True))
    want = [(0, 0), (spans[0], 1), (spans[0] + spans[1], 2)]
    # replica r of partition q on site (q + r) % 4
    for site, got in sent.items():
        assert got == [(sn, q) for sn, q in want if site in (q % 4, (q + 1) % 4)]
    assert b.ingress.next_isn == sum(spans)
    assert b.ingress.records == 3


# -- the reader ----------------------------------------------------------------------------------
def chunk_rows_batch(c: dict, sn: int, part: int = 3) -> pa.RecordBatch:
    reader_in = {**c, SN: sn, SNM: 0, T0: 1.5, PART: part}
    fields = [*CHUNK_SCHEMA, pa.field(SN, pa.int64()), pa.field(SNM, pa.int64()),
              pa.field(T0, pa.float64()), pa.field(PART, pa.int32())]
    return pa.RecordBatch.from_pylist([reader_in], schema=pa.schema(fields))


def reader() -> ReadChunks:
    op = ReadChunks(SCHEMA, "ts", 0, "events")
    op.bind(pa.schema([*CHUNK_SCHEMA, pa.field(SN, pa.int64(), nullable=False),
                       pa.field(SNM, pa.int64(), nullable=False),
                       pa.field(T0, pa.float64(), nullable=False),
                       pa.field(PART, pa.int32(), nullable=False)]))
    return op


def test_a_reader_numbers_its_rows_from_the_chunks_sn(tmp_path: Path) -> None:
    d = files(tmp_path, bad_every=7)
    records, _, _ = dealt(d)
    c = next(c for c in records if c["sns"] < c["rows"])  # a chunk with a dropped row
    out = reader().process(chunk_rows_batch(c, sn=1000))
    assert out.column(SN).to_pylist() == list(range(1000, 1000 + c["sns"]))
    assert set(out.column(SNM).to_pylist()) == {0}
    assert set(out.column(PART).to_pylist()) == {3}
    assert set(out.column(T0).to_pylist()) == {1.5}
    want = pq.read_table(c["file"]).slice(c["row_start"], c["rows"])
    want = want.filter(pc.is_valid(want.column("app")))
    assert out.column("ts").to_pylist() == want.column("ts").to_pylist()


def test_a_file_replaced_after_it_landed_stops_the_reader(tmp_path: Path) -> None:
    d = files(tmp_path)
    records, _, _ = dealt(d)
    c = records[0]
    t = pq.read_table(c["file"])
    pq.write_table(t.slice(0, 10), c["file"])  # the same name, other content
    with pytest.raises(FileChanged, match="changed after it landed .* must not change once"):
        reader().process(chunk_rows_batch(c, sn=0))


def test_a_damaged_column_the_driver_did_not_read_stops_the_reader(tmp_path: Path) -> None:
    """The driver reads a regular file's footer and event-time column only; a reader that
    cannot decode the rest says the file is damaged and how to read such input."""
    d = tmp_path / "in"
    d.mkdir()
    t = pa.table(rows(src=list(range(20)), dst=[0] * 20, kind=[0] * 20, ts=list(range(20)),
                      app=[1] * 20)).cast(SCHEMA)
    path = d / "a.parquet"
    pq.write_table(t, path, compression="none", row_group_size=20)
    (d / "_DONE").touch()
    records, dead, _ = dealt(d)
    assert dead == [] and len(records) == 1
    data = bytearray(path.read_bytes())
    meta = pq.ParquetFile(path).metadata.row_group(0)
    col = next(meta.column(j) for j in range(meta.num_columns)
               if meta.column(j).path_in_schema == "src")
    for k in range(col.data_page_offset, col.data_page_offset + 24):  # the page header
        data[k] = 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(FileDamaged, match="(?s)rows 0..19 of .* cannot be decoded .* read "
                       "such input with read_on='driver'"):
        reader().process(chunk_rows_batch(records[0], sn=0))


def damage(path: Path, group: int, column: str) -> None:
    """Overwrite the start of ``column``'s data page in row group ``group`` of ``path``:
    that group cannot be decoded, the others still can."""
    meta = pq.ParquetFile(path).metadata.row_group(group)
    col = next(meta.column(j) for j in range(meta.num_columns)
               if meta.column(j).path_in_schema == column)
    data = bytearray(path.read_bytes())
    for k in range(col.data_page_offset, col.data_page_offset + 24):
        data[k] = 0xFF
    path.write_bytes(bytes(data))


def test_a_file_unreadable_from_a_row_on_is_one_dead_letter_from_there(tmp_path: Path) -> None:
    """The chunks before the damage are dealt; the rest of the file is one dead letter
    naming the row, as when the driver reads it; the event times of the rows never dealt
    do not move the watermark (the next file's rows are not late)."""
    d = tmp_path / "in"
    d.mkdir()
    t = pa.table(rows(src=list(range(20)), dst=[0] * 20, kind=[0] * 20,
                      ts=list(range(1000, 1020)), app=[1] * 20)).cast(SCHEMA)
    path = d / "a.parquet"
    pq.write_table(t, path, compression="none", row_group_size=10)
    damage(path, group=1, column="ts")
    # 1012: behind rows 10-19 (never dealt), not behind rows 0-9
    later = pa.table(rows(src=[1], dst=[0], kind=[0], ts=[1012], app=[1])).cast(SCHEMA)
    pq.write_table(later, d / "b.parquet")
    (d / "_DONE").touch()
    records, dead, _ = dealt(d, chunk_rows=10)
    assert [(Path(c["file"]).name, c["row_start"], c["sns"]) for c in records] == [
        ("a.parquet", 0, 10), ("b.parquet", 0, 1)]
    assert [m.record for m in dead] == [{"file": "a.parquet", "row": 10}]
    assert dead[0].reason.startswith("file a.parquet: not readable as Parquet from row 10")


def test_a_null_event_time_is_a_dead_letter_on_both_sides(tmp_path: Path) -> None:
    """Whether the schema allows it or not, a record needs its event time."""
    loose = SCHEMA.set(3, SCHEMA.field("ts").with_nullable(True))
    d = tmp_path / "in"
    d.mkdir()
    t = pa.table(rows(src=[1, 2, 3], dst=[0] * 3, kind=[0] * 3, ts=[5, None, 7], app=[1] * 3))
    pq.write_table(t, d / "a.parquet")
    (d / "_DONE").touch()

    def rejects(read_on: str) -> list[str]:
        df = Dataflow("nulls")
        df.source(FileStreamSource(d, loose, event_time="ts", end_marker="_DONE",
                                   read_on=read_on, poll_interval=0.0), name="events"
                  ).exchange(by=["src"]).sink()
        plan = compile_plan(df, 4, 2)
        b = boundary_for(plan, 1)
        out = []
        for item in plan.sources[0].batches():
            if item is not None:
                out += [r.reason for a in b.handle(Input(batch=item, now=0.0))
                        if isinstance(a, Rejects) for r in a.rejected]
        return out

    assert rejects("driver") == rejects("sites") == ["missing value for column 'ts'"]


def test_chunks_follow_the_row_groups(tmp_path: Path) -> None:
    """Whole row groups up to ``chunk_rows``, a larger group alone, the first from the skip."""
    path = tmp_path / "g.parquet"
    t = pa.table({"x": list(range(100))})
    pq.write_table(t, path, row_group_size=10)
    meta = pq.ParquetFile(path).metadata
    assert list(spans(meta, 0, 25)) == [(0, 20), (20, 20), (40, 20), (60, 20), (80, 20)]
    assert list(spans(meta, 0, 5)) == [(k, 10) for k in range(0, 100, 10)]
    assert list(spans(meta, 37, 25)) == [(37, 23), (60, 20), (80, 20)]
    assert list(spans(meta, 100, 25)) == []


def test_a_file_a_site_cannot_read_names_the_shared_file_system(tmp_path: Path) -> None:
    d = files(tmp_path)
    records, _, _ = dealt(d)
    c = {**records[0], "file": str(tmp_path / "elsewhere" / "part-0000.parquet")}
    with pytest.raises(SiteReadError, match="same path on every executor"):
        reader().process(chunk_rows_batch(c, sn=0))


# -- configuration -------------------------------------------------------------------------------
def test_bad_configurations_say_what_to_change(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="read_on='sites' reads Parquet only"):
        FileStreamSource(tmp_path, SCHEMA, format="json", read_on="sites")
    with pytest.raises(ValueError, match="read_on must be 'driver' or 'sites'"):
        FileStreamSource(tmp_path, SCHEMA, read_on="executors")
    with pytest.raises(ValueError, match="chunk_rows must be between 1 and"):
        FileStreamSource(tmp_path, SCHEMA, read_on="sites", chunk_rows=0)
    df = Dataflow("two")
    a = df.source(FileStreamSource(tmp_path, SCHEMA, event_time="ts", read_on="sites"),
                  name="a")
    b = df.source(FileStreamSource(tmp_path, SCHEMA, event_time="ts"), name="b")
    a.union(b).exchange(by=["src"]).sink()
    with pytest.raises(PlanError, match="one source; this one has 2 .a, b."):
        compile_plan(df, 8, 4)


def test_rate_is_refused_for_a_source_read_on_the_sites(tmp_path: Path) -> None:
    import sparkflux

    plan_df = Dataflow("paced")
    (plan_df.source(FileStreamSource(tmp_path, SCHEMA, event_time="ts", read_on="sites"),
                    name="files").exchange(by=["src"]).sink())
    with pytest.raises(PlanError, match="source 'files' is read on the sites .* Leave --rate "
                       "out"):
        sparkflux.start(plan_df, rate=1000, sites=2, partitions=4)


def test_a_dataframe_read_on_the_sites_needs_a_shared_staging_directory() -> None:
    from types import SimpleNamespace

    from sparkflux.io import DataFrameSource

    with pytest.raises(ValueError, match="read_on must be 'driver' or 'sites'"):
        DataFrameSource(object(), read_on="executors")
    on_cluster = SimpleNamespace(sparkSession=SimpleNamespace(
        sparkContext=SimpleNamespace(master="spark://10.0.0.1:7077")))
    with pytest.raises(ValueError, match="on a cluster needs staging=: a directory the driver "
                       "and every executor can read and write at the same path"):
        DataFrameSource(on_cluster, schema=SCHEMA, read_on="sites")
    src = DataFrameSource(on_cluster, schema=SCHEMA, read_on="sites", staging="/shared/x")
    assert src.task_slots == 1 and src.read_on == "sites"


def test_staged_partitions_are_named_by_task_attempt(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two attempts of one partition's task (a retry, a lost executor's task still running)
    write two files; each returns its own name, and neither replaces the other's."""
    from types import SimpleNamespace

    from pyspark import TaskContext

    from sparkflux.io import dataframe as dfm

    batch = pa.record_batch({"x": [1, 2]})
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, batch.schema) as w:
        w.write_batch(batch)
    blob = out.getvalue().to_pybytes()
    for attempt in (11, 12):
        ctx = SimpleNamespace(taskAttemptId=lambda a=attempt: a)
        monkeypatch.setattr(TaskContext, "get", staticmethod(lambda c=ctx: c))
        got = list(dfm._write_partition(str(tmp_path), 3, iter([(blob,)])))
        assert got == [(2, f"part-00003-{attempt}.parquet")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-00003-11.parquet",
                                                           "part-00003-12.parquet"]
    empty = list(dfm._write_partition(str(tmp_path), 4, iter([])))
    assert empty[0][0] == 0 and len(list(tmp_path.iterdir())) == 2


def test_a_damaged_group_inside_a_chunk_is_found_as_the_driver_finds_it(
        tmp_path: Path) -> None:
    """A chunk of three row groups whose middle one cannot be read: the first is dealt, the
    rest of the file is one dead letter from the middle one's first row, which is where the
    driver's own read (a row group at a time) stops too."""
    d = tmp_path / "in"
    d.mkdir()
    t = pa.table(rows(src=list(range(30)), dst=[0] * 30, kind=[0] * 30,
                      ts=list(range(30)), app=[1] * 30)).cast(SCHEMA)
    path = d / "a.parquet"
    pq.write_table(t, path, compression="none", row_group_size=10)
    damage(path, group=1, column="ts")
    (d / "_DONE").touch()
    records, dead, _ = dealt(d, chunk_rows=30)
    assert [(c["row_start"], c["rows"], c["sns"]) for c in records] == [(0, 10, 10)]
    assert [m.record for m in dead] == [{"file": "a.parquet", "row": 10}]
    on_driver = list(FileStreamSource(d, SCHEMA, event_time="ts", end_marker="_DONE",
                                      poll_interval=0.0).batches())
    got = [x for x in on_driver if isinstance(x, pa.RecordBatch)]
    bad = [x for x in on_driver if isinstance(x, list)]
    assert sum(b.num_rows for b in got) == 10
    assert [m.record for m in bad[0]] == [{"file": "a.parquet", "row": 10}]
