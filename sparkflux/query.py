"""The programmatic entry: ``sparkflux.start(dataflow, spark=spark, **options)`` runs a
dataflow in the background and returns a ``FluxQuery``, the handle Spark's
``DataStreamWriter.start()`` gives as a ``StreamingQuery``: ``status``, ``metrics``,
``await_termination(timeout)``, ``stop()``.

    import sparkflux
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[6,400]").getOrCreate()
    query = sparkflux.start(build_my_dataflow(), spark=spark, sites=4, ha="flux")
    print(query.status)
    query.await_termination()
    print(query.metrics["output_digest"])

The options are ``sparkflux run``'s, named in Python (``--spare-sites`` is ``spare_sites``;
``kill=["1@3"]``), the fields of ``RunOptions`` (``runtime/run_options.py``), which checks
them. The session is checked before
anything starts (``spark/session_check.py``): a setting that would break the run raises
``PlanError`` saying what to change. Without ``spark`` a session is made with every setting
the job needs (the master from ``master=``, from spark-submit, or local mode).

``stop()`` ends the input: every source ends at its next batch boundary (its ``close()``
hook is called), what was admitted is processed and written, and the sinks are closed, so a
stopped query's output is complete up to where its input ended. A run that fails raises
``RunFailed`` from ``await_termination`` (and ``exception()`` returns it), as a
``StreamingQuery`` raises ``StreamingQueryException``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkflux.dataflow.api import Dataflow, Sink
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.io.sinks import DeadLetters, NullSink, ParquetSink
from sparkflux.model.errors import PlanError
from sparkflux.options import run_config
from sparkflux.runtime.progress import QueryProgress, QueryStatus, RunEvent
from sparkflux.runtime.reports import result_metrics
from sparkflux.runtime.run_config import LiveStats, RunFailed, RunResult
from sparkflux.spark.job import Launched, launch, supervise

log = logging.getLogger(__name__)


class FluxQuery:
    """A running dataflow (made by ``start``)."""

    def __init__(self, launched: Launched) -> None:
        self._run = launched
        self.id = str(uuid.uuid4())
        self.name = launched.plan.name
        self.result: RunResult | None = None
        self._error: BaseException | None = None
        self.done = threading.Event()  # set once the run has ended, either way
        self._thread = threading.Thread(target=self._supervise, name=f"sparkflux-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        try:
            self.result = supervise(self._run)
        except BaseException as e:  # noqa: BLE001 - raised by await_termination
            self._error = e
        finally:
            self.done.set()

    @property
    def stats(self) -> LiveStats:
        """The live counters (what the progress display draws)."""
        return self._run.host.stats

    @property
    def is_active(self) -> bool:
        return not self.done.is_set()

    @property
    def status(self) -> QueryStatus:
        """What the run is doing now (a ``QueryStatus``; ``status["message"]`` reads as
        PySpark's dict does): its phase, the input's state (admitting, blocked and by what,
        idle, ended), records in and out, dead letters, input dropped (``rate``), live sites,
        failures so far, and why it failed."""
        host = self._run.host
        s = host.stats
        live, failures = host.on_loop(lambda: (
            len(host.controller.view.members) - len(host.dead), len(host.failures)))
        return QueryStatus(
            message="failed" if self._error is not None else
                    "finished" if self.done.is_set() else s.phase,
            is_active=self.is_active,
            input=host.input_state + (f" (by {host.blocked_by})"
                                      if host.input_state == "blocked" else ""),
            input_records=s.events_in, output_records=s.results_out,
            dead_letters=s.dead_letters, dropped=s.dropped, sites=live, failures=failures,
            error=None if self._error is None else str(self._error))

    @property
    def last_progress(self) -> QueryProgress | None:
        """The latest interval's progress (Spark's ``lastProgress``; None before the input
        starts): rows and rates per source, processed and output rates, latency, the
        stages' watermarks, the operators' state, the sites and their roles, and the
        failures, take-overs, catch-ups and moves of the interval."""
        return self._run.host.progress.last

    @property
    def recent_progress(self) -> list[QueryProgress]:
        """The last intervals' progress, oldest first (Spark's ``recentProgress``)."""
        log_ = self._run.host.progress
        with log_.lock:
            return list(log_.recent)

    @property
    def events(self) -> list[RunEvent]:
        """Every failure, take-over, adoption, catch-up, move and stall so far, in order."""
        log_ = self._run.host.progress
        with log_.lock:
            return list(log_.events)

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's metrics (``sparkflux run --metrics``): a snapshot while it runs, the
        final ones after it ended."""
        if self.result is not None:
            return self.result.metrics
        return self._run.host.on_loop(lambda: result_metrics(self._run.host))

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the end (at most ``timeout`` seconds): True once it ended; raises the
        run's ``RunFailed`` if it failed."""
        if not self.done.wait(timeout):
            return False
        if self._error is not None:
            raise self._error
        return True

    def exception(self) -> BaseException | None:
        """Why the run failed (None while it runs or when it finished)."""
        return self._error

    def stop(self, timeout: float | None = None) -> bool:
        """End the input now and wait (at most ``timeout``) for what was admitted to be
        processed and written; True once the run ended."""
        self._run.host.end_input()
        return self.await_termination(timeout)

    def rescale(self, sites: int, wait: bool = True, timeout: float | None = None
                ) -> dict[str, Any] | None:
        """Spread the running query over ``sites`` sites, without stopping it
        (docs/rescaling.md): growing, that many new site tasks start in Spark and adopt new
        slots; shrinking, the highest slots retire. Either way the copies that change site
        move by make-before-break moves, so the output is the same row for row. Needs
        ``ha="flux"``. Returns the rescale's record once it is done (``wait``; at most
        ``timeout`` seconds, then ``TimeoutError``), else None at once. Raises ``PlanError``
        when it cannot be done, saying why (another rescale running, fewer sites than
        copies, no free task slot in local mode, ...)."""
        if isinstance(sites, bool) or not isinstance(sites, int):
            raise PlanError(f"rescale(sites={sites!r}): give a number of sites")
        host = self._run.host
        short = local_slots_short(self._run.spark, host, sites)
        if short:
            raise PlanError(short)
        why = host.rescale(sites)
        if why:
            raise PlanError(f"cannot rescale to {sites} sites: {why}")
        if not wait:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        while not host.rescaled.wait(0.1):
            if self.done.is_set():
                raise PlanError(f"the query ended before its rescale to {sites} sites did")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the rescale to {sites} sites is still running after "
                                   f"{timeout} s (query.events tells how far it is)")
        return host.rescales[-1]

    def abort(self, reason: str = "aborted by the user") -> None:
        """Stop at once: nothing more is delivered; the run fails with ``reason``."""
        self._run.host.stop(reason)
        self.done.wait(60)

    def __repr__(self) -> str:
        return f"<FluxQuery {self.name} {self.status['message']}>"


