"""``--output``'s sink and the dead letters (``sparkflux/io/sinks.py``): the output is a
directory of part files each published whole, readable (every row delivered up to the last
publish, in output order) at any moment, after a SIGKILL of the writing process too; a run
replaces an earlier run's output and refuses a directory holding anything else; the
dead-letter file holds whole lines only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkflux.io.sinks import DeadLetters, ParquetSink
from sparkflux.model.schema import with_system
from sparkflux.model.validate import Rejected
from tests.conftest import ROOT

SCHEMA = with_system([pa.field("k", pa.int64()), pa.field("s", pa.string())])


def batch(start: int, n: int) -> pa.RecordBatch:
    ks = list(range(start, start + n))
    return pa.RecordBatch.from_pydict({"k": ks, "s": [f"v{k}" for k in ks], "_sn": ks,
                                       "_snm": [0] * n, "_t0": [0.5] * n}, schema=SCHEMA)


def test_the_output_is_a_directory_of_parts_in_output_order(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    sink = ParquetSink(out, rows_per_file=25, flush_interval=None)
    sink.open(SCHEMA)
    empty = pq.read_table(out)  # before any row: the columns, no rows
    assert empty.num_rows == 0 and empty.column_names == ["k", "s", "_sn", "_snm"]
    for start in range(0, 100, 10):
        sink.write(batch(start, 10))
        seen = pq.read_table(out).column("k").to_pylist()
        assert seen == list(range(len(seen))) and start + 10 - len(seen) < 25
    sink.close()
    table = pq.read_table(out)
    assert table.column("k").to_pylist() == list(range(100))  # the timing columns dropped
    assert table.column_names == ["k", "s", "_sn", "_snm"]
    assert sorted(p.name for p in out.iterdir()) == [f"part-{i:08d}.parquet" for i in range(5)]


def test_a_part_is_published_once_its_oldest_row_has_waited(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "o", flush_interval=0.05)
    sink.open(SCHEMA)
    sink.write(batch(0, 3))
    assert pq.read_table(tmp_path / "o").num_rows == 0
    time.sleep(0.06)
    sink.poll()  # the driver's poll, with no new rows
    assert pq.read_table(tmp_path / "o").column("k").to_pylist() == [0, 1, 2]


def test_a_run_replaces_an_earlier_runs_output_and_refuses_other_files(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    pq.write_table(pa.table({"old": [1]}), out)  # a sparkflux before: one file
    for rows in (50, 20):  # then a longer run and a shorter one
        sink = ParquetSink(out, rows_per_file=7)
        sink.open(SCHEMA)
        sink.write(batch(0, rows))
        sink.close()
        assert pq.read_table(out).column("k").to_pylist() == list(range(rows))
    (out / ".part-00000009.parquet.tmp").write_bytes(b"PAR1 half")  # a crashed writer's
    ParquetSink(out).open(SCHEMA)
    assert sorted(p.name for p in out.iterdir()) == ["part-00000000.parquet"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files no run wrote there \(notes.txt\)"):
        ParquetSink(out).open(SCHEMA)
    assert (out / "notes.txt").exists() and (out / "part-00000000.parquet").exists()
    (tmp_path / "text").write_text("not parquet")
    with pytest.raises(ValueError, match="is a file, not a Parquet file an earlier run wrote"):
        ParquetSink(tmp_path / "text").open(SCHEMA)
    assert (tmp_path / "text").read_text() == "not parquet"


WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.unit.io.test_sinks import SCHEMA, batch
from sparkflux.io.sinks import DeadLetters, ParquetSink
from sparkflux.model.validate import Rejected
sink = ParquetSink({out!r}, rows_per_file=1000, flush_interval=None)
dead = DeadLetters({dead!r})
sink.open(SCHEMA)
n = 0
while True:
    sink.write(batch(n, 100))
    dead.write([Rejected({{"n": n + i, "pad": "x" * 500}}, "bad") for i in range(40)])
    n += 100
    if n == 5000:
        print("written", flush=True)
"""


def test_a_sigkilled_writer_leaves_every_published_row_readable(tmp_path: Path) -> None:
    """A process writing as fast as it can, SIGKILLed: the output reads (whole parts, in
    order, from row 0), and every dead-letter line ended by its newline is whole JSON, in
    order (only a last unterminated tail may be torn)."""
    out, dead = tmp_path / "out.parquet", tmp_path / "out.dead-letter.jsonl"
    code = WRITER.format(root=str(ROOT), out=str(out), dead=str(dead))
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "written\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    ks = pq.read_table(out).column("k").to_pylist()
    assert len(ks) >= 5000 and len(ks) % 1000 == 0 and ks == list(range(len(ks)))
    # every line whole, but a last one without its newline: a kill inside a write (Linux
    # stops a write to a file between pages on a fatal signal) may tear that one
    lines = dead.read_bytes().split(b"\n")[:-1]
    assert len(lines) > 2000
    # (each batch of 100 rows rejects its first 40)
    assert [json.loads(line)["record"]["n"] for line in lines] == [
        100 * (j // 40) + j % 40 for j in range(len(lines))]


def test_the_dead_letters_are_written_at_once(tmp_path: Path) -> None:
    dead = DeadLetters(tmp_path / "d" / "x.jsonl")
    dead.write([])
    assert not (tmp_path / "d").exists()  # no rejection, no file
    dead.write([Rejected({"a": 1}, "why")])
    assert json.loads((tmp_path / "d" / "x.jsonl").read_text()) == {"reason": "why",
                                                                   "record": {"a": 1}}
    dead.close()
