"""What a run is given and what it gives back: its configuration (``RunConfig``, the runtime's
view of its ``RunOptions``), the counters the progress display reads, the error that ends a run,
its result, and the metrics file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from sparkflux.protocol.consistency import Eventual
from sparkflux.runtime.fault_specs import (
    Cut,
    CutSource,
    Hang,
    Kill,
    Partition,
    RescaleAt,
    Slow,
    Squeeze,
)
from sparkflux.runtime.metrics import EgressMetrics
from sparkflux.runtime.run_options import RunOptions, default_replicas, latency_matrix
from sparkflux.runtime.security import Security
from sparkflux.runtime.wan import WanModel

K = TypeVar("K")


class RunFailed(RuntimeError):
    """The run could not finish; the message says why and what to change."""


Opts = RunOptions  # the defaults of the fields below that are options: RunOptions' own


@dataclass(frozen=True)
class RunConfig:
    """The runtime's view of a run: its options as the driver reads them (made from a
    ``RunOptions`` by ``RunConfig.of``; made directly, its defaults are RunOptions') and what
    the launch adds (addresses, security, the dataflow file)."""

    sites: int = Opts.sites
    partitions: int = Opts.partitions
    master: str | None = Opts.master
    ha: str = Opts.ha
    # copies of every partition (1 with --ha none); None: the default for ``ha``, set on
    # construction, so the driver and the sites read one int
    replicas: int | None = Opts.replicas
    rate: float | None = Opts.rate
    ingress_buffer: int = Opts.ingress_buffer
    window: int = Opts.window  # input records not yet acknowledged by every first-stage replica
    stall_timeout: float = Opts.stall_timeout  # --stall-timeout: the watchdog warns after it
    heartbeat_timeout: float = Opts.heartbeat_timeout
    link_timeout: float = Opts.link_timeout  # --link-timeout: a peer link silent this long
    start_timeout: float = Opts.start_timeout
    progress_interval: float = Opts.progress_interval  # --progress-interval
    ui_port: int | None = Opts.ui_port  # --ui-port (None: the default for the master)
    bind_host: str = "127.0.0.1"
    # --kill, every form (``fault_specs.py``), in the order given
    kills: tuple[Kill, ...] = ()
    hangs: tuple[Hang, ...] = ()  # --hang: SIGSTOP then SIGCONT
    cuts: tuple[Cut, ...] = ()  # --cut and --isolate: packets dropped (netcut.py)
    partitions_cut: tuple[Partition, ...] = ()  # --partition: packets dropped (netcut.py)
    source_cuts: tuple[CutSource, ...] = ()  # --cut-source: a source's records held
    eventual: Eventual | None = None  # --consistency eventual (None: strict)
    tentative_output: str | None = Opts.tentative_output  # --tentative-output
    rescales: tuple[RescaleAt, ...] = ()  # --rescale, in the order given
    squeezes: tuple[Squeeze, ...] = ()  # --squeeze
    site_memory: float | None = Opts.site_memory  # --site-memory (MB; None: derived or none)
    policy: str = Opts.policy  # --policy: cpu | memory | hybrid
    # --max-batch-delay (ms; None: each hop's own): caps the ingress's flush, the sites'
    # gathering and the resend of held frames
    max_batch_delay: float | None = Opts.max_batch_delay
    spares: int = Opts.spare_sites  # standby sites launched up front (--spare-sites)
    site_cpu: float | None = Opts.site_cpu  # --site-cpu: each site's busy-time cap
    slows: tuple[Slow, ...] = ()  # --slow
    recovery: str = Opts.recovery  # --recovery: standby | survivors
    balance: bool = Opts.balance  # the load-balancing policy (with --ha flux)
    delta_min: float = Opts.balance_delta_min  # --balance-delta-min
    window_s: float = Opts.balance_window  # --balance-window
    standby_wait: float | None = Opts.standby_wait  # None: measured (control/standby_wait.py)
    local: bool = True
    security: Security | None = None  # None: made by ``run`` (the user's secret or a fresh one)
    tls: bool = Opts.tls  # --tls (when ``run`` makes the security settings)
    max_frame_mb: float | None = Opts.max_frame_mb  # --max-frame-mb
    checkpoint: str | None = Opts.checkpoint  # --checkpoint: the snapshot store's URI
    checkpoint_interval: float = Opts.checkpoint_interval
    checkpoint_keep: int = Opts.checkpoint_keep
    restore: int = -1  # the checkpoint this run goes on from (the launch finds it), or -1
    wan: WanModel | None = None  # --wan: the wide-area links' model (``runtime/wan.py``)
    wan_start: float = 0.0  # the run's start on the wall clock (the outages count from it)
    # --placement and the one-way latencies it places by (``dataflow/deployment.py``)
    placement: str = Opts.placement
    unordered_output: bool = Opts.unordered_output  # --unordered-output
    arrival_order: bool = Opts.arrival_order  # --arrival-order
    stream_replicas: int = 0  # --stream-replicas (0: every copy sends every stream)
    latencies: tuple[tuple[float, ...], ...] | None = None
    # The dataflow file's name and the modules shipped from beside it (``spark/shipping.py``):
    # what a start failure's hint names.
    dataflow: str = ""
    shipped: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.replicas is None or self.ha == "none":  # --ha none keeps one copy
            object.__setattr__(self, "replicas", default_replicas(self.ha))

    @classmethod
    def of(cls, options: RunOptions) -> RunConfig:
        """The runtime's view of checked ``options``: the one place the options' names
        meet the runtime's."""
        o = options
        return cls(
            sites=o.sites, partitions=o.partitions, master=o.master, ha=o.ha,
            replicas=o.replica_count, rate=o.rate, ingress_buffer=o.ingress_buffer,
            window=o.window, stall_timeout=o.stall_timeout,
            heartbeat_timeout=o.heartbeat_timeout, link_timeout=o.link_timeout,
            start_timeout=o.start_timeout, progress_interval=o.progress_interval,
            ui_port=o.ui_port, kills=o.kill, hangs=o.hang, cuts=o.cut + o.isolate,
            partitions_cut=o.partition, source_cuts=o.cut_source, eventual=o.eventual,
            tentative_output=o.tentative_output,
            rescales=o.rescale, squeezes=o.squeeze, site_memory=o.site_memory,
            policy=o.policy,
            spares=o.spare_sites, site_cpu=o.site_cpu, slows=o.slow, recovery=o.recovery,
            balance=o.balance, delta_min=o.balance_delta_min,
            window_s=o.balance_window,
            standby_wait=o.standby_wait, tls=o.tls, max_frame_mb=o.max_frame_mb,
            max_batch_delay=o.max_batch_delay,
            checkpoint=o.checkpoint, checkpoint_interval=o.checkpoint_interval,
            checkpoint_keep=o.checkpoint_keep,
            wan=WanModel.load(o.wan, o.sites) if o.wan is not None else None,
            placement=o.placement, latencies=latency_matrix(o),
            unordered_output=o.unordered_output, arrival_order=o.arrival_order,
            stream_replicas=o.stream_replicas or 0)

    def kills_of(self, kind: type[K]) -> tuple[K, ...]:
        """The ``--kill`` records of one form."""
        return tuple(k for k in self.kills if isinstance(k, kind))

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
