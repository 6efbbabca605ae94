"""The output stream of ``--consistency eventual`` as a live consumer sees it: rows with ``_op``.

A stable sink (``TableSink``, ``--output``, ``ParquetSink``, a plain ``foreach_batch``) gets
the stable rows only: exactly what a strict run writes. A sink whose ``tentative`` is true
(``foreach_batch(fn, tentative=True)``, ``--tentative-output PATH``) gets every delivery
through ``write_ops`` instead, each batch with a column ``_op``:

- ``insert``: stable rows (final; during and after an episode, its corrections too);
- ``tentative``: rows made from incomplete input, which a later ``undo`` voids;
- ``undo``: one row, every other column null: every tentative row delivered so far is void;
- ``rec_done``: one row, every other column null: the episode's corrections are all in.

A consumer that keeps the stable rows and, beside them, the tentative rows since the last
``undo`` always shows the best answer the run has; after ``rec_done`` its stable rows are
exactly the strict run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pyarrow as pa

from sparkflux.io.sinks import ParquetSink

OP = "_op"
Op = Literal["insert", "tentative", "undo", "rec_done"]
OPS: tuple[Op, ...] = ("insert", "tentative", "undo", "rec_done")


def op_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column nullable (a marker row has none) and ``_op`` last."""
    return pa.schema([f.with_nullable(True) for f in schema]
                     + [pa.field(OP, pa.string(), nullable=False)])


def with_op(batch: pa.RecordBatch | None, op: Op, schema: pa.Schema) -> pa.RecordBatch:
    """``batch``'s rows marked ``op`` (``schema``: the rows' own schema); no batch: the one
    marker row of an ``undo`` or a ``rec_done``."""
    out = op_schema(schema)
    if batch is None:
        arrays = [pa.nulls(1, f.type) for f in schema] + [pa.array([op], pa.string())]
        return pa.RecordBatch.from_arrays(arrays, schema=out)
    arrays = [batch.column(f.name).cast(f.type) for f in schema]
    ops = pa.array([op] * batch.num_rows, pa.string())
    return pa.RecordBatch.from_arrays([*arrays, ops], schema=out)


class TentativeOutput(ParquetSink):
    """``--tentative-output PATH``: every delivery, with ``_op``, as Parquet part files."""

    tentative = True

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, flush_interval=0.5)

    def write_ops(self, batch: pa.RecordBatch) -> None:
        self.write(batch)
