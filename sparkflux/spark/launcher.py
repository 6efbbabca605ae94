"""Launching sites as long-running Spark tasks (docs/design.md §1).

The driver submits one Spark job of N tasks, ``parallelize(range(N), N)
.mapPartitionsWithIndex(site_task)``, from a background thread; each task runs a site's event
loop until the controller stops it. Spark places the tasks, ships the code and the plan, and
retries a task whose process died (the retried task registers with the controller as a new,
stateless site). Local mode is ``local[SLOTS,F]`` with F in the hundreds so a long run's
failures never exhaust the retries; on a cluster ``spark.task.maxFailures`` does the same.
Speculation and dynamic allocation stay off: a speculative copy of a site would be a zombie.
Each run's job has a job group of its own, so that cancelling it, and counting its failed task
attempts (``failed_attempts``), never touches another run's job in the same session.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.spark.session_facts import facts
from sparkflux.spark.site_task import SiteSettings, make_site_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

TASK_MAX_FAILURES = 400
JOB_GROUP = "sparkflux-sites"


def is_local(master: str) -> bool:
    return master.startswith("local")


def default_master(slots: int) -> str:
    """The embedded default: Spark local mode with enough slots and retries."""
    return f"local[{slots},{TASK_MAX_FAILURES}]"


def spark_log_file() -> Path:
    """Where a session sparkflux makes writes Spark's own log (``log4j2.properties``)."""
    return Path(tempfile.gettempdir()) / f"sparkflux-spark-{os.getpid()}.log"


def log_java_options() -> str:
    """The driver JVM options that give Spark sparkflux's log configuration
    (``log4j2.properties``): errors in the terminal, a killed site's expected stack trace and
    everything else at WARN in ``spark_log_file()``. For a session of your own:
    ``.config("spark.driver.extraJavaOptions", log_java_options())`` before it starts."""
    log_conf = Path(__file__).with_name("log4j2.properties")
    return f"-Dlog4j2.configurationFile=file:{log_conf} -Dsparkflux.spark.log={spark_log_file()}"


LOCAL_HEAP = "2g"  # the embedded session's JVM heap (SPARK_DRIVER_MEMORY overrides it)


def spark_session(master: str | None = None, app_name: str = "sparkflux") -> SparkSession:
    """A SparkSession configured for long-lived site tasks: every setting the sites' job
    needs (``session_check.py`` lists them), the executors' Python this one, and Spark's log
    to ``spark_log_file()`` with only errors in the terminal. ``master`` None: the one
    spark-submit gives, else the embedded local mode. If a session already exists (a
    notebook's, spark-submit's), it is returned as it is and checked at the run's start."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    java_opts = log_java_options()
    builder = SparkSession.builder
    settings = {
        "spark.app.name": app_name,
        "spark.driver.extraJavaOptions": java_opts,
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        # Spark's UI tells the story (the site job under the dataflow's name); its console
        # progress bar would redraw for the whole run, as the site job never ends
        "spark.ui.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.speculation": "false",
        "spark.dynamicAllocation.enabled": "false",
        "spark.task.maxFailures": str(TASK_MAX_FAILURES),
        # A retried site task must start at once (it becomes the standby): no locality wait.
        "spark.locality.wait": "0s",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.faulthandler.enabled": "true",
    }
    if master is not None or not under_spark_submit():
        settings["spark.master"] = master or default_master(4)
        # the embedded session's JVM is the driver and every executor at once: Spark's 1g
        # default heap runs out on a reference's join or window over a few million rows
        settings["spark.driver.memory"] = os.environ.get("SPARK_DRIVER_MEMORY", LOCAL_HEAP)
    for key, value in settings.items():
        builder = builder.config(key, value)
    from pyspark import SparkContext

    # The log configuration takes effect only if this call launches Spark's JVM (not under
    # spark-submit, no session yet); otherwise only errors are shown, as Spark's API allows.
    jvm_here = not under_spark_submit() and SparkContext._active_spark_context is None
    created = time.monotonic()
    if jvm_here and SparkContext._gateway is None:
        launch_jvm(settings)
    spark = builder.getOrCreate()
    if jvm_here:  # a new application: its executors' start can be timed (session_check.py)
        facts(spark.sparkContext).created = created
    if not jvm_here:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# What the JVM prints at every start, whatever its log configuration: Spark's launcher always
# adds the incubating vector module, and the JVM announces it on its standard error.
JVM_NOISE = (b"WARNING: Using incubator modules:",)


def launch_jvm(settings: dict[str, str]) -> None:
    """Start Spark's JVM (py4j gateway) as PySpark would, with its standard error read by a
    thread that passes every line on to this process's standard error except ``JVM_NOISE``:
    the one line the log configuration cannot reach. Everything else the JVM and the Python
    workers it starts write there (real errors) still shows."""
    import subprocess

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(settings.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    proc = gateway.proc
    threading.Thread(target=_pass_on, args=(proc.stderr,), name="sparkflux-jvm-stderr",
                     daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def _pass_on(stream: Any) -> None:
    """Copy the JVM's standard error to ours, line by line, without ``JVM_NOISE``. It reads
    to the end whatever happens to our standard error (closed, a broken pipe): a JVM whose
    pipe fills would block."""
    writable = True
    for line in iter(stream.readline, b""):
        if writable and not line.startswith(JVM_NOISE):
            view = memoryview(line)
            try:
                while view:
                    view = view[os.write(2, view):]
            except OSError:
                writable = False



@dataclass
class SiteJob:
    """The background Spark job that runs the sites; ``summaries`` once it returns."""

    thread: threading.Thread
    group: str = JOB_GROUP
    summaries: list[dict[str, Any]] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    more: list[SiteJob] = field(default_factory=list)  # a rescale's jobs, in the same group


def site_job_description(plan: PhysicalPlan, tasks: int) -> str:
    """What Spark's UI shows for the site job: the dataflow, its sites and spares."""
    spares = tasks - plan.sites
    return (f"sparkflux {plan.name}: {plan.sites} sites"
            + (f" and {spares} spare{'s' if spares > 1 else ''}" if spares else "")
            + f", {plan.partitions} mini-partitions per stage")


