"""What a run is given and what it gives back: its configuration (``RunConfig``, one field per
``sparkflux run`` option), the counters the progress display reads, the error that ends a run,
its result, and the metrics file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparkflux.runtime.metrics import EgressMetrics
from sparkflux.runtime.security import Security

MOST_SITES = -1  # ``--kill worker:most@SECONDS``: the holder of the most sites


class RunFailed(RuntimeError):
    """The run could not finish; the message says why and what to change."""


@dataclass(frozen=True)
class RunConfig:
    sites: int = 4
    partitions: int = 32
    master: str | None = None
    ha: str = "none"
    replicas: int = 2  # --replicas, with --ha flux (--ha none is one copy)
    rate: float | None = None
    ingress_buffer: int = 200_000
    window: int = 300_000  # input records not yet acknowledged by every first-stage replica
    stall_timeout: float = 30.0  # --stall-timeout: the watchdog warns after it (0: off)
    heartbeat_timeout: float = 10.0
    link_timeout: float = 1.0  # --link-timeout: a peer link silent this long is reported
    start_timeout: float = 180.0
    bind_host: str = "127.0.0.1"
    kills: tuple[tuple[int, float], ...] = ()
    hangs: tuple[tuple[int, float, float], ...] = ()  # (site, at, for): SIGSTOP then SIGCONT
    # --cut / --isolate (site, at, for, the driver's links too): packets dropped (netcut.py)
    cuts: tuple[tuple[int, float, float, bool], ...] = ()
    flush_ms: float = 20.0
    spares: int = 0  # standby sites launched up front (--spare-sites)
    site_cpu: float | None = None  # --site-cpu: each site's busy-time cap
    slows: tuple[tuple[int, float, float], ...] = ()  # --slow (site, at, factor)
    recovery: str = "standby"  # --recovery: standby | survivors
    balance: bool = True  # the load-balancing policy (with --ha flux)
    delta_min: float = 0.25  # --balance-delta-min
    window_s: float = 2.0  # --balance-window
    standby_wait: float | None = None  # --standby-wait (None: measured, control/standby_wait.py)
    local: bool = True
    security: Security | None = None  # None: made by ``run`` (the user's secret or a fresh one)
    tls: bool = False  # --tls (when ``run`` makes the security settings)
    max_frame_mb: float | None = None  # --max-frame-mb
    # kills of a slot with no live process at that moment: (site, seconds after adoption)
    adopted_kills: tuple[tuple[int, float], ...] = ()
    # kills once that many input records are admitted: (site, records)
    input_kills: tuple[tuple[int, int], ...] = ()
    # kills timed inside the first move: (role, seconds after it starts); role ``source``
    # (the old copy's site), ``destination``, ``from`` (the site the new copy is built from),
    # ``bystander`` or a site number
    move_kills: tuple[tuple[str, float], ...] = ()
    # --kill LEVEL:SITE@SECONDS (a standalone cluster on this machine): (level, site, seconds),
    # level python/executor/worker (``runtime/proctree.py``), site MOST_SITES for ``most``
    process_kills: tuple[tuple[str, int, float], ...] = ()
    # The dataflow file's name and the modules shipped from beside it (``spark/shipping.py``):
    # what a start failure's hint names.
    dataflow: str = ""
    shipped: tuple[str, ...] = ()


@dataclass
class LiveStats:
    """Counters the progress display reads (written by the host thread only)."""

    events_in: int = 0
    results_out: int = 0
    dead_letters: int = 0
    dropped: int = 0
    started_at: float | None = None
    total: int | None = None
    phase: str = "starting Spark"


@dataclass
class RunResult:
    metrics: dict[str, Any]
    sites: list[dict[str, Any]] = field(default_factory=list)
    timeline: EgressMetrics | None = None
    ingress_timeline: tuple[list[float], list[int]] = ([], [])
    completed: list[tuple[float, int]] = field(default_factory=list)
    events: dict[str, list[float]] = field(default_factory=dict)


def write_metrics(path: str, metrics: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(metrics, f, indent=2, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
