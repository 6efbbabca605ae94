"""The output stream with ``_op`` (``io/tentative_output.py``): rows marked with their kind,
the one-row markers of ``undo`` and ``rec_done``, ``--tentative-output``'s Parquet files, and
``foreach_batch(tentative=True)``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.io.foreach import foreach_batch
from sparkflux.io.tentative_output import OP, TentativeOutput, op_schema, with_op

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False),
                    pa.field("_sn", pa.int64(), nullable=False),
                    pa.field("_snm", pa.int64(), nullable=False),
                    pa.field("_t0", pa.float64(), nullable=False)])


def rows(*sns: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"k": s * 10, "_sn": s, "_snm": 0, "_t0": 0.0}
                                       for s in sns], schema=SCHEMA)


def test_rows_carry_their_op_and_markers_are_one_null_row() -> None:
    out = with_op(rows(1, 2), "tentative", SCHEMA)
    assert out.schema == op_schema(SCHEMA) and out.schema.field(OP).type == pa.string()
    assert out.column(OP).to_pylist() == ["tentative", "tentative"]
    assert out.column("k").to_pylist() == [10, 20]
    undo = with_op(None, "undo", SCHEMA)
    assert undo.num_rows == 1 and undo.column(OP).to_pylist() == ["undo"]
    assert undo.column("k").to_pylist() == [None]


def test_tentative_output_writes_the_whole_stream(tmp_path: Path) -> None:
    sink = TentativeOutput(tmp_path / "t")
    sink.open(op_schema(SCHEMA))
    for batch in (with_op(rows(1), "insert", SCHEMA), with_op(rows(5, 6), "tentative", SCHEMA),
                  with_op(None, "undo", SCHEMA), with_op(rows(2, 3), "insert", SCHEMA),
                  with_op(None, "rec_done", SCHEMA)):
        sink.write_ops(batch)
    sink.close()
    got = pq.read_table(tmp_path / "t")
    assert got.column(OP).to_pylist() == ["insert", "tentative", "tentative", "undo", "insert",
                                          "insert", "rec_done"]
    assert "_t0" not in got.column_names  # timing columns dropped, as every sink does
    # what a consumer keeps: the stable rows, and the tentative ones since the last undo
    stable = [r["k"] for r in got.to_pylist() if r[OP] == "insert"]
    assert stable == [10, 20, 30]


def test_foreach_batch_tentative_gets_every_kind() -> None:
    calls: list[tuple[list[str], int, int]] = []
    sink = foreach_batch(lambda b, lo, hi: calls.append((b.column(OP).to_pylist(), lo, hi)),
                         tentative=True)
    assert sink.tentative
    sink.open(SCHEMA)
    sink.write_ops(with_op(rows(7, 8), "tentative", SCHEMA))
    sink.write_ops(with_op(None, "undo", SCHEMA))
    assert calls == [(["tentative", "tentative"], 7, 8), (["undo"], -1, -1)]
    assert not foreach_batch(lambda b, lo, hi: None).tentative
