"""Events the controller takes and actions it returns (small frozen dataclasses).

The controller is sans-I/O (in the manner of h11 and distributed's ``handle_stimulus``;
docs/design.md): the driver's host turns connections, heartbeats and timers into these
events and carries out the actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sparkflux.dataflow.placement import Domain


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteAddress:
    """A site process as it registered: its slot and Spark attempt, where its data server
    listens, and its failure domain (``Domain``): the executor JVM it runs under
    (``runtime/failure_domain.py``; "" unknown: a domain of its own) and the machine it runs
    on ("" unknown: ``host``, the address it advertises, stands for it)."""

    site: int
    attempt: int
    host: str
    port: int
    pid: int
    executor: str = ""
    machine: str = ""

    def domain(self) -> Domain:
        return Domain(host=self.machine or self.host, executor=self.executor)


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """A numbered membership view: which site process is live for each site slot."""

    number: int
    members: dict[int, SiteAddress] = field(default_factory=dict)


# -- events ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Registered:
    address: SiteAddress
    now: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteReady:
    site: int
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    site: int
    attempt: int
    now: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionClosed:
    site: int
    attempt: int
    reason: str
    now: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspected:
    """Site ``by`` could not reach the process in slot ``site`` (incarnation ``attempt``):
    a suspected failure, which the controller takes as that process's failure if it is still
    the slot's live member and the reporter is one too."""

    site: int
    attempt: int
    by: int
    reason: str
    now: float
    registered: int = -1  # the slot the process registered for (-1: not said)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """The driver's clock. ``wall``: the same moment on the wall clock the input's arrival
    times are read on (eventual consistency judges its delay bound by it); None: ``now``
    is that clock too (the simulator's steps)."""

    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpDone:
    """``cu-done``: replica r of partition q of ``stage`` is folded in."""

    stage: int
    q: int
    r: int
    nbytes: int
    now: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """The egress has delivered the end of the stream."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rescale:
    """Spread the query over ``sites`` site slots from now on (``FluxQuery.rescale``,
    ``--rescale``; ``rescale.py``)."""

    sites: int
    now: float = 0.0


# -- actions -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class InstallView:
    """Send the view to every member (they connect to each other and report ready), with the
    chained-declustering ring chosen over the members' failure domains (``ring[i]``: the
    site slot at position i; replica r of partition q on ``ring[(q + r) mod N]``): every
    party loads it before any data flows."""

    view: View
    ring: tuple[int, ...] = ()
    # --placement latency: the whole table ([P, columns] site slots), which every party
    # loads instead of the ring's (``Layout.place``); None: chained declustering
    table: np.ndarray | None = field(default=None, compare=False)  # (an array's truth is
    # ambiguous: the view and the ring say which action it is)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartIngress:
    """Every site of the view is connected: the ingress may start sending."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StopSite:
    site: int
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FailSites:
    """Install ``view`` without the ``dead`` sites and deliver ``fail`` to every live site,
    the ingress and the egress (take-over, docs/availability.md)."""

    view: View
    dead: tuple[int, ...]
    retired: tuple[int, ...] = ()  # slots that left by a rescale, holding nothing: no failure


@dataclass(frozen=True, slots=True, kw_only=True)
class Standby:
    """A site process joined after the view was formed (Spark's retry of a crashed site):
    it waits, stateless, until recovery gives it replicas (catch-up) or the run ends."""

    site: int
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopt:
    """A standby process takes over site slot ``slot`` (``avail``): it gets the view and
    connects to every live site; every live site learns its address."""

    slot: int
    address: SiteAddress
    view: View
    registered: int  # the slot the standby process registered for (a spare's is past N)


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUp:
    """``cu-start`` to the survivor: catch up replica r of partition q of ``stage``."""

    stage: int
    q: int
    r: int
    survivor: int
    epoch: int
    retained: bool = False  # a move's: the producers retain since they applied the move


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered:
    """Every replica of site slot ``slot`` is folded in again."""

    slot: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Abort:
    """The job cannot go on; the message says why and what to change."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """A site has applied move ``epoch`` (its take-over and table change are done)."""

    site: int
    epoch: int
    now: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Folded:
    """A party (a site, or ``DRIVER``: the egress) has folded in copy c of partition q for
    its consumers of ``stage`` (it got the ``psync`` of incarnation ``epoch``)."""

    site: int
    stage: int
    q: int
    c: int
    epoch: int
    now: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Stats:
    """A site's cumulative load counters, in reply to ``Collect(round)`` (thesis ch. 4's
    statistics: busy time against capacity for U_j, tuples processed per mini-partition)."""

    site: int
    attempt: int
    round: int
    busy_s: float  # event-loop busy seconds so far
    capacity_s: float  # seconds of capacity so far (wall time times the site's cap)
    counts: tuple[int, ...]  # rows processed so far, per partition (all stages)
    now: float
    # When the site took the sample, on its own clock (None: ``now``). Phase lengths are
    # differences of one site's samples, so a reply's delay on the way does not count.
    at: float | None = None
    # Its memory (``memory_policy.py``), from its last heartbeat with state: budget (-1:
    # none), bytes held, bytes on disk, state bytes per partition (in memory or on disk),
    # and the partitions on disk.
    budget: int = -1
    memory: int = 0
    spilled: int = 0
    part_bytes: tuple[int, ...] = ()
    on_disk: tuple[int, ...] = ()
    # its links' measured one-way latency in ms, index 0 the driver, i + 1 slot i (-1:
    # unmeasured), from its latency probes (``Heartbeat.link_ms``)
    link_ms: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """Move replica r of partition q (every stage) from site ``src`` to ``dst``: every live
    site, the ingress and the egress apply it and the sites confirm (``Moved``); catch-up
    then rebuilds it on ``dst``."""

    q: int
    r: int
    src: int
    dst: int
    epoch: int
    reason: str  # "balance", "recovery" or "domain" (a re-layout over failure domains)
    survivor: int = -1  # the replica its catch-up copies (-1: the next one after r)


@dataclass(frozen=True, slots=True, kw_only=True)
class Collect:
    """Ask every live site for its load counters, tagged with the round number."""

    round: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchSites:
    """Start ``count`` new site tasks: a rescale opened slots for them (they register as
    standbys and adopt them)."""

    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Rescaled:
    """A rescale is over: its record (``RescaleRecord.as_dict``)."""

    record: dict[str, object]


@dataclass(frozen=True, slots=True, kw_only=True)
class RescaleRefused:
    """A rescale cannot be done now, or at all; the reason says why and what to change."""

    sites: int
    reason: str


Event = (Registered | SiteReady | Heartbeat | ConnectionClosed | Suspected | Tick | Finished
         | CatchUpDone | Moved | Folded | Stats | Rescale)
Action = (InstallView | StartIngress | StopSite | FailSites | Standby | Adopt | CatchUp
          | Recovered | Abort | Move | Collect | LaunchSites | Rescaled | RescaleRefused)
