"""``sparkflux run FILE --check``: a run compared with its example's reference.

After the run, the example's ``reference(spark, options)`` is computed in the same Spark
session (``runner.reference_result``) and compared with the output:

- rows: the run's ``rows_digest`` against the reference's (order and numbering aside). When
  they differ, the rows themselves are compared (``model.compare.compare_rows``): the counts
  and a few rows found only in the output or only in the reference, or a match when the
  differing rows are equal with floats to a relative ``FLOAT_RTOL``;
- numbering, when the reference has ``_sn``/``_snm``: the ordered ``output_digest`` too, and
  if only that differs, the rows with their sequence numbers that differ. With
  ``--unordered-output`` the order is not the run's promise: the rows with their sequence
  numbers are compared as multisets.

The output is kept for the comparison: read back from ``--output`` when there is one, else
collected in memory.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sparkflux.io.sinks import CollectSink
from sparkflux.model.compare import Comparison, compare_rows
from sparkflux.model.rows_digest import user_columns
from sparkflux.model.schema import SN, SNM
from sparkflux.runner import reference_result, run_example
from sparkflux.runtime.run_config import RunResult
from sparkflux.spark.expected import Expected

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """The verdict and the lines that explain it."""

    match: bool
    lines: list[str] = field(default_factory=list)
    comparison: Comparison | None = None


def check_output(output: pa.Table, metrics: dict[str, Any], expected: Expected) -> Check:
    """Compare a run's ``output`` (and its metrics' digests) with the reference."""
    rows_digest = metrics["rows_digest"]
    lines = [f"rows_digest    run {rows_digest[:16]}  reference {expected.rows_digest[:16]}"]
    if expected.numbered:
        lines.append(f"output_digest  run {metrics['output_digest'][:16]}  reference "
                     f"{(expected.output_digest or '')[:16]}")
    columns = user_columns(expected.table.column_names)
    comparison = None
    rows_ok = rows_digest == expected.rows_digest
    if not rows_ok:
        comparison = compare_rows(output, expected.table, columns)
        rows_ok = comparison.match
    if not rows_ok:
        assert comparison is not None
        return Check(False, [*lines, "MISMATCH: the rows differ", *comparison.summary()],
                     comparison)
    rows = f"the same {expected.rows:,} rows"
    tolerated = comparison.summary()[1:] if comparison is not None else []
    if not expected.numbered:
        return Check(True, [*lines, f"match: {rows} (the reference does not number its rows, "
                                    f"so their order is not compared)", *tolerated])
    unordered = bool(metrics.get("unordered_output"))
    if not unordered and metrics["output_digest"] == expected.output_digest:
        return Check(True, [*lines, f"match: {rows}, in the same order with the same "
                                    f"sequence numbers", *tolerated])
    numbered = compare_rows(output, expected.table, [*columns, SN, SNM])
    if unordered and numbered.match:
        return Check(True, [*lines, f"match: {rows} with the same sequence numbers, order "
                                    f"aside (--unordered-output)", *tolerated])
    return Check(False, [*lines, f"MISMATCH: {rows}, but not with the same sequence numbers",
                         *numbered.summary()[1:]], numbered)


def check_example(module: Any, args: argparse.Namespace, spark: Any = None,
                  display: Callable[..., None] | None = None,
                  announce: Callable[[str], None] = log.info) -> tuple[RunResult, Check]:
    """Run the example with ``args`` (``sparkflux run``'s options), then compute its reference
    in the same Spark session and compare."""
    from sparkflux.spark.launcher import default_master, spark_session

    if spark is None:
        slots = args.sites + getattr(args, "spare_sites", 0)
        spark = spark_session(args.master or default_master(slots))
    collect = None if args.output else CollectSink()
    result = run_example(module, args, sink=collect, spark=spark, display=display,
                         announce=announce)
    output = collect.table() if collect is not None else pq.read_table(args.output)
    announce("computing the reference ...")
    expected, seconds = reference_result(module, args, spark)
    check = check_output(output, result.metrics, expected)
    lines = [*check.lines, f"reference computed in {seconds:.1f}s"]
    return result, Check(check.match, lines, check.comparison)
