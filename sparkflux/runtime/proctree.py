"""The processes around a site on this machine, read from ``/proc``: for ``--kill
executor:SITE@SECONDS`` and ``--kill worker:SITE@SECONDS``, a test tool for a Spark standalone
cluster whose workers run on the driver's machine (the driver can see and signal only its own
machine's processes; on a real multi-machine cluster these kills find nothing and say so).

On a standalone cluster a site is a Python worker forked by ``pyspark.daemon``, a child of the
executor JVM (``CoarseGrainedExecutorBackend``), which the Worker daemon JVM
(``deploy.worker.Worker``) launched::

    Worker JVM -> executor JVM -> python -m pyspark.daemon -> site (a forked Python worker)

In local mode the nearest JVM above a site is the driver's own, which is no executor: every
lookup here returns None there rather than a process the run cannot lose.
"""

from __future__ import annotations

from pathlib import Path

from sparkflux.runtime.failure_domain import java_ancestor, parent_of

PROC = Path("/proc")
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
LEVELS = ("python", "executor", "worker")  # what ``--kill LEVEL:SITE@SECONDS`` may name


def parent(pid: int) -> int | None:
    """The parent's pid (None: the process is gone)."""
    return parent_of(pid, PROC)


def comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def ancestors(pid: int) -> list[int]:
    """The process's ancestors, its parent first, up to (not including) init."""
    out: list[int] = []
    p = parent(pid)
    while p is not None and p > 1 and p not in out:
        out.append(p)
        p = parent(p)
    return out


def _java_above(pid: int) -> int | None:
    """The nearest ``java`` process strictly above ``pid``."""
    up = parent(pid)
    return java_ancestor(up, PROC) if up is not None and up > 1 else None


def is_site_process(pid: int) -> bool:
    """A Python worker forked from ``pyspark.daemon`` (what a site is on a cluster)."""
    return any("pyspark.daemon" in a or "pyspark.worker" in a for a in cmdline(pid))


def executor_of(site_pid: int) -> int | None:
    """The executor JVM a site's Python worker runs under: its nearest ancestor whose
    ``comm`` is ``java``, if that is an executor (None in local mode, where it is the
    driver's JVM, or when the site is not on this machine)."""
    if not is_site_process(site_pid):
        return None
    jvm = _java_above(site_pid)
    return jvm if jvm is not None and EXECUTOR_CLASS in cmdline(jvm) else None


def worker_of(executor_pid: int) -> int | None:
    """The Worker daemon JVM that launched an executor: the executor's nearest ``java``
    ancestor; failing that (an executor re-parented to init), the Worker whose
    ``--work-dir`` holds the executor's working directory."""
    jvm = _java_above(executor_pid)
    if jvm is not None and WORKER_CLASS in cmdline(jvm):
        return jvm
    try:
        cwd = str((PROC / str(executor_pid) / "cwd").resolve())
    except OSError:
        return None
    for p in _java_pids():
        args = cmdline(p)
        if WORKER_CLASS in args and "--work-dir" in args:
            work = args[args.index("--work-dir") + 1]
            if cwd.startswith(str(Path(work).resolve()) + "/"):
                return p
    return None


def _java_pids() -> list[int]:
    return [int(d.name) for d in PROC.iterdir() if d.name.isdigit() and comm(int(d.name)) == "java"]


def holder(site_pid: int, level: str) -> int | None:
    """The process to kill for ``level`` (``python``: the site itself, ``executor``, or
    ``worker``), or None when it cannot be found on this machine."""
    if level == "python":
        return site_pid if is_site_process(site_pid) else None
    executor = executor_of(site_pid)
    if level == "executor" or executor is None:
        return executor
    return worker_of(executor)


def group_by_holder(site_pids: dict[int, int], level: str) -> dict[int, list[int]]:
    """``{holder pid: [sites]}`` for the given ``{site: pid}``; sites whose holder cannot be
    found are left out."""
    out: dict[int, list[int]] = {}
    for site, pid in sorted(site_pids.items()):
        h = holder(pid, level)
        if h is not None:
            out.setdefault(h, []).append(site)
    return out


def most_sites(groups: dict[int, list[int]]) -> int | None:
    """The holder of the most sites (a tie: the one holding the lowest site)."""
    if not groups:
        return None
    return min(groups, key=lambda h: (-len(groups[h]), min(groups[h])))
