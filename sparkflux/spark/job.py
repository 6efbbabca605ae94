"""A run on Spark: the driver host in a background thread, the sites as a Spark job, the
run's secret and listening addresses, and its result (``run``, what ``sparkflux run`` calls).

The host (``runtime/driver.py``) is the real world's driver side; this module is what ties it to
a SparkSession: where to listen (loopback in local mode, the driver's advertised address on a
cluster), the security settings handed to the sites with the job, the modules beside the
dataflow file shipped with it (``shipping.py``), a start deadline that says what the master
lacks, the sites' failed attempts while none has registered (``control/start_failures.py``),
and the Spark job's own failure.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.io.sinks import DeadLetters, Sink
from sparkflux.model.errors import PlanError
from sparkflux.runtime.dashboard import start_dashboard
from sparkflux.runtime.driver import Host, open_sinks, sinks_of
from sparkflux.runtime.fault_specs import KillProcess
from sparkflux.runtime.plot import timeline_events
from sparkflux.runtime.reports import result_metrics
from sparkflux.runtime.restore import Restored, latest
from sparkflux.runtime.run_config import RunConfig, RunFailed, RunResult
from sparkflux.runtime.security import SECRET_CONF, make_security, resolve_secret
from sparkflux.runtime.snapshots import SnapshotStore
from sparkflux.spark.launcher import (
    SiteJob,
    cancel_sites,
    default_master,
    failed_attempts,
    is_local,
    launch_sites,
    spark_log_file,
    spark_session,
)
from sparkflux.spark.session_check import check_session
from sparkflux.spark.session_facts import facts
from sparkflux.spark.shipping import ship_beside
from sparkflux.spark.site_task import SiteSettings

log = logging.getLogger(__name__)
FAILED_POLL_S = 1.0  # how often the sites' failed attempts are counted until the run starts


@dataclass
class Launched:
    """A run whose driver host listens and whose sites' Spark job is submitted."""

    host: Host
    job: SiteJob
    spark: Any
    plan: PhysicalPlan
    cfg: RunConfig
    thread: threading.Thread
    deadline: float


def launch(plan: PhysicalPlan, cfg: RunConfig, sink: Sink, dead_letters: DeadLetters,
           spark: Any = None, dataflow_file: str | Path | None = None,
           announce: Callable[[str], None] | None = None) -> Launched:
    """Start the driver host and submit the sites' Spark job; return at once (``supervise``
    then waits for the end). ``spark``: the user's session, checked (``session_check.py``:
    a bad setting raises PlanError saying what to change), or None for a session made here
    with every setting the job needs. ``dataflow_file``: the file the dataflow came from;
    the modules beside it are shipped. ``announce`` gets the run's milestones (the input's
    start)."""
    if cfg.arrival_order:  # the driver's egress and every site read it from the plan
        plan = replace(plan, arrival_order=True)
    if cfg.stream_replicas:  # so does the garbage collection of stream replicas
        plan = replace(plan, stream_replicas=cfg.stream_replicas)
    sinks = sinks_of(plan, sink)
    restored = restore_point(plan, cfg)
    if restored is not None:  # the sinks go on after the checkpoint's cut
        for k, out in enumerate(sinks):
            out.resume(restored.sink_record(k), restored.cut)
        dead_letters.resume(restored.dead_letters)
        cfg = replace(cfg, restore=restored.checkpoint)
    open_sinks(plan, sinks)  # a sink that cannot open fails the run before Spark starts
    hosts: list[Host] = []
    try:
        return _launch(plan, cfg, sinks, dead_letters, spark, dataflow_file, announce, hosts,
                       restored)
    except BaseException:
        if hosts:  # the host's thread closes the sinks as it ends
            hosts[0].stop("the launch failed")
            hosts[0].done.wait(30)
        else:
            for out in sinks:
                out.close()
        raise


def restore_point(plan: PhysicalPlan, cfg: RunConfig) -> Restored | None:
    """With ``--checkpoint``: the newest complete checkpoint there (None: a first run), its
    dataflow checked against this one's (PlanError, naming what differs)."""
    if cfg.checkpoint is None:
        return None
    if plan.isn_span is not None:
        raise PlanError("--checkpoint needs the sources read on the driver: a source read on "
                        "the sites (read_on='sites') cannot resume from a checkpoint yet; "
                        "drop read_on, or --checkpoint")
    try:
        store = SnapshotStore(cfg.checkpoint)
    except OSError as e:
        raise PlanError(f"--checkpoint {cfg.checkpoint}: cannot open it: {e}") from None
    try:
        return latest(store, plan)
    finally:
        store.close()


