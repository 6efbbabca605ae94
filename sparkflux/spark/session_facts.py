"""What sparkflux knows about a Spark session it has seen, kept beside the session, never on it.

A session sparkflux made records when its application started (so the executors' start can be
timed: the standby wait, ``control/standby_wait.py``) and what the one probe job found on the
executors' Python (``session_check.py``: probed once per session). The facts live in a table
keyed weakly by the ``SparkContext``: they go with it, and nothing is set on Spark's objects.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any


@dataclass
class SessionFacts:
    created: float | None = None  # monotonic time sparkflux launched this application
    executor_start_s: float | None = None  # its executors came up this long after
    probe: tuple[str, dict[str, Any]] | None = None  # (pythonExec, what the probe found)


_FACTS: weakref.WeakKeyDictionary[Any, SessionFacts] = weakref.WeakKeyDictionary()


def facts(sc: Any) -> SessionFacts:
    """The facts of the session whose context is ``sc`` (fresh ones the first time)."""
    found = _FACTS.get(sc)
    if found is None:
        found = _FACTS[sc] = SessionFacts()
    return found
