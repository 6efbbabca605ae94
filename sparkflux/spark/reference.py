"""The Spark SQL reference ("oracle") for the netmon dataflow.

The engine's answer is checked against an independent computation of the same semantics with
plain Spark SQL window functions, on the same deterministic input (``examples/netmon.py``):

- Ingress keeps only valid records and numbers them densely in arrival order: ``_sn`` is the
  position of an event among the valid events.
- classify: ``app`` of a packet is ``10 + m`` for the first dictionary word ``m`` (list order)
  that is a substring of its payload, else ``dport % 10``.
- GB1, session reconstruction per ``(src, dst)``: an END emits iff the previous event of the
  same ``(src, dst)`` is a START (one open session per key: a START (re)opens it, an END
  closes it), with ``dur = ts - lag(ts)``, the END's ``app`` and ``_sn`` and ``_snm = 0``.
- GB2, count window (history 2, slide 1, every 2) per ``(app, src)`` over GB1's output in
  ``_sn`` order: the n-th update emits iff n is even, with the max and avg of ``dur`` over the
  current and the previous update.

The result has netmon's output columns and its ``_sn``/``_snm``, so both of the run's digests
can be compared with it; ``sparkflux.spark.expected`` collects it (as it does any example's
reference) with the columns and types of the compiled dataflow's output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sparkflux.spark.expected import collect

# netmon's output columns and its numbering, as the engine's sink receives them.
RESULT_SCHEMA = pa.schema(
    [
        pa.field("app", pa.int32()),
        pa.field("src", pa.int32()),
        pa.field("max_dur", pa.int64()),
        pa.field("avg_dur", pa.float64()),
        pa.field("_sn", pa.int64()),
        pa.field("_snm", pa.int64()),
    ]
)

# The input columns the netmon semantics read (sport and length are never used, so they are
# not shipped to Spark; payload only matters when there is a dictionary).
_USED = ("src", "dst", "dport", "kind", "ts")


class _Source(Protocol):
    schema: pa.Schema

    def batches(self) -> Iterator[pa.RecordBatch | list[dict[str, Any]]]: ...


def _value_ok(value: Any, typ: pa.DataType) -> bool:
    """Whether a plain Python ``value`` is a valid, non-null value of Arrow type ``typ``."""
    if value is None:
        return False
    if pa.types.is_integer(typ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return False
        info = np.iinfo(typ.to_pandas_dtype())
        return int(info.min) <= int(value) <= int(info.max)
    if pa.types.is_floating(typ):
        return isinstance(value, float | int | np.floating) and not isinstance(value, bool)
    if pa.types.is_boolean(typ):
        return isinstance(value, bool | np.bool_)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return isinstance(value, str)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return isinstance(value, bytes)
    return False


def valid_record(record: dict[str, Any], schema: pa.Schema) -> bool:
    """Whether a dict record has every column of ``schema`` with a value of the right type."""
    return all(f.name in record and _value_ok(record[f.name], f.type) for f in schema)


def valid_events(source: _Source) -> pa.Table:
    """The source's valid events, in arrival order, as one Arrow table with its ``schema``.

    Record batches are valid by construction; dict records are kept only if ``valid_record``.
    """
    schema = source.schema
    batches: list[pa.RecordBatch] = []
    for item in source.batches():
        if isinstance(item, pa.RecordBatch):
            batches.append(item.select(schema.names).cast(schema))
        else:
            rows = [r for r in _as_list(item) if valid_record(r, schema)]
            if rows:
                batches.append(pa.RecordBatch.from_pylist(rows, schema=schema))
    return pa.Table.from_batches(batches, schema=schema)


def _as_list(item: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return item if isinstance(item, list) else list(item)


def _classify(words: list[str] | None) -> Column:
    """``app`` as a CASE WHEN chain: the first word found in the payload, else dport % 10."""
    fallback = F.col("dport").bitwiseAND(F.lit(0x7FFFFFFF)) % F.lit(10)
    if not words:
        return fallback.cast("int")
    expr = None
    for m, word in enumerate(words):
        hit = F.instr(F.col("payload"), word) > 0
        expr = F.when(hit, F.lit(10 + m)) if expr is None else expr.when(hit, F.lit(10 + m))
    assert expr is not None  # words is not empty
    return expr.otherwise(fallback).cast("int")


def netmon_reference(spark: SparkSession, source: _Source, words: list[str] | None) -> DataFrame:
    """The expected netmon output for ``source``'s valid events, ordered by ``_sn``.

    Columns: app int32, src int32, max_dur int64, avg_dur float64, _sn int64, _snm int64.
    """
    table = valid_events(source)
    cols = [*_USED, "payload"] if words else list(_USED)
    table = table.select(cols).append_column(
        "_sn", pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    events = spark.createDataFrame(table)

    by_pair = Window.partitionBy("src", "dst").orderBy("_sn")
    sessions = (
        events.withColumn("prev_kind", F.lag("kind").over(by_pair))
        .withColumn("prev_ts", F.lag("ts").over(by_pair))
        .where((F.col("kind") == 1) & (F.col("prev_kind") == 0))
        .select(
            _classify(words).alias("app"),
            F.col("src").cast("int").alias("src"),
            (F.col("ts") - F.col("prev_ts")).cast("long").alias("dur"),
            F.col("_sn"),
        )
    )

    by_group = Window.partitionBy("app", "src").orderBy("_sn")
    last_two = by_group.rowsBetween(-1, Window.currentRow)
    stats = (
        sessions.withColumn("n", F.row_number().over(by_group))
        .withColumn("max_dur", F.max("dur").over(last_two))
        .withColumn("avg_dur", F.avg("dur").over(last_two))
        .where(F.col("n") % 2 == 0)
    )
    return stats.select(
        F.col("app").cast("int"),
        F.col("src").cast("int"),
        F.col("max_dur").cast("long"),
        F.col("avg_dur").cast("double"),
        F.col("_sn").cast("long"),
        F.lit(0).cast("long").alias("_snm"),
    ).orderBy("_sn")


def reference_table(df: DataFrame) -> pa.Table:
    """netmon's reference result as an Arrow table with exactly ``RESULT_SCHEMA``, in SN
    order."""
    return collect(df, RESULT_SCHEMA, "netmon's reference").table


def reference_digest(df: DataFrame) -> tuple[str, int]:
    """``(digest_of(result) hex digest, row count)`` of netmon's ordered reference result."""
    expected = collect(df, RESULT_SCHEMA, "netmon's reference")
    assert expected.output_digest is not None
    return expected.output_digest, expected.rows
