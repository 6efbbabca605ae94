"""What a SparkSession must offer a run, checked before the sites' job is submitted.

A session sparkflux makes (``launcher.spark_session``) has every setting; a session the user
builds and passes in (``sparkflux.start(dataflow, spark=spark)``, a notebook, spark-submit)
has whatever its owner chose, and the wrong ones fail late and obscurely: one site failure
aborting the whole Spark job, a speculative second copy of a site, executors taken away
while their sites run, sites that never get a slot, site tasks that cannot import pyarrow.
``check_session`` turns each into a ``PlanError`` that says what to change, before anything
starts:

- ``spark.speculation`` and ``spark.dynamicAllocation.enabled`` must be off (a speculative
  copy of a site task would be a zombie site; an executor removed when "idle" takes its
  sites with it).
- Task retries: with ``--ha flux`` a failed site task must be retried (Spark's retry is the
  standby): ``spark.task.maxFailures`` of at least 2, and in local mode a master
  ``local[N,F]`` (plain ``local[N]`` never retries). Fewer than ``RETRIES_WARN`` retries
  only warn: a long run's failures of one slot may exhaust them.
- Task slots: ``sites + spares`` site tasks run at once, each taking ``spark.task.cpus``
  cores, and on a cluster with ``--ha flux`` one more slot lets Spark restart the sites of
  a lost executor at once (without it, recovery goes to the surviving sites). On a cluster
  the executors register after the session starts, so their slots are waited for
  (``SLOTS_WAIT_S``).
- The executors' Python: a one-task probe job imports sparkflux and pyarrow there and
  compares the Python version with the driver's (the plan travels cloudpickled, which needs
  the same minor version). A probe that cannot even start (no such interpreter, sparkflux
  missing) fails twice and is cancelled rather than retried ``maxFailures`` times.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import sys
import threading
import time
from typing import Any

from sparkflux.model.errors import PlanError
from sparkflux.spark.launcher import failed_in_group
from sparkflux.spark.session_facts import facts

log = logging.getLogger(__name__)

RETRIES_WARN = 16  # fewer task retries than this: a warning (a long run may exhaust them)
SLOTS_WAIT_S = 30.0  # how long a cluster's executors may take to register their cores
SETTLE_S = 2.0  # no executor registered for this long: the cluster's executors are all up
PROBE_TIMEOUT_S = 120.0
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:\s*,\s*(\d+))?\])?$")


def check_session(spark: Any, tasks: int, ha: bool, user_session: bool = True,
                  slots_wait: float = SLOTS_WAIT_S,
                  source_slots: dict[str, int] | None = None) -> list[str]:
    """Raise PlanError listing every setting of ``spark`` that would break a run of
    ``tasks`` site tasks (what to change, one line each); return the warnings (also
    logged). ``user_session``: the session was passed in (the probe job runs only then,
    and on a cluster). ``source_slots``: per kind of source, the task slots its own Spark
    jobs need beside the sites' (``Source.task_slots``): without them it would wait for a
    slot the sites never free."""
    sc = spark.sparkContext
    conf = sc.getConf()
    master = sc.master
    problems: list[str] = []
    warnings: list[str] = []
    if _on(conf, "spark.speculation"):
        problems.append("spark.speculation is on: a speculative copy of a site task would be "
                        "a second site for the same slot; set spark.speculation=false")
    if _on(conf, "spark.dynamicAllocation.enabled"):
        problems.append("spark.dynamicAllocation.enabled is on: an executor Spark removes "
                        "takes its sites with it; set spark.dynamicAllocation.enabled=false "
                        "and give the job fixed executors")
    retries = task_retries(master, conf)
    if ha and retries < 2:
        fix = ("use the master local[N,400] (local[N] never retries a task)"
               if master.startswith("local") else "set spark.task.maxFailures=400")
        problems.append(f"tasks are never retried here (master {master}, spark.task."
                        f"maxFailures {retries}): with --ha flux one site failure would abort "
                        f"the Spark job; {fix}")
    elif ha and retries < RETRIES_WARN:
        warnings.append(f"a site slot may fail only {retries - 1} times before Spark aborts "
                        f"the job; for long runs set spark.task.maxFailures=400")
    cpus = int(conf.get("spark.task.cpus", "1"))
    # On a cluster a lost executor takes its slots along: a spare slot restarts its sites.
    # (In local mode a failed task's own slot frees, and nothing else is lost.)
    extra = sum((source_slots or {}).values())
    need = tasks + extra + (1 if ha and not master.startswith("local") else 0)
    slots = task_slots(spark, master, cpus, tasks + extra, slots_wait)
    if slots is not None and slots < tasks:
        problems.append(
            f"the session offers {slots} task slots (spark.task.cpus={cpus}) and the run's "
            f"{tasks} site tasks (sites + spare sites) must all run at once; give the "
            f"executors more cores (or fewer --sites / --spare-sites)"
            + (f"; local mode: local[{tasks + extra},400]" if master.startswith("local")
               else ""))
    elif slots is not None and slots < tasks + extra:
        kinds = ", ".join(f"{name} {n}" for name, n in (source_slots or {}).items())
        problems.append(
            f"the session offers {slots} task slots (spark.task.cpus={cpus}): the run's "
            f"{tasks} site tasks hold theirs for the whole run, and its sources' Spark jobs "
            f"need {extra} more ({kinds}), which would wait forever; give the executors "
            f"{tasks + extra - slots} more core(s) (or fewer --sites / --spare-sites)"
            + (f"; local mode: local[{tasks + extra},400]" if master.startswith("local")
               else ""))
    elif slots is not None and slots < need:
        warnings.append(f"{slots} task slots for {tasks} site tasks: after an executor is "
                        f"lost Spark has no free slot to restart its sites, so recovery goes "
                        f"to the surviving sites (give the executors {need - slots} more "
                        f"core(s))")
    cores = os.cpu_count() or 1
    if master.startswith("local") and tasks > CROWDED * cores:
        warnings.append(f"{tasks} site tasks on a machine with {cores} cores (local mode): "
                        f"each site gets about {cores / tasks:.2g} of a core, so the run is "
                        f"correct but slower than with fewer sites (--sites {CROWDED * cores} "
                        f"or less), and timeouts meant for a silent site may catch a starved "
                        f"one")
    if problems:
        raise PlanError("the Spark session cannot run this dataflow:\n  - "
                        + "\n  - ".join(problems))
    if user_session or not master.startswith("local"):
        probe_python(spark)
    for w in warnings:
        log.warning("%s", w)
    return warnings


CROWDED = 2  # local mode: more site tasks than this many per core draws a warning


def _on(conf: Any, key: str) -> bool:
    return str(conf.get(key, "false")).strip().lower() == "true"


def task_retries(master: str, conf: Any) -> int:
    """How many attempts Spark gives a task: ``F`` of ``local[N,F]`` (1 for other local
    masters), ``spark.task.maxFailures`` (default 4) on a cluster."""
    m = _LOCAL.match(master.strip())
    if m is not None:
        return int(m.group(2)) if m.group(2) else 1
    return int(conf.get("spark.task.maxFailures", "4"))


def task_slots(spark: Any, master: str, cpus: int, want: int, wait_s: float) -> int | None:
    """The tasks the session can run at once (None if Spark cannot say).

    A cluster's executors register one by one after the session starts, and Spark gives
    tasks to the executors it has: sites submitted as soon as ``want`` slots exist pile onto
    the first executors (three of four sites on one executor: one lost executor, three lost
    sites). So wait up to ``wait_s`` for ``want`` slots and then until no executor has come
    for ``SETTLE_S``: Spark then deals the site tasks round-robin over all of them, and the
    placement (``dataflow/placement.py``) keeps replicas on different executors."""
    m = _LOCAL.match(master.strip())
    if m is not None:
        n = m.group(1)
        cores = (os.cpu_count() or 1) if n in (None, "*") else int(n)
        return cores // max(cpus, 1)
    deadline = time.monotonic() + wait_s
    last, since = None, time.monotonic()
    while True:
        slots = _concurrent_tasks(spark)
        now = time.monotonic()
        if slots != last:
            last, since = slots, now
        if slots is None or now >= deadline or (slots >= want and now - since >= SETTLE_S):
            known = facts(spark.sparkContext)
            if known.created is not None and slots is not None and slots >= want:
                # a new application's executors came up this long after it started: what a
                # lost executor's restart takes (the standby wait, control/standby_wait.py)
                known.executor_start_s = since - known.created
            return slots
        time.sleep(0.25)


def _concurrent_tasks(spark: Any) -> int | None:
    """Spark's own count of the tasks its executors can run at once (``spark.task.cpus``
    accounted for) through the JVM gateway."""
    try:
        jsc = spark.sparkContext._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception as e:  # noqa: BLE001 - an internal API; no count is no check
        log.debug("cannot count the session's task slots: %s", e)
        return None


def _probe(_: Any) -> list[tuple[Any, ...]]:
    """Runs on an executor: what its Python can import (nothing from sparkflux is referenced
    here, so the function itself unpickles even where sparkflux is missing)."""
    import sys as _sys

    out: dict[str, str] = {"python": f"{_sys.version_info[0]}.{_sys.version_info[1]}",
                           "executable": _sys.executable}
    for mod in ("sparkflux", "pyarrow", "msgpack"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception as e:  # noqa: BLE001 - reported to the driver
            out[mod] = f"ERROR {type(e).__name__}: {e}"
    return [tuple(sorted(out.items()))]


_probe.__module__ = "__main__"  # pickled by value: the executor needs no sparkflux to run it


def probe_python(spark: Any, timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """Run ``_probe`` as a one-task job; raise PlanError when the executors' Python cannot
    run the sites (with what it lacks and what to set). A session whose probe passed is not
    probed again."""
    sc = spark.sparkContext
    passed = facts(sc).probe
    if passed is not None and passed[0] == sc.pythonExec:
        return passed[1]
    group = f"sparkflux-probe-{secrets.token_hex(4)}"
    result: dict[str, Any] = {}

    def body() -> None:
        try:
            sc.setJobGroup(group, "sparkflux: the executors' Python", interruptOnCancel=True)
            result["rows"] = sc.parallelize([0], 1).mapPartitions(_probe).collect()
        except BaseException as e:  # noqa: BLE001 - reported below
            result["error"] = e

    thread = threading.Thread(target=body, name="sparkflux-probe", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    where = (f"the executors' Python ({sc.pythonExec!r}; set PYSPARK_PYTHON before the "
             f"session is created, or spark.pyspark.python, to a Python with sparkflux "
             f"installed, or ship a packed environment with --archives: see "
             f"docs/pyspark.md, 'The code on other machines')")
    while thread.is_alive():
        thread.join(0.25)
        failed = failed_in_group(sc, group) or 0
        if thread.is_alive() and (failed >= 2 or time.monotonic() > deadline):
            sc.cancelJobGroup(group)
            thread.join(10)
            raise PlanError(f"a probe task could not run on {where}; the executor logs "
                            f"say why")
    if "error" in result:
        lines = [ln for ln in str(result["error"]).splitlines() if ln.strip()][:8]
        raise PlanError(f"a probe task failed on {where}:\n" + "\n".join(lines))
    info = dict(result["rows"][0])
    bad = [f"{m}: {v}" for m, v in info.items() if str(v).startswith("ERROR")]
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if info["python"] != driver:
        bad.append(f"Python {info['python']} there, {driver} here (the plan is pickled: the "
                   f"versions must match)")
    if bad:
        raise PlanError(f"{where} cannot run the sites: " + "; ".join(bad))
    log.info("executors' Python: %s", info)
    facts(sc).probe = (sc.pythonExec, info)
    return info
