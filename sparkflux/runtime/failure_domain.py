"""The failure domain a site process reports when it registers (``placement.Domain``).

On Spark a site is a Python worker forked (through PySpark's daemon) by an executor, one JVM
that runs several site tasks; an executor's loss (its JVM dies, or the worker daemon that owns
it, or the machine) takes every one of them down at once. The executor is named by this
machine's hostname and the pid of the nearest ancestor process whose ``/proc/<pid>/comm`` is
``java``: unique across the cluster, and the same for every site of one JVM. Where there is
none to be found (no ``/proc``, or no JVM above us: a site run outside Spark) it is "", unknown,
and the controller takes the site as a domain of its own. In Spark's local mode every site
runs under the driver's one JVM, so all share one domain and the ring stays the identity. The
host is the machine's hostname.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sparkflux.dataflow.placement import Domain

PROC = Path("/proc")
MAX_DEPTH = 64  # ancestors walked at most (a cycle or a very deep tree is given up on)


def parent_of(pid: int, proc: Path = PROC) -> int | None:
    """The parent pid from ``/proc/<pid>/stat`` (after the parenthesised command name, which
    may itself hold spaces and parentheses), or None."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def java_ancestor(pid: int, proc: Path = PROC) -> int | None:
    """The nearest ancestor of ``pid`` (itself included) whose command is ``java``."""
    for _ in range(MAX_DEPTH):
        try:
            if (proc / str(pid) / "comm").read_text().strip() == "java":
                return pid
        except OSError:
            return None
        parent = parent_of(pid, proc)
        if parent is None or parent <= 0 or parent == pid:
            return None
        pid = parent
    return None


def of_this_process(proc: Path = PROC) -> Domain:
    """This process's failure domain: (hostname, ``hostname:pid`` of its executor JVM)."""
    host = socket.gethostname()
    jvm = java_ancestor(os.getpid(), proc)
    return Domain(host=host, executor=f"{host}:{jvm}" if jvm is not None else "")