def _launch(plan: PhysicalPlan, cfg: RunConfig, sinks: list[Sink], dead_letters: DeadLetters,
            spark: Any, dataflow_file: str | Path | None,
            announce: Callable[[str], None] | None, hosts: list[Host],
            restored: Restored | None = None) -> Launched:
    source_slots = sum(src.task_slots for src in plan.sources)
    # --rescale: room for the new sites' tasks too
    grown = max([0, *(r.sites - cfg.sites for r in cfg.rescales)])
    master = cfg.master or default_master(cfg.sites + cfg.spares + source_slots + grown)
    tasks = plan.sites + cfg.spares
    own = spark is None  # a session made here has every setting; the user's is checked
    if own:
        spark = spark_session(master)
    master = spark.sparkContext.master
    if cfg.kills_of(KillProcess) and is_local(master):
        raise PlanError("--kill LEVEL:SITE@SECONDS kills a site's process, executor or Worker on "
                        "this machine: it needs a Spark standalone cluster here (--master "
                        "spark://...); in local mode the JVM above the sites is the driver's")
    check_session(spark, tasks, cfg.ha != "none", user_session=not own,
                  source_slots={type(src).__name__: src.task_slots
                                for src in plan.sources if src.task_slots})
    if dataflow_file is not None:
        path = Path(dataflow_file).resolve()
        cfg = replace(cfg, dataflow=path.name, shipped=ship_beside(spark, path.parent))
    conf = spark.sparkContext.getConf()
    if cfg.security is None:
        secret, origin = resolve_secret(conf.get(SECRET_CONF, None))
        log.info("run secret: %s", origin)
        cfg = replace(cfg, security=make_security(secret, cfg.tls, cfg.max_frame_mb))
    if cfg.site_memory is None and cfg.ha != "race":  # racing copies spill nothing yet
        cfg = replace(cfg, site_memory=derived_site_memory(conf, tasks))
    bind, advertise = driver_addresses(master, conf, cfg.bind_host)
    cfg = replace(cfg, local=is_local(master), bind_host=bind, wan_start=time.time())
    host = Host(plan, cfg, None, dead_letters, announce, opened=sinks, restored=restored)
    hosts.append(host)
    thread = threading.Thread(target=host.serve_forever, name="sparkflux-host", daemon=True)
    thread.start()
    host.ready.wait(30)
    if host.failure is not None:  # e.g. a sink that cannot open: before any site starts
        raise RunFailed(host.failure)
    if host.port is None:
        raise RunFailed(f"the driver host could not listen on {bind} (the address the "
                        f"executors are told to connect to is {advertise}); set "
                        f"spark.driver.host / spark.driver.bindAddress to an address of "
                        f"this machine the executors can reach")
    try:
        host.dashboard = start_dashboard(host, bind, cfg.ui_port, cfg.local)
    except OSError as e:
        raise PlanError(str(e)) from None
    if host.dashboard is not None and announce is not None:
        announce(f"dashboard: {host.dashboard.url} (Prometheus: {host.dashboard.url}/metrics)")
    # Sites on a cluster bind to, and advertise, their address towards the driver ("").
    site_bind = bind if is_local(master) else ""
    assert cfg.security is not None
    host.start_watch.driver = f"{advertise}:{host.port}"
    if own:
        host.start_watch.logs = f"Spark's log is {spark_log_file()}"
    host.executor_start_s = facts(spark.sparkContext).executor_start_s
    host.launched_at = time.time()
    settings = SiteSettings.of(cfg, (advertise, host.port), site_bind)
    if cfg.eventual is not None:  # the sites' merges hold rows for the delay bound at most
        plan = replace(plan, max_delay=cfg.eventual.max_delay)
    job = launch_sites(spark, plan, settings, tasks)
    watcher = threading.Thread(target=_watch_job, args=(job, host), daemon=True)
    watcher.start()
    launched = [tasks]  # task slot numbers given out so far

    def launch_more(count: int) -> None:
        """A rescale's new site tasks: one more Spark job in the run's job group."""
        more = launch_sites(spark, plan, settings, count, first=launched[0], group=job.group)
        launched[0] += count
        job.more.append(more)
        threading.Thread(target=_watch_job, args=(more, host), daemon=True).start()

    host.launch_more = launch_more
    return Launched(host=host, job=job, spark=spark, plan=plan, cfg=cfg, thread=thread,
                    deadline=time.monotonic() + cfg.start_timeout)


def derived_site_memory(conf: Any, tasks: int) -> float | None:
    """Each site's memory budget in MB when ``--site-memory`` is not given: the session's
    ``spark.sparkflux.siteMemory``, else ``spark.executor.pyspark.memory`` (what Spark lets
    an executor's Python workers use) shared by the site tasks one executor runs at once (its
    cores, or all the run's tasks when the session does not say); None: no budget."""
    own = conf.get("spark.sparkflux.siteMemory", None)
    if own:
        return size_mb(own, "spark.sparkflux.siteMemory")
    python = conf.get("spark.executor.pyspark.memory", None)
    if not python:
        return None
    cores = int(conf.get("spark.executor.cores", "0") or 0) or tasks
    return size_mb(python, "spark.executor.pyspark.memory") / max(1, cores)


