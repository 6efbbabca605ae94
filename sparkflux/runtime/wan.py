"""Wide-area links on one machine (``--wan FILE``): per-pair one-way latency, jitter and
outages, so that sites on one machine behave like servers in different places.

The model is a JSON file::

    {"latency_ms": [[0, 20, 20, 60, 60],     # one-way, row: from, column: to;
                    [20, 0, 5, 60, 60],      # index 0 the driver, i + 1 site slot i
                    ...],
     "jitter_ms": 2,                          # each frame up to this much later, at random
     "outages": [{"from": 1, "to": 2, "at": 5.0, "seconds": 2.0}],   # site slots, -1 driver
     "changes": [{"at": 8.0, "latency_ms": [[...], ...]}]}   # the matrix from then on

A connection's sending end holds each frame until its time has come: the link's latency plus
a random jitter, never before the frame ahead of it (a connection stays FIFO, as TCP is), and
not during an outage of the link, which holds everything until it ends (the packets TCP
resends). Outages and changes are timed in seconds from the run's start (the driver's
clock when it launches the sites): from a change's ``at`` on, its matrix gives every link's
latency (a route that failed over, a congested region; latency-aware placement re-deploys
the copies by what the sites measure, ``control/redeploy.py``). The StateMover's
connections (catch-up state) are not delayed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkflux.model.errors import PlanError

DRIVER_NODE = -1  # the driver in ``outages`` and ``LinkDelay``


@dataclass(frozen=True)
class Outage:
    """Nothing crosses from ``src`` to ``dst`` (site slots, ``DRIVER_NODE``) during
    [``at``, ``at + seconds``) after the run's start."""

    src: int
    dst: int
    at: float
    seconds: float


@dataclass(frozen=True)
class WanModel:
    """One-way latency in milliseconds between every pair of nodes (index 0 the driver,
    i + 1 site slot i), a jitter bound and the outages."""

    latency_ms: tuple[tuple[float, ...], ...]
    jitter_ms: float = 0.0
    outages: tuple[Outage, ...] = ()
    # (at, matrix): the latencies from ``at`` seconds after the start on, in time order
    changes: tuple[tuple[float, tuple[tuple[float, ...], ...]], ...] = ()

    @property
    def nodes(self) -> int:
        return len(self.latency_ms)

    def matrix_at(self, t: float) -> tuple[tuple[float, ...], ...]:
        """The latency matrix in force ``t`` seconds after the run's start."""
        m = self.latency_ms
        for at, later in self.changes:
            if at > t:
                break
            m = later
        return m

    def latency_s(self, src: int, dst: int, t: float = 0.0) -> float:
        """One-way latency from ``src`` to ``dst`` (site slots, ``DRIVER_NODE``) ``t``
        seconds after the start; none for a process that holds no slot yet (a spare
        standby: it takes the slot's place when it adopts one)."""
        if not (-1 <= src < self.nodes - 1 and -1 <= dst < self.nodes - 1):
            return 0.0
        return self.matrix_at(t)[src + 1][dst + 1] / 1000.0

    @classmethod
    def load(cls, path: str | Path, sites: int, flag: str = "--wan") -> WanModel:
        """The model in ``path`` for a run of ``sites`` sites, checked (``PlanError`` says
        what to change, naming the option ``flag`` that gave the file)."""
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise PlanError(f"{flag} {path}: cannot read it as JSON ({e})") from e
        return cls.of(raw, sites, str(path), flag)

    @classmethod
    def of(cls, raw: Any, sites: int, name: str = "the model", flag: str = "--wan"
           ) -> WanModel:
        where = f"{flag} {name}"
        if not isinstance(raw, dict) or "latency_ms" not in raw:
            raise PlanError(f"{where}: give an object with \"latency_ms\": a matrix of one-way "
                            f"latencies, the driver first, then site 0 .. {sites - 1}")
        unknown = sorted(set(raw) - {"latency_ms", "jitter_ms", "outages", "changes"})
        if unknown:
            raise PlanError(f"{where}: unknown keys {unknown}; the keys are latency_ms, "
                            f"jitter_ms, outages, changes")
        lat = _latencies(raw["latency_ms"], sites, where)
        changes = []
        for c in raw.get("changes", []):
            if not (isinstance(c, dict) and set(c) == {"at", "latency_ms"} and _number(c["at"])
                    and c["at"] >= 0):
                raise PlanError(f"{where}: a change is {{\"at\": SECONDS, \"latency_ms\": "
                                f"MATRIX}} (SECONDS from the run's start, 0 or more), not {c!r}")
            changes.append((float(c["at"]), _latencies(c["latency_ms"], sites, where)))
        jitter = raw.get("jitter_ms", 0.0)
        if not (_number(jitter) and jitter >= 0):
            raise PlanError(f"{where}: jitter_ms must be a number of milliseconds, 0 or more")
        outages = []
        for o in raw.get("outages", []):
            if not (isinstance(o, dict) and set(o) == {"from", "to", "at", "seconds"}
                    and all(isinstance(o[k], int) and -1 <= o[k] < sites for k in ("from", "to"))
                    and o["from"] != o["to"] and _number(o["at"]) and o["at"] >= 0
                    and _number(o["seconds"]) and o["seconds"] > 0):
                raise PlanError(f"{where}: an outage is {{\"from\": SITE, \"to\": SITE, \"at\": "
                                f"SECONDS, \"seconds\": SECONDS}} with sites -1 (the driver) .. "
                                f"{sites - 1}, not {o!r}")
            outages.append(Outage(o["from"], o["to"], float(o["at"]), float(o["seconds"])))
        return cls(lat, float(jitter), tuple(sorted(outages, key=lambda o: o.at)),
                   tuple(sorted(changes, key=lambda c: c[0])))


def _latencies(lat: Any, sites: int, where: str) -> tuple[tuple[float, ...], ...]:
    """A latency matrix of the model, checked: ``sites + 1`` rows of as many milliseconds."""
    n = sites + 1
    if not (isinstance(lat, list) and len(lat) == n
            and all(isinstance(r, list) and len(r) == n for r in lat)):
        raise PlanError(f"{where}: latency_ms must be {n} rows of {n} numbers (the driver "
                        f"first, then site 0 .. {sites - 1})")
    if not all(_number(x) and x >= 0 for r in lat for x in r):
        raise PlanError(f"{where}: every latency must be a number of milliseconds, 0 or more")
    return tuple(tuple(float(x) for x in r) for r in lat)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class LinkDelay:
    """When the frames ``src`` writes to ``dst`` may leave (``due``), on the wall clock;
    ``start``: the run's start on that clock, where the outages' times count from. ``src``
    may be a callable: a standby's slot changes when it adopts one."""

    def __init__(self, model: WanModel, src: int | Callable[[], int], dst: int, start: float,
                 rng: random.Random | None = None) -> None:
        self.model = model
        self.src = src if callable(src) else (lambda: src)
        self.dst = dst
        self.start = start
        self.rng = rng or random.Random()
        self._last = 0.0

    def due(self, now: float) -> float:
        """The time a frame written at ``now`` may leave: after the latency and jitter,
        after the frame before it, and after any outage it would fall in."""
        m, src = self.model, self.src()
        t = max(now + m.latency_s(src, self.dst, now - self.start)
                + self.rng.uniform(0.0, m.jitter_ms / 1000.0), self._last)
        for o in m.outages:
            lo = self.start + o.at
            if (o.src, o.dst) == (src, self.dst) and lo <= t < lo + o.seconds:
                t = lo + o.seconds
        self._last = t
        return t