def local_slots_short(spark: Any, host: Any, sites: int) -> str:
    """In Spark local mode, why ``sites`` sites cannot run at once ("" if they can, or on a
    cluster, whose executors the run cannot count): local mode runs as many tasks at once
    as its master's first number, and every site, standby and site-read source takes one."""
    master = str(spark.sparkContext.master)
    m = re.match(r"local\[(\d+)", master)
    if m is None:
        return ""
    slots = int(m[1])
    busy, active = host.on_loop(lambda: (
        len(host.controller.view.members) - len(host.dead) + len(host.standbys),
        len(host.controller.active_slots())))
    need = busy + sum(src.task_slots for src in host.plan.sources) + max(0, sites - active)
    if need <= slots:
        return ""
    return (f"cannot rescale to {sites} sites: Spark local mode runs {slots} tasks at once "
            f"({master}) and {need} would be needed; start the session with "
            f"local[{need},400] or more")


def start(dataflow: Dataflow, spark: Any = None, *, sink: Sink | None = None,
          output: str | Path | None = None, dead_letters: DeadLetters | None = None,
          dead_letter: str | Path | None = None, dataflow_file: str | Path | None = None,
          announce: Callable[[str], None] | None = log.info, **options: Any) -> FluxQuery:
    """Compile ``dataflow`` and start running it on ``spark``'s cluster; return at once.

    ``sink``: where a sink of the dataflow that names none writes (default: ``output``, a
    directory of Parquet parts readable after any crash, or nothing but counts);
    ``dead_letter``: a JSON-lines file for rejected input (default: beside ``output`` with its
    suffix replaced, ``out.parquet`` -> ``out.dead-letter.jsonl``, else kept in memory);
    ``dataflow_file``: the file the
    dataflow is defined in, whose neighbouring modules are shipped to the executors;
    ``announce``: gets the plan's description and the run's milestones (when the input
    starts); ``options``: ``sparkflux run``'s (``sites``, ``partitions``, ``ha``, ``replicas``,
    ``master``, ``rate``, ``window``, ``spare_sites``, ``kill``, ...). Raises PlanError for a
    bad option, dataflow or session setting, RunFailed if the driver cannot listen."""
    with _LOCK:
        running = _RUNNING.get(id(dataflow))
        if running is not None:
            which = "starting" if running[1] is None else f"query {running[1].id}"
            raise PlanError(f"dataflow {dataflow.name!r} is already running ({which}): its "
                            f"sources and sinks cannot serve two runs. Stop it first "
                            f"(query.stop() or query.abort()), or build a new Dataflow for a "
                            f"second run")
        _RUNNING[id(dataflow)] = (dataflow, None)  # reserved while it starts
    try:
        query = _start(dataflow, spark, sink, output, dead_letters, dead_letter, dataflow_file,
                       announce, options)
    except BaseException:
        with _LOCK:
            del _RUNNING[id(dataflow)]
        raise
    with _LOCK:
        _RUNNING[id(dataflow)] = (dataflow, query)
    threading.Thread(target=_forget_when_done, args=(dataflow, query), daemon=True,
                     name=f"sparkflux-{dataflow.name}-end").start()
    return query


