"""The controller core: membership, failure detection and views (thesis §3.4).

It gathers one registration per site slot, installs view 1, and starts the ingress once every
site is connected. A site fails when its connection is lost or its heartbeat times out (a hung
site). Without replication (``--ha none``) a failure aborts the job with a message that says
how to survive it (``--ha flux``). With Flux-HA the controller installs the next view of a
totally ordered sequence without the failed site and delivers ``fail`` to every live site and
to the ingress and egress (take-over). A failed site is never readmitted into its old role
(a site learns it was excluded and stops: fail-stop, no zombies); a site process registering
after view 1 (Spark's retry of a crashed task) becomes a stateless standby.

Unified Flux (thesis ch. 5) on top: the controller is in *recovery mode* while any
replica is missing (a failed site's, or a moved one not yet caught up) and in *load-balancing
mode* otherwise. Recovery gives a failed slot to a standby (``--recovery standby``) or
re-places its replicas on the surviving sites (``--recovery survivors``), one catch-up at a
time. Load balancing runs rounds of a collection phase (``Collect``/``Stats``, tagged with the
round number so stale replies are ignored) and a movement phase (``policy.plan_moves``); a
move catches up a new copy on the receiver and retires the donor's once every party has
folded the new one in (made before it breaks). A failure stops load balancing at once.

Each of these lives is a transition table the controller feeds events to, carrying out the
actions it names: a site slot's, a standby process's and the recovery task's
(``membership.py``: ``_slot_step``, ``_standby_step``, ``_recovery_step``), a move's
(``moves.py``: ``_move_step``) and a balancing round's (``rounds.py``: ``_round``, whose
actions are in ``balancing.py``).

Placement over failure domains (``dataflow/placement.py``): every site registers with its
executor and host (``SiteAddress.domain``). At view 1 the controller chooses the ring of
chained declustering so that no partition has two copies in one executor, nor, where the sites
are on several hosts, on one host (``choose_ring``), and sends it with the view; when no ring
can (one executor holds more than N / K sites) it takes the one with the fewest shared pairs
and warns (``placement`` in the metrics). A standby adopting a failed slot is chosen among the
idle ones by its domain, and once its recovery is complete, every replica it holds that now
shares a domain with another copy of its partition is moved (``request_moves``, reason
``domain``) to a live site that shares none, if there is one. Recovery onto the survivors and
the load-balancing policy choose their destinations by the same rule.

With ``--placement latency`` (``dataflow/deployment.py``) view 1 places the copies by the
latency matrix instead (the racing-replicas paper's replica deployment) and sends the whole
table with the view; the ring stays the one chosen, for the record.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TypedDict

import numpy as np

from sparkflux.control.balancing import Balancing, RoundRecord
from sparkflux.control.events import (
    Abort,
    Action,
    Adopt,
    CatchUp,
    CatchUpDone,
    ConnectionClosed,
    Event,
    FailSites,
    Finished,
    Folded,
    Heartbeat,
    InstallView,
    Move,
    Moved,
    Recovered,
    Registered,
    Rescale,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    Stats,
    StopSite,
    Suspected,
    Tick,
    View,
)
from sparkflux.control.link_judge import SETTLE_S, LinkJudge
from sparkflux.control.lost_partition import lost_partition
from sparkflux.control.membership import (
    Mode,
    Recovery,
    RecoveryEv,
    Slot,
    SlotEv,
    StandbyEv,
    recovery_step,
    slot_step,
    standby_step,
)
from sparkflux.control.membership import Standby as StandbyState
from sparkflux.control.moves import RUNNING, MoveEv, MovePhase, MoveRecord, move_step
from sparkflux.control.policy import PolicyConfig, recovery_site
from sparkflux.control.redeploy import SETTLE_S as REDEPLOY_SETTLE_S
from sparkflux.control.rescale import RescaleRecord
from sparkflux.control.rescaling import Rescaling
from sparkflux.control.rounds import Ev as RoundEv
from sparkflux.control.rounds import Phase
from sparkflux.dataflow.deployment import deploy, latency_bound, network_cost
from sparkflux.dataflow.placement import (
    DRIVER,
    NOWHERE,
    Domain,
    Layout,
    choose_ring,
    clash,
    ring_conflicts,
    table_conflicts,
)

log = logging.getLogger(__name__)
# Catch-ups run this many at a time (each one partition replica: recovery stays incremental,
# no single transfer long enough to stall the output, but a site comes back sooner).
CATCH_UP_PARALLEL = 4
# Moves started together (one group: every site confirms them all, then their catch-ups run
# CATCH_UP_PARALLEL at a time). A movement phase's moves, or a failed site's re-placements,
# then take about as long as one move instead of one move each.
MOVE_GROUP = 8
HEARTBEAT_TIMEOUT_S = 10.0  # the default --heartbeat-timeout (the run's options take it here)


class PlacementReport(TypedDict, total=False):
    """The ring chosen over the sites' failure domains at view 1, and what it could not
    avoid (the run's metrics; empty before view 1, then every key)."""

    ring: list[int]  # the site slot at each chained-declustering position
    # pairs of sites holding copies of a partition that share a host / an executor, in the
    # placement used (the ring's, or with --placement latency its table's; the ring's then
    # under chained_host_conflicts / chained_executor_conflicts)
    host_conflicts: int
    executor_conflicts: int
    chained_host_conflicts: int
    chained_executor_conflicts: int
    domains: dict[int, str]  # slot -> "host/executor"
    executors: int
    hosts: int
    # "chained" or "latency"; the worst partition's round trip from the driver through its
    # nearest copy, and the paper's network cost, for the table used and for chained
    # declustering's (with a latency matrix only)
    mode: str
    latency_bound_ms: float
    network_cost: float
    chained_latency_bound_ms: float
    chained_network_cost: float
    # every re-deployment by measured latencies (``redeploy.py``): when, in which round, the
    # latency bound before and after (both under the measured matrix, ms), how many moves
    redeploys: list[dict[str, float]]


class RecoveryRecord(TypedDict):
    """One replica caught up (the run's metrics)."""

    stage: int
    partition: int
    replica: int
    site: int | None  # the move's destination, or the slot being recovered
    state_bytes: int
    done_at: float


@dataclasses.dataclass(frozen=True)
class ControlOptions:
    """What a run's options say to the controller: the heartbeat timeout that suspects a
    silent site, how a failed slot is recovered (``standby`` or ``survivors``), whether the
    balancing policy runs and with which settings, and how long the link judge lets reports
    settle. The standby wait comes as the core's ``StartTimes`` event (it is measured)."""

    heartbeat_timeout: float = HEARTBEAT_TIMEOUT_S
    recovery: str = "standby"
    balance: bool = False
    policy: PolicyConfig | None = None
    link_settle: float = SETTLE_S
    # --placement: "chained" (over the failure domains) or "latency" (``deployment.py``),
    # and the one-way latencies it places by (the driver first, then every site slot)
    placement: str = "chained"
    latencies: tuple[tuple[float, ...], ...] | None = None
    # how long the balancing rounds must plan the same re-deployment by measured latencies
    # before its moves start (``redeploy.py`` rule 4)
    redeploy_settle: float = REDEPLOY_SETTLE_S


class Controller(Balancing, Rescaling):
    """Membership, views, recovery and load balancing for ``sites`` site slots."""

    def __init__(self, sites: int, ha: bool = False, layout: Layout | None = None,
                 stages: int = 0, options: ControlOptions | None = None,
                 standby_wait: float = 5.0) -> None:
        o = options or ControlOptions()
        heartbeat_timeout, recovery, policy = o.heartbeat_timeout, o.recovery, o.policy
        if sites < 1:
            raise ValueError("a controller needs at least one site")
        if recovery not in ("standby", "survivors"):
            raise ValueError(f"recovery must be 'standby' or 'survivors' (got {recovery!r})")
        self.sites = sites
        self.heartbeat_timeout = heartbeat_timeout
        self.view = View(number=0)
        self._pending: dict[int, SiteAddress] = {}
        self._ready: set[int] = set()
        self._last_seen: dict[int, float] = {}
        self.started = False
        self.finished = False
        self.aborted: str | None = None
        self.failures: list[tuple[float, int, str]] = []
        self.ha = ha
        self.mode = Mode.NONE if not ha else Mode(f"--recovery {recovery}")
        # each slot's place in ``membership.py``'s slot table, and the recovery task's
        self.slot_state: dict[int, Slot] = dict.fromkeys(range(sites), Slot.OPEN)
        self.recovery_phase = Recovery.IDLE
        self.dead: set[int] = set()
        self.standbys: list[SiteAddress] = []  # idle standby processes
        self.layout = layout.copy() if layout is not None else None  # the current placement
        self.stages = stages
        self.recovery = recovery
        self.awaiting: list[int] = []  # failed slots waiting for a standby, oldest first
        self.awaiting_since: dict[int, float] = {}
        # --recovery standby: a slot no standby has adopted after this long is recovered
        # onto the surviving sites instead (Spark may not restart a task, or not soon).
        self.standby_wait = standby_wait
        self.recovering: int | None = None  # the slot a standby is being caught up into
        self.adopted: SiteAddress | None = None
        self.queue: list[tuple[int, int, int]] = []  # catch-ups of the current task
        self.in_flight: set[tuple[int, int, int]] = set()  # catch-ups running now
        self._survivor_of: dict[tuple[int, int, int], int] = {}  # their survivors' sites
        self.recoveries: list[RecoveryRecord] = []
        self.epoch = 0
        # Replicas (stage, q, r) that are not complete: on a failed site, or being rebuilt.
        self.incomplete: set[tuple[int, int, int]] = set()
        self.pending_moves: list[tuple[int, int, int, str]] = []  # (q, r, dst, reason)
        self.moving: dict[int, MoveRecord] = {}  # epoch -> a move of the group in progress
        self._unconfirmed: set[tuple[int, int]] = set()  # (site, epoch): `moved` awaited
        self._catching_up = False  # the group's catch-ups have started
        self.moves: list[MoveRecord] = []  # every move done (the run's metrics list them)
        self.balance = o.balance and ha
        self.policy = policy = policy or PolicyConfig()
        self.round = 0
        self.lb_state = Phase.WAIT  # the balancing round's phase (``rounds.py``)
        self.lb_at = 0.0
        self.delta = policy.delta_start
        self._base: dict[int, Stats] = {}
        # Baselines taken while the placement was ``_pool_table``, oldest first: a round's
        # statistics start from the oldest of the last ``policy.window_s`` seconds.
        self._pool: list[tuple[float, dict[int, Stats]]] = []
        self._pool_table: np.ndarray | None = None
        self._samples: dict[int, Stats] = {}
        self._moving_since = 0.0
        self.now = 0.0
        # partial partitions: which end of a broken link to exclude
        self.links = LinkJudge(settle=o.link_settle)
        # A network partition the judge would resolve only by losing a partition's every
        # live copy: (why, when it was last judged so); the run waits for the links to heal
        self.split: tuple[str, float] | None = None
        # --consistency eventual: the merges that wait for a split go on tentatively
        self.eventual = False
        self._registered_as: dict[int, int] = {}  # slot -> its process's registered slot
        self.domains: dict[int, Domain] = {}  # slot -> its live process's failure domain
        # the ring chosen at view 1 and what it could not avoid (the run's metrics)
        self.placement: PlacementReport = {}  # empty until view 1
        self.placement_mode, self.latencies = o.placement, o.latencies
        self._placed_by: np.ndarray | None = None  # the matrix ``--placement latency`` used
        self._redeploy_since: float | None = None
        self.redeploy_settle = o.redeploy_settle
        if o.placement not in ("chained", "latency"):
            raise ValueError(f"placement must be 'chained' or 'latency' (got {o.placement!r})")
        if o.placement == "latency" and o.latencies is None:
            raise ValueError("--placement latency needs a latency matrix")
        self.rounds: list[RoundRecord] = []  # per round: utilisation and the moves it planned
        # the last round's U and busy fractions (the policy's hysteresis); none after a start
        # or a failure
        self._previous: tuple[dict[int, float], dict[int, float]] = ({}, {})
        # With the hysteresis: nothing moves before this (the first baseline after a start
        # or a failure, plus window_s), so no decision rests on a ramp-up alone.
        self._settled_at: float | None = None
        # rescaling a running query (``rescaling.py``): the one in progress, those done,
        # and the slots a shrink retires (a failed one is not adopted again)
        self.rescaling: RescaleRecord | None = None
        self.rescales: list[RescaleRecord] = []
        self._retiring: set[int] = set()

    def handle(self, *events: Event) -> list[Action]:
        actions: list[Action] = []
        for ev in events:
            match ev:
                case Registered():
                    actions += self._registered(ev)
                case SiteReady():
                    actions += self._ready_site(ev)
                case Heartbeat():
                    # Only the slot's current incarnation counts: a heartbeat of a process
                    # the slot has had before (a hung one that woke up) says nothing about
                    # the one that adopted it since.
                    if self._is_member(ev.site, ev.attempt):
                        self._last_seen[ev.site] = ev.now
                case ConnectionClosed():
                    actions += self._lost(ev.site, ev.attempt, ev.reason, ev.now)
                case Suspected():
                    actions += self._suspected(ev)
                case Tick():
                    actions += self._tick(ev.now)
                case Finished():
                    self.finished = True
                case CatchUpDone():
                    actions += self._catch_up_done(ev)
                case Moved():
                    actions += self._moved(ev)
                case Folded():
                    actions += self._folded(ev)
                case Stats():
                    actions += self._stats(ev)
                case Rescale():
                    actions += self._rescale(ev)
        if self.moving:
            self._account_moves()
        return actions

    def _account_moves(self) -> None:
        """Each running move's time with fewer complete copies of its partition than
        ``--replicas``, not counting copies failures took: what the move itself costs."""
        assert self.layout is not None
        for m in self.moving.values():
            short = (self._complete_copies(m.q) + m.lost_to_failures
                     < min(self.layout.replicas, m.baseline))
            if short and m.short_since is None:
                m.short_since = self.now
            elif not short and m.short_since is not None:
                m.short_s += self.now - m.short_since
                m.short_since = None

    def _complete_copies(self, q: int) -> int:
        assert self.layout is not None
        return sum(all(self._complete(s, q, c) for s in range(self.stages))
                   for c in range(self.layout.columns))

    def _close_move(self, m: MoveRecord) -> None:
        """A move leaves ``moving``: its record is final."""
        if m.end is None:
            m.end = self.now
        if m.short_since is not None:
            m.short_s += self.now - m.short_since
            m.short_since = None

    @property
    def registered(self) -> int:
        """Sites registered for view 1 so far (before it forms)."""
        return len(self._pending) if self.view.number == 0 else len(self.view.members)

    def _is_member(self, site: int, attempt: int) -> bool:
        m = self.view.members.get(site)
        return m is not None and m.attempt == attempt

    def _live(self) -> list[int]:
        return sorted(s for s in self.view.members if s not in self.dead)

    def _suspected(self, ev: Suspected) -> list[Action]:
        """Site ``ev.by`` cannot reach slot ``ev.site``: a broken link for the link judge
        (``link_judge.py``), which decides after its settle time which end to exclude, if it
        is the slot's live incarnation and the reporter is a live member itself. A report
        about an earlier incarnation (the slot was adopted since), a site already failed, or
        from a process that is no member any more (it may be the unreachable one) changes
        nothing."""
        reporter = ev.by in self.view.members and ev.by not in self.dead
        if not reporter or ev.site in self.dead or not self._is_member(ev.site, ev.attempt):
            return []
        if ev.registered >= 0 and ev.registered != self._registered_as.get(ev.site, ev.site):
            return []  # about the slot's earlier process (a spare has the same attempt)
        self.now = max(self.now, ev.now)
        if self.ha:  # with one copy there is nothing to fail over to: the site is waited for
            self.links.report(ev.by, ev.site, ev.reason, ev.now)
        return []

    def _judge_links(self, now: float) -> list[Action]:
        """The link judge's verdict once its reports have settled: each site it names is
        lost, as if its connection had dropped."""
        if not self.links.due(now):
            return []
        assert self.layout is not None
        # rule 5: the survivors and new copies of the catch-ups running now
        busy = frozenset({*(self._survivor_of.get(k, -1) for k in self.in_flight),
                          *(self.layout.site_of(q, r) for _, q, r in self.in_flight)})
        actions: list[Action] = []
        for site, why in self.links.decide(
                set(self._live()), now, busy, lambda s, gone: bool(self._only_copies(s, gone))):
            m = self.view.members.get(site)
            if m is not None and site not in self.dead:
                log.warning("site %d is %s: excluding it", site, why)
                actions += self._lost(site, m.attempt, why, now)
        if self.links.kept:  # a partition between sites that both live: wait for it to heal
            text = "; ".join(
                f"site {site} is {why}, and it holds the only live copy of partition"
                f"{'s' if len(only) > 1 else ''} {', '.join(map(str, only[:8]))}"
                f"{', ...' if len(only) > 8 else ''}"
                for site, why in self.links.kept if (only := self._only_copies(site)))
            text = (f"a network partition: {text}; "
                    + ("the stable output waits for the links to heal rather than lose "
                       "that state, and the merges that wait go on tentatively"
                       if self.eventual else
                       "strict consistency waits for the links to heal rather than lose "
                       "that state (--consistency eventual answers tentatively meanwhile)"))
            if self.split is None:
                log.warning("%s", text)
            self.split = (text, now)
        return actions

    def _only_copies(self, site: int, gone: frozenset[int] = frozenset()) -> list[int]:
        """The partitions whose only complete live copy (every stage) is on ``site`` once
        the sites ``gone`` are excluded too: excluding it for a broken link would lose
        them."""
        assert self.layout is not None
        out = []
        for q in sorted(self.layout.hosted(site)):
            others = [c for c in range(self.layout.columns)
                      if self.layout.site_of(q, c) not in (site, NOWHERE, *gone)]
            if not any(all(self._complete(s, q, c) for s in range(self.stages))
                       for c in others):
                out.append(q)
        return out

    def _registered(self, ev: Registered) -> list[Action]:
        # (the time a standby that registers now adopts a slot: its liveness starts here)
        self.now = max(self.now, ev.now)
        a = ev.address
        spare = a.site >= self.sites  # --spare-sites: standbys from the start
        if a.site < 0 or (spare and not self.ha):
            return [StopSite(site=a.site, attempt=a.attempt, reason="no such site slot")]
        if self.view.number > 0 or spare:  # a standby (or, with --ha none, no role)
            return self._standby_step(a, StandbyState.NEW, StandbyEv.REGISTERED)
        old = self._pending.get(a.site)
        # Spark retries a task only once its attempt has failed: the newer attempt takes the
        # slot, even before the old one's lost connection has been handled here (whose close
        # is then stale and ignored).
        event = (SlotEv.REGISTERED if old is None else
                 SlotEv.RETRIED if a.attempt > old.attempt else SlotEv.DUPLICATE)
        out = self._slot_step(a.site, event, address=a, now=ev.now)
        if out or len(self._pending) < self.sites:
            return out
        self.view = View(number=1, members=dict(self._pending))
        for s in self.view.members:
            self._slot_step(s, SlotEv.VIEW)
        # Heartbeats before the view count for nobody (no member yet): every member is timed
        # from view 1, not from its registration, however long the others took to register.
        for s in self.view.members:
            self._last_seen[s] = ev.now
        log.info("view 1 installed with %d sites", self.sites)
        ring = self._choose_ring()
        table = self._deploy()
        self._warn_conflicts()
        return [InstallView(view=self.view, ring=ring, table=table)]

    def _choose_ring(self) -> tuple[int, ...]:
        """View 1's chained-declustering ring over the members' failure domains (module
        docstring), loaded into the controller's layout; a warning when some partition's
        copies must share an executor or a host."""
        self.domains = {s: m.domain() for s, m in self.view.members.items()}
        domains = [self.domains[s] for s in range(self.sites)]
        if self.layout is None:
            return tuple(range(self.sites))
        k = self.layout.replicas
        ring = choose_ring(domains, k)
        self.layout.set_ring(ring)
        hosts, execs = ring_conflicts(ring, domains, k)
        self.placement = {
            "ring": list(ring), "host_conflicts": hosts, "executor_conflicts": execs,
            "domains": {s: f"{d.host}/{d.executor or '?'}" for s, d in self.domains.items()},
            "executors": len({d.executor for d in domains if d.executor}),
            "hosts": len({d.host for d in domains})}
        if ring != list(range(self.sites)):
            log.info("chained declustering over failure domains: ring %s", ring)
        return tuple(ring)

    def _warn_conflicts(self) -> None:
        """A warning when the placement used (the ring's, or the table placed by latency)
        leaves some partition's copies sharing an executor or a host."""
        if self.layout is None:
            return
        k, domains = self.layout.replicas, list(self.domains.values())
        hosts, execs = self.placement["host_conflicts"], self.placement["executor_conflicts"]
        if (hosts or execs) and len({(d.host, d.executor) for d in domains}) > 1:
            log.warning(
                "placement over failure domains cannot keep every partition's %d copies apart: "
                "%d pairs of copies share a host and %d an executor (domains: %s); losing one "
                "of those loses partitions. Spread the sites over more executors or hosts "
                "(at most %d sites of %d in one)", k, hosts, execs, self.placement["domains"],
                self.sites // k, self.sites)
        elif hosts or execs:
            log.info("every site is in one failure domain (%s): its loss is the run's",
                     self.placement["domains"][0])

    def _deploy(self) -> np.ndarray | None:
        """``--placement latency``: view 1's table placed by latency (``deployment.py``),
        loaded into the controller's layout; with any latency matrix, both placements'
        latency bound and network cost in ``placement``. None: chained declustering."""
        if self.layout is None or self.latencies is None:
            return None
        k, m = self.layout.replicas, self.latencies
        exchanges = max(self.stages - 1, 0)
        chained = self.layout.table()[:, :k].copy()
        self.placement["mode"] = self.placement_mode
        self.placement["chained_latency_bound_ms"] = round(latency_bound(chained, m), 3)
        self.placement["chained_network_cost"] = round(network_cost(chained, m, exchanges), 3)
        if self.placement_mode != "latency":
            return None
        table = deploy(m, self.layout.partitions, k, exchanges, self.domains)
        self.layout.place(table)
        self._placed_by = np.asarray(m, dtype=np.float64)
        # the conflicts of the table used (the ring's stay under chained_*)
        self.placement["chained_host_conflicts"] = self.placement["host_conflicts"]
        self.placement["chained_executor_conflicts"] = self.placement["executor_conflicts"]
        self.placement["host_conflicts"], self.placement["executor_conflicts"] = \
            table_conflicts(table, [self.domains[s] for s in range(self.sites)])
        self.placement["latency_bound_ms"] = round(latency_bound(table, m), 3)
        self.placement["network_cost"] = round(network_cost(table, m, exchanges), 3)
        log.info("copies placed by latency: bound %.1f ms (chained %.1f ms)",
                 self.placement["latency_bound_ms"],
                 self.placement["chained_latency_bound_ms"])
        return self.layout.table().copy()

    def _ready_site(self, ev: SiteReady) -> list[Action]:
        if (self.recovery_phase is Recovery.ADOPTING and self.recovering == ev.site
                and self.adopted is not None and self.adopted.attempt == ev.attempt):
            return self._recovery_step(RecoveryEv.READY)
        if not self._is_member(ev.site, ev.attempt) or self.started:
            return []
        return self._slot_step(ev.site, SlotEv.READY)

    def _lost(self, site: int, attempt: int, reason: str, now: float) -> list[Action]:
        """Process ``attempt`` of slot ``site`` is gone (connection lost, hung, or a peer
        cannot reach it). Only the slot's current process counts: news of an earlier one is
        stale."""
        if self.finished or self.aborted:
            return []
        self.now = max(self.now, now)
        if self.view.number == 0:
            # Registered, but the view is not formed yet, so nothing runs and nothing is lost:
            # forget the registration. Spark retries the task, and its next attempt registers
            # for the slot again (as a failure, the view without it would have no members).
            pending = self._pending.get(site)
            if pending is None or pending.attempt != attempt:
                return []
            return self._slot_step(site, SlotEv.LOST, why=reason)
        if not self._is_member(site, attempt):
            return []
        self.failures.append((now, site, reason))
        if not self.ha:
            return self._slot_step(site, SlotEv.FAILED, why=(
                f"site {site} failed ({reason}); with --ha none a failed site stops the job. "
                f"Run with --ha flux to keep running through site failures."))
        if set(self.view.members) == {site}:
            return self._slot_step(site, SlotEv.LAST_FAILED, why="every site failed")
        return self._fail_site(site)

    def _fail_site(self, site: int) -> list[Action]:
        """Slot ``site``'s process failed, with Flux-HA: its table's ``fail`` (the next
        view), then what recovers it; catch-ups it was the survivor of are orphaned."""
        actions = self._slot_step(site, SlotEv.FAILED)
        if self.aborted:
            return actions
        orphans = self._orphaned(site)
        aborts = [a for a in orphans if isinstance(a, Abort)]
        actions += [a for a in orphans if not isinstance(a, Abort)]
        if aborts:
            return [*aborts, *actions]  # the reason the user sees comes first
        if self.moving:  # a site that died cannot confirm a move: don't wait for it
            actions += self._moves_ready() if not self._catching_up else self._next_catch_up()
        return actions + self._next_task()

    def _fail_view(self, site: int) -> list[Action]:
        """The slot table's ``fail``: the next view without ``site`` (``FailSites``: the
        other copies take over), its replicas incomplete; the run stops if that left a
        partition with no complete copy; balancing stops and the running moves learn of it."""
        members = {s: m for s, m in self.view.members.items() if s != site}
        self.dead.add(site)
        self.links.forget(site)  # reports about its process, or by it, are moot now
        self.view = View(number=self.view.number + 1, members=members)
        self._pending.pop(site, None)
        log.warning("site %d failed; view %d has sites %s", site, self.view.number,
                    sorted(members))
        actions: list[Action] = [FailSites(view=self.view, dead=tuple(sorted(self.dead)))]
        if self.layout is not None:
            hosted = self.layout.hosted(site)
            for m in self.moving.values():  # a complete copy the failure, not the move, took
                c = hosted.get(m.q)
                if c is not None and all((s, m.q, c) not in self.incomplete
                                         for s in range(self.stages)):
                    m.lost_to_failures += 1
            for q, r in hosted.items():
                self.incomplete |= {(s, q, r) for s in range(self.stages)}
        lost = self._lost_partition(site)
        if lost is not None:
            self.aborted = lost
            return [Abort(reason=lost), *actions]  # the reason the user sees comes first
        self._stop_balancing()
        # (a recovery and a group of moves never run at once: an adoptee's failure touches
        # no move)
        return actions + self._moves_lose(site)

    def _lost_partition(self, site: int) -> str | None:
        """Why the run cannot go on, if ``site``'s failure left a partition of some stage
        with no live and complete replica (``lost_partition.py``)."""
        if self.layout is None:
            return None
        return lost_partition(self.layout, self.stages, self._complete, self.dead, site,
                              self.recovery)

    # -- recovery and moves (catch-up orchestration, thesis §3.3, ch. 5) -----------------------
    def _next_task(self) -> list[Action]:
        """Start the next piece of work if none is in progress: adopt a failed slot (or one
        a rescale opened), then a rescale's next step, then the queued moves (recovery,
        rescale, balancing)."""
        if (self.recovery_phase is not Recovery.IDLE or self.moving or self.finished
                or self.layout is None or self.aborted):
            return []
        if self.awaiting and self.standbys:
            return self._recovery_step(RecoveryEv.ADOPT)
        done = self._rescale_progress()  # a rescale's moves queued, or its end
        if self.pending_moves:
            actions = self._start_moves()
            return done + (actions if actions else self._next_task())
        if self.lb_state is Phase.MOVING:  # the movement phase ends with its last move
            return done + self._round(RoundEv.MOVED)
        return done

    def _adopt_next(self) -> list[Action]:
        """The recovery task's ``adopt``: give the oldest failed slot to an idle standby
        (``avail``): the one whose failure domain the fewest of the slot's partitions' other
        copies share, the longest idle among equals."""
        layout = self.layout
        assert layout is not None
        slot = self.awaiting[0]
        live = self._live_domains()
        hosted = layout.hosted(slot)

        def cost(p: SiteAddress) -> tuple[int, int]:
            with_p = {**live, slot: p.domain()}
            per = [clash(slot, layout.others(q, r), with_p) for q, r in hosted.items()]
            return sum(c[0] for c in per), sum(c[1] for c in per)

        proc = min(self.standbys, key=cost) if len(self.standbys) > 1 else self.standbys[0]
        self._standby_step(proc, StandbyState.IDLE, StandbyEv.CHOSEN, slot=slot)
        return self._slot_step(slot, SlotEv.ADOPT, address=proc)

    def _adopt(self, slot: int, proc: SiteAddress) -> list[Action]:
        """The slot table's ``adopt``: the view with ``proc`` as ``slot``'s process, its
        replicas queued for catching up."""
        assert self.layout is not None
        self.awaiting.remove(slot)
        adopted = dataclasses.replace(proc, site=slot)
        self.domains[slot] = proc.domain()
        members = {**self.view.members, slot: adopted}
        self.view = View(number=self.view.number + 1, members=members)
        self.dead.discard(slot)
        self.epoch += 1  # names this incarnation in cu-start and retain
        self.recovering, self.adopted = slot, adopted
        # Liveness is the new process's from now on: the failed process's last heartbeat
        # would have it excluded at the next tick.
        self._last_seen[slot] = self.now
        self.queue = [(s, q, r) for s in range(self.stages)
                      for q, r in sorted(self.layout.hosted(slot).items())]
        log.warning("standby (pid %d) adopts site %d; %d replicas to catch up", proc.pid, slot,
                    len(self.queue))
        return [Adopt(slot=slot, address=adopted, view=self.view, registered=proc.site)]

    def request_moves(self, moves: Sequence[tuple[int, int, int]], reason: str = "balance"
                      ) -> list[Action]:
        """Queue moves of replica r of q to ``dst``, ``(q, r, dst)`` each (an operator's
        request, or a test's); those queued together may start as one group."""
        self.pending_moves += [(q, r, dst, reason) for q, r, dst in moves]
        return self._next_task()

    def _live_domains(self) -> dict[int, Domain]:
        return {j: self.domains[j] for j in self._live() if j in self.domains}

    def _relayout(self, slot: int) -> list[tuple[int, int, int, str]]:
        """Moves that restore placement over failure domains after a standby adopted
        ``slot``: each replica there whose partition has another copy in the same executor
        (or host, where hosts differ) goes to the live site with the fewest shared domains,
        then the fewest replicas (``recovery_site``), if that shares fewer."""
        assert self.layout is not None
        domains = self._live_domains()
        table = self.layout.table().copy()
        live = [j for j in self._live() if j != slot]
        moves = []
        for q, r in sorted(self.layout.hosted(slot).items()):
            others = [int(s) for c, s in enumerate(table[q]) if c != r]
            now = clash(slot, others, domains)
            if now == (0, 0):
                continue
            dst = recovery_site(q, r, table, live, domains)
            if dst is None or clash(dst, others, domains) >= now:
                continue  # nowhere better: the copies stay where they are
            table[q, r] = dst
            moves.append((q, r, dst, "domain"))
        if moves:
            log.warning("site %d's new process shares a failure domain with other copies of "
                        "%d of its partitions: moving them (%s)", slot, len(moves),
                        ", ".join(f"{q}->{d}" for q, _, d, _ in moves))
        return moves

    def _plan_recovery(self, site: int) -> None:
        """``--recovery survivors``: re-place every replica of the failed site on the live
        sites (two copies never on one site), as moves from the dead site."""
        assert self.layout is not None
        table = self.layout.table().copy()
        live = self._live()
        for q, r in sorted(self.layout.hosted(site).items()):
            dst = recovery_site(q, r, table, live, self._live_domains())
            if dst is None:
                continue
            table[q, r] = dst
            self.pending_moves.append((q, r, dst, "recovery"))
        # A move towards the failed site that had not started yet goes elsewhere.
        self.pending_moves = [m for m in self.pending_moves if m[2] != site]

    def _start_moves(self) -> list[Action]:
        """Start the next group of queued moves (different partitions, at most
        ``MOVE_GROUP``); once every live site has confirmed them all (``moved``), the new
        copies are caught up.

        Make before break: a move of a live copy builds the new one in the partition's free
        column (``move`` from ``NOWHERE``) from one of the other copies, while the old copy
        keeps running; ``_catch_up_done`` retires the old one once the new one is folded in.
        A copy whose site failed (recovery onto the survivors) is rebuilt in its own column."""
        assert self.layout is not None
        actions: list[Action] = []
        taken: set[int] = set()
        while self.pending_moves and len(self.moving) < MOVE_GROUP:
            q, r, dst, reason = self.pending_moves[0]
            if q in taken:
                break  # its other copy is the survivor of a move in this group
            self.pending_moves.pop(0)
            src = self.layout.site_of(q, r)
            if (src in (NOWHERE, dst) or dst in self.dead or dst in self.layout.others(q, r)):
                continue
            c = r
            free = self.layout.free(q)
            if src not in self.dead and free is not None:
                c = free
            survivor = self._survivor(q, c, range(self.stages), avoid=r)
            if survivor is None:
                continue  # no complete copy to rebuild it from (the failure is reported)
            taken.add(q)
            baseline = self._complete_copies(q)
            self.epoch += 1
            self.layout.move(q, c, dst)
            self.incomplete |= {(s, q, c) for s in range(self.stages)}
            self.moving[self.epoch] = MoveRecord(q=q, r=r, c=c, src=src, dst=dst,
                                                 epoch=self.epoch, reason=reason,
                                                 start=self.now, survivor=survivor,
                                                 left=self.stages, baseline=baseline)
            self._unconfirmed |= {(j, self.epoch) for j in self._live()}
            self.queue += [(s, q, c) for s in range(self.stages)]
            log.info("move %d: replica %d of partition %d, site %d -> %d (%s%s)", self.epoch, r,
                     q, src, dst, reason, ", make before break" if c != r else "")
            actions.append(Move(q=q, r=c, src=src if c == r else NOWHERE, dst=dst,
                                epoch=self.epoch, reason=reason, survivor=survivor))
        self.queue.sort()  # bottom-up over the whole group
        self._catching_up = False
        return actions

    def _move_of(self, q: int, c: int) -> MoveRecord | None:
        """The running move that builds copy c of q."""
        return next((m for m in self.moving.values() if m.q == q and m.c == c), None)

    def catch_up_site(self, q: int, r: int) -> int | None:
        """The site a catch-up of replica r of q fills: a move's destination, or the slot
        being recovered."""
        m = self._move_of(q, r)
        return m.dst if m is not None else self.recovering

    def _move_step(self, m: MoveRecord, event: MoveEv, why: str = "") -> list[Action]:
        """One transition of move ``m`` (``control/moves.py``), its actions carried out."""
        m.phase, names = move_step(m.epoch, m.phase, event)
        actions: list[Action] = []
        for name in names:
            if name == "retire-old":
                m.retired = self.now
                actions += self._retire(m.q, m.r, m.src, why or f"move {m.epoch} is complete")
            elif name == "give-up":
                log.warning("move %d of partition %d given up: %s", m.epoch, m.q, why)
                self._drop_move(m, why)
                actions += self._retire(m.q, m.c, m.dst, "its build was given up")
            elif name == "drop":  # the new copy is one of the destination's failed copies
                self._drop_move(m, why)
        return actions

    def _moves_lose(self, site: int) -> list[Action]:
        """``site`` failed: what that is to each running move (its old copy's site, its
        destination, or a site its new copy is being built from)."""
        assert self.layout is not None
        actions: list[Action] = []
        for m in list(self.moving.values()):
            builders = {self.layout.site_of(m.q, m.survivor),
                        *(self._survivor_of.get(k) for k in self.in_flight
                          if k[1:] == (m.q, m.c))}
            if site == m.src:
                actions += self._move_step(m, MoveEv.SOURCE_FAILED,
                                           "its site failed during the move")
            elif site == m.dst:
                actions += self._move_step(m, MoveEv.DESTINATION_FAILED,
                                           f"its destination, site {site}, failed")
            elif site in builders:
                actions += self._move_step(m, MoveEv.BUILDER_FAILED,
                                           f"site {site}, which it was being built from, "
                                           f"failed")
        return actions

    def _drop_move(self, m: MoveRecord, why: str) -> None:
        del self.moving[m.epoch]
        key = (m.q, m.c)
        self.queue = [x for x in self.queue if x[1:] != key]
        self.in_flight = {x for x in self.in_flight if x[1:] != key}
        self._unconfirmed = {x for x in self._unconfirmed if x[1] != m.epoch}
        m.abandoned = why
        self._close_move(m)
        self.moves.append(m)

    def _retire(self, q: int, c: int, site: int, why: str) -> list[Action]:
        """Copy c of q leaves the placement (its column becomes q's free one): every site,
        the ingress and the egress take over from it, its site drops it."""
        assert self.layout is not None
        self.epoch += 1
        self.layout.move(q, c, NOWHERE)
        self.incomplete -= {(s, q, c) for s in range(self.stages)}
        log.info("copy %d of partition %d on site %d retired (%s)", c, q, site, why)
        return [Move(q=q, r=c, src=site, dst=NOWHERE, epoch=self.epoch, reason="retire")]

    def _moved(self, ev: Moved) -> list[Action]:
        if ev.epoch not in self.moving:
            return []
        self.now = max(self.now, ev.now)
        self._unconfirmed.discard((ev.site, ev.epoch))
        return self._moves_ready()

    def _moves_ready(self) -> list[Action]:
        """Every live site applied every move of the group: catch up their stages bottom-up."""
        if not self.moving or self._catching_up:
            return []
        self._unconfirmed = {x for x in self._unconfirmed if x[0] not in self.dead}
        if self._unconfirmed:
            return []
        confirmed: list[Action] = []
        for m in list(self.moving.values()):  # how long the sites took to apply the group
            if m.confirmed is None:
                m.confirmed = self.now
                confirmed += self._move_step(m, MoveEv.CONFIRMED)
        self._catching_up = True
        return confirmed + self._next_catch_up()

    def _next_catch_up(self) -> list[Action]:
        """Start catch-ups, up to ``CATCH_UP_PARALLEL`` at a time, bottom-up: a stage's
        replicas start only once every replica of the stages below is folded in (a new
        consumer replica reads from its own dataflow copy's producers)."""
        assert self.layout is not None
        breaks = self._retire_folded()
        if not self.queue and not self.in_flight:
            if any(m.phase in RUNNING for m in self.moving.values()):
                return breaks  # an old copy waits for its new one's fold-in everywhere
            if self.recovering is None:  # the move group is done (or was abandoned)
                for m in sorted(self.moving.values(), key=lambda m: m.epoch):
                    self._close_move(m)
                    self.moves.append(m)
                self.moving, self._catching_up = {}, False
                return breaks + self._next_task()
            return self._recovery_step(RecoveryEv.CAUGHT_UP)
        actions: list[Action] = breaks
        while self.queue and len(self.in_flight) < CATCH_UP_PARALLEL:
            s, q, r = self.queue[0]
            if self.in_flight and min(x[0] for x in self.in_flight) < s:
                break  # the stage below is still being caught up
            self.queue.pop(0)
            self.in_flight.add((s, q, r))
            move = self._move_of(q, r)
            # A move's producers sent their ``retaining`` to the copy the move named; if that
            # one failed since, another complete copy asks them again (``retain``).
            retained = move is not None and self._complete(s, q, move.survivor)
            survivor = (move.survivor if move is not None and retained
                        else self._survivor(q, r, (s,)))
            if survivor is None:  # nothing left to copy from: ``_lost_partition`` said so
                survivor = self.layout.next_copy(q, r)
            site = self.layout.site_of(q, survivor)
            self._survivor_of[(s, q, r)] = site
            actions.append(CatchUp(stage=s, q=q, r=r, survivor=site,
                                   epoch=move.epoch if move is not None else self.epoch,
                                   retained=retained))
        return actions

    def _folded(self, ev: Folded) -> list[Action]:
        m = self.moving.get(ev.epoch)
        if (m is None or m.phase not in (MovePhase.BUILDING, MovePhase.FOLDING)
                or (ev.q, ev.c) != (m.q, m.c)):
            return []  # a recovery's fold-in, or a move's that ended
        self.now = max(self.now, ev.now)
        m.folded.add((ev.site, ev.stage))
        return self._next_catch_up() if self._catching_up else []

    def _retire_folded(self) -> list[Action]:
        """Break: retire the old copy of every move whose new copy is caught up in every
        stage and folded in by every live party (each site for the consumer stages it
        hosts roles of, the egress for the last): no take-over can need the old one now."""
        actions: list[Action] = []
        live = self._live()
        need = {(j, s) for j in live for s in range(1, self.stages)} | {(DRIVER, self.stages)}
        for m in sorted(self.moving.values(), key=lambda m: m.epoch):
            if m.phase is MovePhase.FOLDING and need <= m.folded:
                actions += self._move_step(m, MoveEv.FOLDED)
        return actions

    def _complete(self, stage: int, q: int, c: int) -> bool:
        """Replica c of partition q of ``stage`` is live and caught up."""
        assert self.layout is not None
        site = self.layout.site_of(q, c)
        return (site != NOWHERE and site not in self.dead
                and (stage, q, c) not in self.incomplete)

    def _survivor(self, q: int, r: int, stages: Sequence[int], avoid: int = -1
                  ) -> int | None:
        """The copy to catch copy r of q up from: the first after r (for two replicas, the
        other one) that is live and complete in ``stages``; ``avoid`` (the copy a move
        retires, on the site it relieves) only if no other is."""
        assert self.layout is not None
        k = self.layout.columns
        ok = [c for c in ((r + i) % k for i in range(1, k))
              if all(self._complete(s, q, c) for s in stages)]
        ok.sort(key=lambda c: c == avoid)
        return ok[0] if ok else None

    def _orphaned(self, site: int) -> list[Action]:
        """Catch-ups whose survivor was ``site``: their new replicas may hold part of a
        transfer that will never complete (state installed, no fold-in), so their sites fail
        too and are recovered afresh from the copies left. With two replicas this never
        happens: the partition is lost (``_lost_partition``) and the run stops first."""
        assert self.layout is not None
        targets = sorted({self.layout.site_of(q, r) for (s, q, r) in self.in_flight
                          if self._survivor_of.get((s, q, r)) == site} - self.dead - {site})
        actions: list[Action] = []
        for t in targets:
            m = self.view.members.get(t)
            if m is None or t in self.dead:
                continue
            log.warning("site %d loses the catch-up it was receiving: its survivor, site %d, "
                        "failed; it is recovered afresh", t, site)
            actions += self._lost(t, m.attempt, f"the survivor it was being caught up from "
                                  f"(site {site}) failed", self.now)
        return actions

    def _catch_up_done(self, ev: CatchUpDone) -> list[Action]:
        if (ev.stage, ev.q, ev.r) not in self.in_flight:
            return []  # stale: from an abandoned attempt
        self.now = max(self.now, ev.now)
        self.in_flight.discard((ev.stage, ev.q, ev.r))
        self.incomplete.discard((ev.stage, ev.q, ev.r))
        m = self._move_of(ev.q, ev.r)
        site = m.dst if m is not None else self.recovering
        actions: list[Action] = []
        if m is not None:
            m.nbytes += ev.nbytes
            m.left -= 1
            if m.left == 0:
                m.end = self.now
                actions += self._move_step(m, MoveEv.BUILT)
        self.recoveries.append({"stage": ev.stage, "partition": ev.q, "replica": ev.r,
                                "site": site, "state_bytes": ev.nbytes, "done_at": ev.now})
        return actions + self._next_catch_up()

    # -- the membership tables' actions (``membership.py`` names them) -----------------------
    def _slot_step(self, slot: int, event: SlotEv, address: SiteAddress | None = None,
                   now: float = 0.0, why: str = "") -> list[Action]:
        """One transition of site slot ``slot``, its actions carried out in order (until
        one stops the run)."""
        state, names = slot_step(slot, self.mode, self.slot_state[slot], event)
        self.slot_state[slot] = state
        out: list[Action] = []
        for name in names:
            if self.aborted:
                break
            match name:
                case "admit":
                    assert address is not None
                    self._pending[slot] = address
                    self._last_seen[slot] = now
                case "replace":
                    assert address is not None
                    log.warning("site %d: attempt %d replaces attempt %d before the view",
                                slot, address.attempt, self._pending[slot].attempt)
                    del self._pending[slot]
                case "stop":
                    assert address is not None
                    out.append(StopSite(site=slot, attempt=address.attempt,
                                        reason="the slot already has a live site"))
                case "forget":
                    log.warning("site %d (attempt %d) was lost before every site registered "
                                "(%s); waiting for its next attempt", slot,
                                self._pending[slot].attempt, why)
                    del self._pending[slot]
                    self._last_seen.pop(slot, None)
                case "count-ready":
                    self._ready.add(slot)
                    if len(self._ready) == self.sites:
                        self.started = True
                        self.lb_at = self.now + self.delta
                        out.append(StartIngress())
                case "abort":
                    self.aborted = why
                    out.append(Abort(reason=why))
                case "fail":
                    out += self._fail_view(slot)
                case "await":
                    if slot not in self._retiring:  # a shrink rebuilds its copies elsewhere
                        self.awaiting.append(slot)
                        self.awaiting_since[slot] = self.now
                case "open":  # a rescale's new slot: the grow has a wait of its own
                    self.awaiting.append(slot)
                case "retire":
                    out += self._retire_slot(slot)
                case "vacate":
                    if slot in self.awaiting:
                        self.awaiting.remove(slot)
                case "await-first":  # the standby died mid-recovery: start over later
                    out += self._recovery_step(RecoveryEv.ADOPTEE_FAILED)
                    self.awaiting.insert(0, slot)
                case "dequeue":
                    self.awaiting.remove(slot)
                case "re-place":
                    self._plan_recovery(slot)
                case "adopt":
                    assert address is not None
                    out += self._adopt(slot, address)
                case "relayout":
                    self.pending_moves += self._relayout(slot)
        return out

    def _standby_step(self, proc: SiteAddress, state: StandbyState, event: StandbyEv,
                      slot: int = -1) -> list[Action]:
        """One transition of standby process ``proc``, its actions carried out."""
        _, names = standby_step(f"{proc.site}/{proc.attempt} (pid {proc.pid})", self.mode,
                                state, event)
        out: list[Action] = []
        for name in names:
            match name:
                case "standby":
                    self.standbys.append(proc)
                    out.append(Standby(site=proc.site, attempt=proc.attempt))
                case "next-task":
                    out += self._next_task()
                case "stop":
                    out.append(StopSite(site=proc.site, attempt=proc.attempt, reason=(
                        "--recovery survivors: failed replicas are recovered onto the "
                        "surviving sites; no standby is needed" if self.mode is Mode.SURVIVORS
                        else "the job no longer accepts sites (with --ha none a restarted "
                        "site has no role)")))
                case "take-over":
                    self.standbys.remove(proc)
                    self._registered_as[slot] = proc.site
        return out

    def _recovery_step(self, event: RecoveryEv) -> list[Action]:
        """One transition of the recovery task, its actions carried out in order."""
        self.recovery_phase, names = recovery_step(self.recovering, self.recovery_phase, event)
        out: list[Action] = []
        for name in names:
            match name:
                case "adopt":
                    out += self._adopt_next()
                case "catch-up":
                    out += self._next_catch_up()
                case "recovered":
                    slot = self.recovering
                    assert slot is not None
                    log.warning("site %d recovered: every replica caught up and folded in",
                                slot)
                    self.recovering, self.adopted = None, None
                    out += self._slot_step(slot, SlotEv.RECOVERED)
                    out.append(Recovered(slot=slot))
                case "start-over":
                    self.recovering, self.adopted = None, None
                    self.in_flight, self.queue = set(), []
                case "next-task":
                    out += self._next_task()
        return out

    def _tick(self, now: float) -> list[Action]:
        self.now = max(self.now, now)
        actions: list[Action] = []
        members: Sequence[SiteAddress] = list(self.view.members.values())
        for m in members:
            seen = self._last_seen.get(m.site, now)
            if now - seen > self.heartbeat_timeout:
                actions += self._lost(
                    m.site, m.attempt, f"no heartbeat for {now - seen:.1f}s (hung?)", now
                )
        actions += self._judge_links(now)
        late = [k for k in self.awaiting if not self.standbys
                and now - self.awaiting_since.get(k, now) > self.standby_wait]
        for k in late:
            log.warning("no standby for site %d after %.0fs: recovering its replicas onto the "
                        "surviving sites", k, self.standby_wait)
            self._slot_step(k, SlotEv.WAITED)
        if late:
            actions += self._next_task()
        actions += self._rescale_tick()
        if self._balancing() and self.lb_state in (Phase.WAIT, Phase.COLLECT) \
                and now >= self.lb_at:
            actions += self._round(RoundEv.DUE)
        return actions
