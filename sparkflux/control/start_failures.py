"""Site tasks that fail before they register: when to stop the run, and what to tell the user.

Spark retries a failed site task hundreds of times on purpose (``spark/launcher.py``: a site
killed mid-run must come back as a standby), so a site that cannot start at all (its plan does
not unpickle on the executor, an operator raises as it is rebuilt, a module is missing there)
would be retried for minutes while nothing registers. The driver hears of each such failure
in one of two ways (``runtime/start_report.py`` says why these two): the task's own typed
report (``StartFailed``: the exception, where it was raised, the traceback), or, for a task
that could not report, Spark's count of the job's failed task attempts. ``StartWatch`` is the
sans-I/O judge of both. Rules:

- The same failure ``REPEATS`` times, from any sites and attempts, stops the run: the code and
  the environment are the same on every attempt, so a retry will fail again. Two reports are
  the same failure when type, message (memory addresses masked) and the place it was raised
  (file name, not its directory: a shipped module sits in a per-executor folder; line;
  function) agree.
- One slot failing to start ``PER_SLOT`` times, whatever the errors, stops it too (a message
  that differs on every attempt, e.g. one naming a temporary path).
- Before the run has started, ``unreported_limit`` failed attempts that sent no report stop it
  with what can be said without the traceback (where to find it, what usually causes it).

The stop message leads with the error (type and message), then where it was raised, then a
hint: for a missing module, that modules beside the dataflow file are shipped with it, and
what to do about one that is not beside it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from sparkflux.protocol.control_messages import StartFailed

REPEATS = 3  # the same start failure this many times stops the run
PER_SLOT = 5  # one slot failing to start this many times stops the run, whatever the errors
UNREPORTED_MIN = 6  # failed attempts with no report before the run stops (at least)
# Third-party packages sparkflux needs on every executor: a missing one is an install problem,
# not a helper module of the dataflow.
ENGINE_PACKAGES = frozenset({"sparkflux", "pyspark", "pyarrow", "numpy", "pandas", "msgpack",
                             "cloudpickle", "py4j"})
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_MISSING = re.compile(r"No module named '([^']+)'")

Signature = tuple[str, str, str, int, str]


def signature(f: StartFailed) -> Signature:
    """What makes two start failures the same failure (see the module's rules)."""
    return (f.error_type, _ADDRESS.sub("0x?", f.message), os.path.basename(f.file), f.line,
            f.function)


def missing_module(f: StartFailed) -> str | None:
    """The module a ModuleNotFoundError names, if the failure is one."""
    if f.error_type != "ModuleNotFoundError":
        return None
    m = _MISSING.search(f.message)
    return m.group(1) if m else None


def hint(f: StartFailed, shipped: tuple[str, ...] = (), dataflow: str = "") -> str:
    """What to check, for this kind of start failure."""
    beside = f"beside {dataflow}" if dataflow else "beside the dataflow file"
    what = (f" (here: {', '.join(shipped)})" if shipped
            else " (there are none beside it)" if dataflow else "")
    name = missing_module(f)
    if name is not None:
        top = name.split(".")[0]
        if top in ENGINE_PACKAGES:
            return (f"'{name}' is part of sparkflux or what it needs: install sparkflux with "
                    f"its dependencies on every executor, in the versions the driver has")
        if not dataflow:
            return (f"'{name}' is not on the executors, and the dataflow was given as an "
                    f"object, so nothing was shipped with it: pass dataflow_file= (the file "
                    f"that defines it) to ship the modules beside that file, install '{top}' "
                    f"on every executor, or list it in spark.submit.pyFiles")
        if top in shipped:
            return (f"'{top}' is {beside} and was shipped with it{what}, but '{name}' is not "
                    f"in it: check the name")
        return (f"the Python modules and packages {beside} are shipped with it to the "
                f"executors{what}, and '{name}' is not one of them: put it {beside}, or "
                f"install it on every executor (or list it in spark.submit.pyFiles)")
    if f.error_type == "ImportError":
        return ("a module imports on the driver but not on the executors: their Python and "
                "packages must match the driver's (versions included)")
    return ("the site failed while it started, before it registered: as the executor "
            "rebuilt the dataflow's plan (the operators and sources, the functions they hold "
            "and what those import) or set up the site; it fails the same way on every "
            "attempt, so Spark's retries cannot help. The traceback is in the driver's log "
            "and the executors' logs")


def describe(f: StartFailed) -> str:
    """The error and where it was raised: ``Type: message`` then ``at file:line in f``."""
    at = f"at {f.file}:{f.line} in {f.function}"
    if f.source:
        at += f": {f.source}"
    return f"{f.error_type}: {f.message}\n  {at}"


@dataclass
class StartWatch:
    """Counts start failures for one run and says when the run must stop (None: not yet).

    ``tasks``: the site tasks the run launched; ``shipped``: the module names shipped from
    beside the dataflow file ``dataflow`` (for the hint); ``driver``: the address the sites
    dial, ``logs``: where Spark's log goes (both named in the hint when known)."""

    tasks: int
    shipped: tuple[str, ...] = ()
    dataflow: str = ""
    driver: str = ""
    logs: str = ""
    reports: list[StartFailed] = field(default_factory=list)
    same: dict[Signature, list[StartFailed]] = field(default_factory=dict)
    per_slot: Counter[int] = field(default_factory=Counter)
    stopped: str | None = None

    @property
    def unreported_limit(self) -> int:
        return max(UNREPORTED_MIN, 2 * self.tasks)

    def reported(self, f: StartFailed) -> str | None:
        """A site task's report; the run's error message if the run must stop now."""
        if self.stopped is not None:
            return None
        self.reports.append(f)
        same = self.same.setdefault(signature(f), [])
        same.append(f)
        self.per_slot[f.site] += 1
        if len(same) >= REPEATS:
            return self._stop(f"the same error {len(same)} times ({_who(same)})", f)
        if self.per_slot[f.site] >= PER_SLOT:
            mine = [r for r in self.reports if r.site == f.site]
            return self._stop(f"site {f.site} {len(mine)} times ({_who(mine)}); the last "
                              f"error", f)
        return None

    def tasks_failed(self, failed: int) -> str | None:
        """Spark's count of the sites' failed task attempts, while no site has started; the
        run's error message if the attempts that sent no report are too many."""
        unreported = failed - len(self.reports)
        if self.stopped is not None or unreported < self.unreported_limit:
            return None
        self.stopped = (
            f"site tasks failed {failed} times before any registered with the driver, "
            f"{unreported} of them without a report (the task could not run sparkflux's code, "
            f"or could not reach the driver); Spark's retries cannot help.\n"
            f"hint: the error is in the executors' logs"
            + (f" (in local mode, {self.logs})" if self.logs else "")
            + ". Usually sparkflux or its dependencies are missing on the executors (install "
            "them there, in the driver's versions), or the executors cannot reach the "
            "driver's address"
            + (f" {self.driver}" if self.driver else "")
            + " (spark.driver.host, spark.driver.bindAddress)")
        return self.stopped

    def _stop(self, how: str, f: StartFailed) -> str:
        self.stopped = (f"site tasks fail before they register with the driver, {how}:\n"
                        f"  {describe(f)}\n"
                        f"hint: {hint(f, self.shipped, self.dataflow)}")
        return self.stopped


def _who(reports: list[StartFailed]) -> str:
    return ", ".join(f"site {r.site} attempt {r.attempt}" for r in reports)
