"""Running an example dataflow from the options of ``sparkflux run``: the library behind the
command, the demo, the tests and the benchmarks.

An example is a Python module with ``options(args)``, ``build(options)`` and, for checking,
``reference(spark, options)`` (a Spark SQL or DataFrame formulation of the same query).
``run_example`` turns the parsed options into a ``RunConfig`` (every option checked, a bad one
a ``PlanError`` that says what to change), compiles the dataflow and runs it;
``reference_result`` collects the reference as the dataflow's output (``output_digest`` when
it numbers its rows as the engine does, ``rows_digest`` always).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.io.sinks import DeadLetters
from sparkflux.model.errors import PlanError
from sparkflux.options import options_of
from sparkflux.query import start
from sparkflux.runtime.run_config import RunResult
from sparkflux.spark.job import interrupts_stop

if TYPE_CHECKING:
    from sparkflux.display import Display
    from sparkflux.spark.expected import Expected

log = logging.getLogger(__name__)


def run_example(module: Any, args: argparse.Namespace, sink: Any = None,
                dead: DeadLetters | None = None, spark: Any = None,
                display: Display | None = None,
                announce: Callable[[str], None] = log.info) -> RunResult:
    """Build, compile and run an example dataflow module with parsed ``args`` (the options of
    ``sparkflux run``); ``display`` shows live progress, ``announce`` gets the plan's
    description. Raises PlanError for a bad option, RunFailed if the run cannot finish."""
    opts = module.options(args)
    if hasattr(opts, "batch") and getattr(args, "batch_size", None):
        from dataclasses import replace

        opts = replace(opts, batch=args.batch_size)
    output, dead_letter = args.output, args.dead_letter
    table = getattr(args, "output_table", None)
    if table:
        if output:
            raise PlanError("give --output (a directory of parts) or --output-table (a table "
                            "Spark reads as it grows), not both")
        if sink is None:
            from sparkflux.io.table_sink import TableSink

            sink = TableSink(table)
        dead_letter = dead_letter or str(Path(table).with_suffix(".dead-letter.jsonl"))
    query = start(module.build(opts), spark=spark, sink=sink, dead_letters=dead,
                  output=output, dead_letter=dead_letter,
                  dataflow_file=getattr(module, "__file__", None), announce=announce,
                  **options_of(args))
    with interrupts_stop(query._run.host):  # Ctrl-C: end the input; again: abort
        if display is not None:
            display(query._run.host)
        query.await_termination()
    assert query.result is not None
    return query.result


def example_reference(example: str | Path, *argv: str, spark: Any = None) -> Expected:
    """The reference of the example file ``example`` with ``sparkflux reference``'s
    defaults and ``argv`` (e.g. ``"--events", "1000000"``): what a bench or a test compares
    a run's table with."""
    from sparkflux.cli import _example_parser

    parser, module = _example_parser("reference", str(example))
    expected, _ = reference_result(module, parser.parse_args([str(example), *argv]), spark)
    return expected


def reference_result(module: Any, args: argparse.Namespace, spark: Any = None
                     ) -> tuple[Expected, float]:
    """The example's ``reference(spark, options)`` collected with the columns and types of
    its compiled dataflow's output (PlanError if it has none, or other columns), and the
    seconds it took."""
    from sparkflux.spark.expected import collect
    from sparkflux.spark.launcher import spark_session

    if not hasattr(module, "reference"):
        raise PlanError(f"{module.__file__} has no reference(spark, options)")
    opts = module.options(args)
    # The output schema does not depend on the layout: compile for one site. The reference
    # is the first sink's (the run's output).
    schema = compile_plan(module.build(opts), 1, 1).sink_schema(0)
    t = time.time()
    spark = spark or spark_session(getattr(args, "master", None) or "local[2]",
                                   "sparkflux-reference")
    expected = collect(module.reference(spark, opts), schema,
                       f"the reference of {Path(module.__file__).name}")
    _ = expected.rows_digest, expected.output_digest  # computed within the timing
    return expected, time.time() - t


def reference_digest(module: Any, args: argparse.Namespace, spark: Any = None
                     ) -> tuple[str | None, int, float]:
    """``(output_digest, rows, seconds)`` of the example's reference; the digest is None when
    the reference has no ``_sn``/``_snm`` (``reference_result`` has its rows digest)."""
    expected, seconds = reference_result(module, args, spark)
    return expected.output_digest, expected.rows, seconds
