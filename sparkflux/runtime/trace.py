"""Where a row's latency accrues: the age of rows at points of each process's data path.

A row's age is the time since the ingress admitted it (its ``_t0`` column, the one the
egress measures latency with). When the environment names a directory in
``SPARKFLUX_TRACE`` (``bench/profiler.py`` sets it before Spark starts, so the sites, which
inherit the driver's environment in local mode, trace too), every process adds up the ages
of the rows of each data frame at each point it passes:

- ``sent``: a data frame handed to a connection (the ingress's, a site's output);
- ``received``: a data frame read off a connection and decoded;
- ``pass``: a site's scheduler handing the frame to the core (after the gathering);
- ``delivered``: the egress's rows written to the sinks.

Each point keeps, per consumer stage, the rows, the sum of their ages and a histogram of
them, and the process rewrites ``<dir>/<pid>.json`` at most every ``WRITE_S`` and when it
stops. The differences between the points' mean ages say where the time goes: on the wire,
gathering, in the pass (merge and operators), waiting at the egress. Unset (the default),
each point costs one test of a module global.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.schema import T0

ENV = "SPARKFLUX_TRACE"
WRITE_S = 0.5
# histogram edges of ages in seconds: 0.1 ms to 100 s, 20 per decade
EDGES = np.r_[0.0, np.logspace(-4, 2, 121)]


class AgeTrace:
    """The ages of rows seen at each (point, stage) of this process, written to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.points: dict[tuple[str, int], dict[str, Any]] = {}
        self._written = 0.0

    def note(self, point: str, stage: int, batch: pa.RecordBatch | None,
             now: float | None = None) -> None:
        """Rows of ``batch`` (of consumer stage ``stage``) passing ``point`` at ``now`` (the
        wall clock's, by default)."""
        if batch is None or batch.num_rows == 0 or T0 not in batch.schema.names:
            return
        now = time.time() if now is None else now
        ages = now - batch.column(T0).to_numpy(zero_copy_only=False)
        p = self.points.get((point, stage))
        if p is None:
            p = self.points[(point, stage)] = {"rows": 0, "age_sum": 0.0,
                                               "hist": np.zeros(EDGES.size - 1, np.int64)}
        p["rows"] += ages.size
        p["age_sum"] += float(ages.sum())
        p["hist"] += np.histogram(np.clip(ages, 0.0, EDGES[-1]), EDGES)[0]
        if now - self._written >= WRITE_S:
            self.write()

    def write(self) -> None:
        """Rewrite this process's file (a rename: a reader never sees half of it)."""
        self._written = time.time()
        doc = {"points": [
            {"point": point, "stage": stage, "rows": p["rows"], "age_sum": p["age_sum"],
             "hist": p["hist"].tolist()} for (point, stage), p in self.points.items()]}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.path)


def _from_env() -> AgeTrace | None:
    d = os.environ.get(ENV)
    if not d:
        return None
    Path(d).mkdir(parents=True, exist_ok=True)
    return AgeTrace(Path(d) / f"{os.getpid()}.json")


TRACE: AgeTrace | None = _from_env()


def start(directory: Path) -> AgeTrace:
    """Trace this process, and the processes it starts from now on, into ``directory``."""
    global TRACE
    os.environ[ENV] = str(directory)
    TRACE = _from_env()
    assert TRACE is not None
    return TRACE


def read(directory: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Every process's points in ``directory``, added up per (point, stage)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for f in sorted(directory.glob("*.json")):
        for p in json.loads(f.read_text())["points"]:
            q = out.setdefault((p["point"], p["stage"]), {
                "rows": 0, "age_sum": 0.0, "hist": np.zeros(EDGES.size - 1, np.int64)})
            q["rows"] += p["rows"]
            q["age_sum"] += p["age_sum"]
            q["hist"] += np.asarray(p["hist"], np.int64)
    return out


def path_order(points: dict[tuple[str, int], Any]) -> list[tuple[str, int]]:
    """The points in the order a row passes them: each stage's input sent, received and
    handed to a pass, then the egress's input sent, received and delivered."""
    order = {"sent": 0, "received": 1, "pass": 2, "delivered": 3}
    return sorted(points, key=lambda k: (k[1], order[k[0]]))


def percentile(hist: list[int] | np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0-100) of a histogram over ``EDGES``: its bin's upper edge."""
    h = np.asarray(hist)
    total = int(h.sum())
    if total == 0:
        return 0.0
    k = int(np.searchsorted(np.cumsum(h), q / 100 * total))
    return float(EDGES[min(k + 1, EDGES.size - 1)])
