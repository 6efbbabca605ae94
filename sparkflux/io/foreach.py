"""``foreach_batch``: a sink that hands each output batch to a function, with its sequence
range, like Spark's ``foreachBatch(df, epoch_id)``.

``fn(batch, first_sn, last_sn)`` is called once per batch the egress delivers (empty ones are
skipped), in output order, with the ``_sn`` of its first and last row. The output is exactly
once and in SN order, and a rerun over the same input delivers the same rows with the same
SNs, so the range identifies the rows: a function that writes somewhere idempotently can key
what it writes on it. Batch boundaries are not deterministic (they depend on timing), so
key on rows' own ``_sn``/``_snm`` (kept in the batch unless ``sequence_columns=False``), or
on fixed SN ranges as ``TableSink`` does, not on the ranges of the calls.

``batch`` is a ``pyarrow.RecordBatch`` of the sink's columns (timing columns dropped), or, when
``spark`` is given, a Spark DataFrame made from it in that session. The function runs on the
driver's event loop, between deliveries: a slow function slows the output (and, through
flow control, nothing else: admission never waits for the output); an exception stops the
run with its traceback.

``tentative=True`` (``--consistency eventual``): ``fn`` gets every delivery, each batch
with a column ``_op`` (``insert``, ``tentative``, ``undo``, ``rec_done``;
``io/tentative_output.py``); the ``undo`` and ``rec_done`` markers come as one row with
every other column null, and a range of ``(-1, -1)``. Otherwise the stable rows alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sparkflux.dataflow.api import Sink
from sparkflux.io.tentative_output import OP
from sparkflux.model.schema import SN, SNM, TIMING_COLUMNS


class ForeachBatchSink(Sink):
    """Calls ``fn(batch, first_sn, last_sn)`` for every output batch (see the module)."""

    def __init__(self, fn: Callable[[Any, int, int], None], *, spark: Any = None,
                 sequence_columns: bool = True, tentative: bool = False) -> None:
        self.fn = fn
        self.tentative = tentative
        self.spark = spark
        self.sequence_columns = sequence_columns
        self._keep: list[str] = []

    def open(self, schema: pa.Schema) -> None:
        drop = set(TIMING_COLUMNS) | (set() if self.sequence_columns else {SN, SNM})
        self._keep = [n for n in schema.names if n not in drop]

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        sn = batch.column(SN)
        first, last = sn[0].as_py(), sn[-1].as_py()
        self._call(batch.select(self._keep), first, last)

    def write_ops(self, batch: pa.RecordBatch) -> None:
        marker = batch.column(OP)[0].as_py() in ("undo", "rec_done")
        first, last = (-1, -1) if marker else (batch.column(SN)[0].as_py(),
                                                batch.column(SN)[-1].as_py())
        self._call(batch.select([*self._keep, OP]), first, last)

    def _call(self, rows: pa.RecordBatch, first: int, last: int) -> None:
        if self.spark is not None:
            self.fn(self.spark.createDataFrame(pa.Table.from_batches([rows])), first, last)
        else:
            self.fn(rows, first, last)


def foreach_batch(fn: Callable[[Any, int, int], None], *, spark: Any = None,
                  sequence_columns: bool = True, tentative: bool = False) -> ForeachBatchSink:
    """``stream.sink(foreach_batch(fn))``: see ``ForeachBatchSink``."""
    return ForeachBatchSink(fn, spark=spark, sequence_columns=sequence_columns,
                            tentative=tentative)