def launch_sites(spark: Any, plan: PhysicalPlan, settings: SiteSettings, tasks: int,
                 first: int = 0, group: str | None = None) -> SiteJob:
    """Start ``tasks`` site tasks, each with ``settings``, in a background thread and return
    at once; task i registers for slot ``first + i`` (a rescale's tasks: past every slot
    and spare so far, so they register as standbys). ``group``: the run's job group (a
    rescale's job joins its first one's, so cancelling the run cancels both). The run's
    security (in ``settings``: its secret, and TLS material if on) travels inside the task
    closure, as the plan does: Spark's own channel to the executors carries it
    (``spark.authenticate`` and ``spark.network.crypto.enabled`` protect that channel on a
    cluster)."""
    from pyspark import cloudpickle

    site_plan = plan.for_sites()
    blob = cloudpickle.dumps(site_plan)
    site_task = make_site_task(blob, settings)

    def task(index: int, rows: Any) -> Any:
        return site_task(first + index, rows)

    sc = spark.sparkContext
    job = SiteJob(thread=threading.Thread(target=lambda: None),
                  group=group or f"{JOB_GROUP}-{secrets.token_hex(4)}")
    what = (site_job_description(plan, tasks) if first == 0 else
            f"sparkflux {plan.name}: {tasks} more site{'s' if tasks > 1 else ''} (rescale)")

    def body() -> None:
        try:
            sc.setJobGroup(job.group, what, interruptOnCancel=True)
            sc.setLocalProperty("callSite.short", f"sparkflux {plan.name}")
            rdd = sc.parallelize(range(tasks), tasks).mapPartitionsWithIndex(task)
            rdd.setName(f"sparkflux {plan.name}: site tasks")
            job.summaries = rdd.collect()
        except BaseException as e:  # noqa: BLE001 - reported to the driver thread
            job.error = e
        finally:
            job.done.set()

    job.thread = threading.Thread(target=body, name="sparkflux-site-job", daemon=True)
    job.thread.start()
    return job


def cancel_sites(spark: Any, job: SiteJob) -> None:
    try:
        spark.sparkContext.cancelJobGroup(job.group)
    except Exception as e:  # noqa: BLE001 - best effort while aborting
        log.debug("cancel failed: %s", e)


def failed_attempts(spark: Any, job: SiteJob) -> int | None:
    """How many attempts of the sites' tasks have failed so far (Spark's status tracker; 0
    before the job is submitted; None if Spark cannot say)."""
    return failed_in_group(spark.sparkContext, job.group)


def failed_in_group(sc: Any, group: str) -> int | None:
    """Failed task attempts of the jobs of a job group (None if Spark cannot say)."""
    try:
        tracker = sc.statusTracker()
        failed = 0
        for job_id in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job_id)
            for stage_id in info.stageIds if info is not None else ():
                stage = tracker.getStageInfo(stage_id)
                failed += stage.numFailedTasks if stage is not None else 0
        return failed
    except Exception as e:  # noqa: BLE001 - a count is a hint; the start deadline still holds
        log.debug("cannot count the sites' failed attempts: %s", e)
        return None


def under_spark_submit() -> bool:
    """This Python runs under spark-submit (whose JVM holds the master and settings it was
    given): Spark's gateway was started for it."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
