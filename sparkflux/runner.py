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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.operators.base import PlanError
from sparkflux.runtime.run_config import LiveStats, RunConfig, RunResult
from sparkflux.runtime.sinks import DeadLetters, NullSink, ParquetSink
from sparkflux.spark.job import run

if TYPE_CHECKING:
    from sparkflux.spark.expected import Expected

log = logging.getLogger(__name__)


def run_example(module: Any, args: argparse.Namespace, sink: Any = None,
                dead: DeadLetters | None = None, spark: Any = None,
                display: Callable[[LiveStats, threading.Event], None] | None = None,
                announce: Callable[[str], None] = log.info) -> RunResult:
    """Build, compile and run an example dataflow module with parsed ``args`` (the options of
    ``sparkflux run``); ``display`` shows live progress, ``announce`` gets the plan's
    description. Raises PlanError for a bad option, RunFailed if the run cannot finish."""
    opts = module.options(args)
    if hasattr(opts, "batch") and getattr(args, "batch_size", None):
        from dataclasses import replace

        opts = replace(opts, batch=args.batch_size)
    plan = compile_plan(module.build(opts), args.partitions, args.sites)
    if args.rate is not None and args.rate <= 0:
        raise PlanError("--rate must be positive")
    if sink is None:
        sink = ParquetSink(args.output) if args.output else NullSink()
    if dead is None:
        path = args.dead_letter or (str(Path(args.output).with_suffix(".dead-letter.jsonl"))
                                    if args.output else None)
        dead = DeadLetters(path)
    cfg = RunConfig(sites=args.sites, partitions=args.partitions, master=args.master,
                    ha=args.ha, replicas=replicas_option(args.ha, getattr(args, "replicas", None),
                                                         args.sites),
                    rate=args.rate, ingress_buffer=args.ingress_buffer,
                    window=window_option(args.window),
                    stall_timeout=stall_timeout(getattr(args, "stall_timeout", 30.0)),
                    kills=parse_kills(getattr(args, "kill", []), args.sites),
                    adopted_kills=parse_adopted_kills(getattr(args, "kill", []), args.sites),
                    process_kills=parse_process_kills(getattr(args, "kill", []), args.sites,
                                                      args.master),
                    hangs=parse_hangs(getattr(args, "hang", []), args.sites),
                    tls=getattr(args, "tls", False),
                    max_frame_mb=getattr(args, "max_frame_mb", None),
                    heartbeat_timeout=getattr(args, "heartbeat_timeout", 10.0),
                    spares=getattr(args, "spare_sites", 0),
                    site_cpu=site_cpu_option(getattr(args, "site_cpu", None)),
                    slows=parse_slows(getattr(args, "slow", []), args.sites),
                    recovery=getattr(args, "recovery", "standby"),
                    balance=not getattr(args, "no_balance", False),
                    delta_min=seconds_option("--balance-delta-min",
                                       getattr(args, "balance_delta_min", 0.25)),
                    window_s=balance_window(getattr(args, "balance_window", 2.0)),
                    standby_wait=seconds_option("--standby-wait",
                                                getattr(args, "standby_wait", 5.0)))
    announce(plan.describe())
    return run(plan, cfg, sink, dead, spark=spark, display=display,
               dataflow_file=getattr(module, "__file__", None))


def replicas_option(ha: str, replicas: int | None, sites: int) -> int:
    """``--replicas``, checked against ``--ha`` and ``--sites`` (a bad one fails fast)."""
    if replicas is None:
        return 2 if ha == "flux" else 1
    if ha != "flux":
        raise PlanError("--replicas needs --ha flux (--ha none keeps one copy of every "
                        "partition)")
    if replicas < 2:
        raise PlanError(f"--replicas {replicas}: Flux-HA keeps at least 2 copies of every "
                        f"partition (for one copy, use --ha none)")
    if replicas > sites:
        raise PlanError(f"--replicas {replicas} keeps {replicas} copies of every partition on "
                        f"different sites: use --sites >= {replicas}")
    return replicas