def _start(dataflow: Dataflow, spark: Any, sink: Sink | None, output: str | Path | None,
           dead_letters: DeadLetters | None, dead_letter: str | Path | None,
           dataflow_file: str | Path | None, announce: Callable[[str], None] | None,
           options: dict[str, Any]) -> FluxQuery:
    if options.get("restart"):  # a driver cannot start itself again once it is dead
        raise PlanError(f"restart={options['restart']!r} is sparkflux run's --restart: a "
                        f"program that calls sparkflux.start is restarted by running it under "
                        f"sparkflux supervise -- python PROGRAM (docs/supervision.md)")
    cfg = run_config(**options)
    plan = compile_plan(dataflow, cfg.partitions, cfg.sites)
    if cfg.rate is not None and plan.isn_span is not None:
        raise PlanError(f"--rate paces records as the driver reads them, and source "
                        f"{plan.streams[0].name!r} is read on the sites (read_on='sites'): "
                        f"its rows never reach the driver. Leave --rate out (the files' "
                        f"landing paces the input) or read it with read_on='driver'")
    if sink is None:
        sink = ParquetSink(output) if output else NullSink()
    if dead_letters is None:
        path = dead_letter or (Path(output).with_suffix(".dead-letter.jsonl") if output
                               else None)
        dead_letters = DeadLetters(path)
    if announce is not None:
        announce(plan.describe())
    launched = launch(plan, cfg, sink, dead_letters, spark, dataflow_file, announce)
    return FluxQuery(launched)


# The dataflows running in this process, by id, each with its query (a strong reference to
# the dataflow keeps its id from being reused meanwhile).
_RUNNING: dict[int, tuple[Dataflow, FluxQuery | None]] = {}
_LOCK = threading.Lock()


def _forget_when_done(dataflow: Dataflow, query: FluxQuery) -> None:
    query.done.wait()
    with _LOCK:
        if _RUNNING.get(id(dataflow), (None, None))[1] is query:
            del _RUNNING[id(dataflow)]


__all__ = ["FluxQuery", "RunFailed", "start"]