def size_mb(text: str, name: str) -> float:
    """A Spark size (``512m``, ``2g``, ``1024``: MB) in MB; PlanError naming the setting."""
    units = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 ** 2}
    t = str(text).strip().lower().removesuffix("b")
    try:
        return float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise PlanError(f"{name}={text!r}: give a size such as 512m or 2g") from None


def driver_addresses(master: str, conf: Any, local_bind: str) -> tuple[str, str]:
    """Where the driver host listens and the address the sites are told to dial: loopback
    in local mode; on a cluster the driver's advertised address (``spark.driver.host``),
    bound there too (or on ``spark.driver.bindAddress`` when set, e.g. in a container whose
    advertised address is not its own), never every interface."""
    if is_local(master):
        return local_bind, local_bind
    advertise = conf.get("spark.driver.host", None) or local_address()
    return conf.get("spark.driver.bindAddress", None) or advertise, advertise


def local_address() -> str:
    """This machine's address (Spark's choice when spark.driver.host is unset)."""
    import socket

    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def supervise(run: Launched) -> RunResult:
    """Wait for the run's end and return its result (raises RunFailed). While no site has
    registered, counts the sites' failed attempts (``control/start_failures.py``) and holds
    the start deadline."""
    host, job, spark, plan, cfg = run.host, run.job, run.spark, run.plan, run.cfg
    next_poll = time.monotonic()
    while not host.done.wait(0.2):
        started = host.on_loop(lambda: host.controller.started)
        if not started and time.monotonic() >= next_poll:
            # Failed attempts that sent no report (start_report.py says which cannot).
            failed = failed_attempts(spark, job)
            if failed is not None:
                host.tasks_failed(failed)
            next_poll = time.monotonic() + FAILED_POLL_S
        if not started and time.monotonic() > run.deadline:
            registered = host.on_loop(lambda: host.controller.registered)
            host.stop(
                f"only {registered} of {plan.sites} sites registered within "
                f"{cfg.start_timeout:.0f}s; the Spark master needs at least {plan.sites} free "
                f"task slots (local mode: local[{plan.sites}] or more), and the executors must "
                f"reach the driver at {host.start_watch.driver} (spark.driver.host)"
            )
    if host.failure:
        cancel_sites(spark, job)
        raise RunFailed(host.failure)
    if not job.done.wait(5):
        # A task Spark restarted near the end (a standby) cannot reach the finished driver;
        # stop it rather than let it retry.
        cancel_sites(spark, job)
        job.done.wait(15)
    for more in job.more:  # a rescale's site tasks: they end with the run
        more.done.wait(5)
    if job.error is not None and not job.summaries:
        log.info("site job ended with %s", job.error)
    run.thread.join(10)
    summaries = job.summaries + [x for more in job.more for x in more.summaries]
    memory = {m.epoch for m in host.controller.moves if m.reason == "memory"}
    return RunResult(metrics=result_metrics(host), sites=summaries, timeline=host.metrics,
                     ingress_timeline=(host.ingress_times, host.ingress_counts),
                     completed=host.completed,
                     events=timeline_events(
                         host.faults.kills, host.failures, host.recovered,
                         moves=[t for e, t in host.move_started.items() if e not in memory],
                         slows=host.faults.slowed, squeezes=host.faults.squeezed,
                         memory_moves=[host.move_started[e] for e in memory
                                       if e in host.move_started],
                         states=host.core.episodes.episode.history
                         if host.core.episodes is not None else None,
                         end=host.metrics.end))


def run(plan: PhysicalPlan, cfg: RunConfig, sink: Sink, dead_letters: DeadLetters,
        spark: Any = None, display: Callable[[Host], None] | None = None,
        dataflow_file: str | Path | None = None) -> RunResult:
    """Run ``plan`` to the end of its input and return its metrics (raises RunFailed)."""
    launched = launch(plan, cfg, sink, dead_letters, spark, dataflow_file)
    with interrupts_stop(launched.host):
        if display is not None:
            display(launched.host)
        return supervise(launched)


@contextmanager
def interrupts_stop(host: Host) -> Iterator[None]:
    """While a run waits in the main thread (``sparkflux run``): the first Ctrl-C or
    SIGTERM ends the input, and what was admitted is processed and written, as
    ``FluxQuery.stop()`` does, every sink closed valid and the metrics written; a second
    aborts the run, its output so far still readable (each sink is closed as the run ends).
    One line on stderr says which. Elsewhere (a notebook's thread) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked = 0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal asked
        asked += 1
        name = signal.Signals(signum).name
        if asked == 1:
            print(f"\n{name}: the input ends here; what was admitted is processed and "
                  f"written (again to abort)", file=sys.stderr, flush=True)
            host.end_input()
        else:
            print(f"\n{name} again: aborting; the output written so far stays readable",
                  file=sys.stderr, flush=True)
            host.stop(f"aborted by {name}")

    before = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _watch_job(job: Any, host: Host) -> None:
    job.done.wait()
    if job.error is not None and not host.done.is_set():
        host.stop(f"the Spark job running the sites failed: {_short(job.error)}")


def _short(e: BaseException) -> str:
    text = str(e)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[:30])