def parse_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@SECONDS`` options, checked (a bad one fails fast with what to change).

    ``SITE@recovered+SECONDS`` kills the site that long after the first recovery completes;
    it comes back with a negative time: -(1 + SECONDS)."""
    out = []
    for spec in specs:
        if "@adopted+" in spec or ":" in spec:
            continue  # parse_adopted_kills, parse_process_kills
        try:
            site_s, at_s = spec.split("@")
            site = int(site_s)
            if at_s.startswith("recovered+"):
                out.append((site, -1.0 - float(at_s.removeprefix("recovered+"))))
                if not 0 <= site < sites:
                    raise ValueError
                continue
            at = float(at_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE@SECONDS (e.g. --kill 1@3), "
                            f"SITE@recovered+SECONDS or SITE@adopted+SECONDS") from None
        if not 0 <= site < sites or at < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
        out.append((site, at))
    return tuple(out)


def parse_process_kills(specs: list[str], sites: int, master: str | None
                        ) -> tuple[tuple[str, int, float], ...]:
    """``LEVEL:SITE@SECONDS`` options: SIGKILL the process that holds a site on this machine,
    ``python`` (the site's own process, from outside), ``executor`` (its executor JVM) or
    ``worker`` (the Worker daemon JVM that launched it); SITE may be ``most``: the one holding
    the most sites. A test tool for a standalone cluster on the driver's machine
    (``runtime/proctree.py``): in local mode the JVM above the sites is the driver's."""
    from sparkflux.runtime.proctree import LEVELS
    from sparkflux.runtime.run_config import MOST_SITES

    out = []
    for spec in specs:
        if ":" not in spec:
            continue
        try:
            level, rest = spec.split(":", 1)
            site_s, at_s = rest.split("@")
            site = MOST_SITES if site_s == "most" else int(site_s)
            at = float(at_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write LEVEL:SITE@SECONDS, LEVEL one of "
                            f"{', '.join(LEVELS)} and SITE a site or 'most' (e.g. --kill "
                            f"worker:most@20)") from None
        if level not in LEVELS:
            raise PlanError(f"--kill {spec!r}: {level!r} is not one of {', '.join(LEVELS)}")
        if not (site == MOST_SITES or 0 <= site < sites) or at < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1} or 'most', "
                            f"seconds >= 0")
        if not master or master.startswith("local"):
            raise PlanError(f"--kill {spec!r} kills a site's process, executor or Worker on "
                            f"this machine: it needs a Spark standalone cluster here (--master "
                            f"spark://...); in local mode the JVM above the sites is the "
                            f"driver's own")
        out.append((level, site, at))
    return tuple(out)


def parse_adopted_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@adopted+SECONDS`` options: kill the slot's next process that long after it
    adopts the slot (a standby killed right after its adoption)."""
    out = []
    for spec in specs:
        if "@adopted+" not in spec:
            continue
        try:
            site_s, delay_s = spec.split("@adopted+")
            site, delay = int(site_s), float(delay_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE@adopted+SECONDS, e.g. "
                            f"--kill 1@adopted+0.2") from None
        if not 0 <= site < sites or delay < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
        out.append((site, delay))
    return tuple(out)


def _site_at_value(option: str, what: str, example: str, specs: list[str], sites: int
                   ) -> tuple[tuple[int, float, float], ...]:
    """``SITE@SECONDS=VALUE`` options, checked: a site of the run, seconds >= 0, a value
    above 0 (a bad one fails fast with what to write)."""
    out = []
    for spec in specs:
        try:
            where, value_s = spec.split("=")
            site_s, at_s = where.split("@")
            site, at, value = int(site_s), float(at_s), float(value_s)
        except ValueError:
            raise PlanError(f"{option} {spec!r}: write SITE@SECONDS={what}, e.g. "
                            f"{option} {example}") from None
        if not 0 <= site < sites or at < 0 or value <= 0:
            raise PlanError(f"{option} {spec!r}: site in 0..{sites - 1}, seconds >= 0, "
                            f"{what.lower()} > 0")
        out.append((site, at, value))
    return tuple(out)


def parse_hangs(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``--hang SITE@SECONDS=DURATION`` options, checked."""
    return _site_at_value("--hang", "DURATION", "1@3=8", specs, sites)


def seconds_option(option: str, value: float) -> float:
    if not value > 0:
        raise PlanError(f"{option} {value}: give a positive number of seconds")
    return value


def window_option(value: int) -> int:
    """``--window``: input records admitted and not yet acknowledged by every first-stage
    replica. A window smaller than a source batch admits one batch at a time."""
    if not value >= 1:
        raise PlanError(f"--window {value}: give a number of input records, 1 or more")
    return value


def stall_timeout(value: float) -> float:
    if not value >= 0:
        raise PlanError(f"--stall-timeout {value}: give seconds, 0 or more (0: no watchdog)")
    return value


def balance_window(value: float) -> float:
    if not value >= 0:
        raise PlanError(f"--balance-window {value}: give seconds, 0 or more (0: each "
                        "collection phase alone)")
    return value


def site_cpu_option(value: float | None) -> float | None:
    if value is not None and not 0.0 < value <= 1.0:
        raise PlanError(f"--site-cpu {value}: give a fraction of wall time in (0, 1], e.g. 0.4")
    return value


def parse_slows(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``--slow SITE@SECONDS=FACTOR`` options, checked."""
    return _site_at_value("--slow", "FACTOR", "2@2=0.5", specs, sites)


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
