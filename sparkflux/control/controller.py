"""The controller core: membership, failure detection and views (thesis §3.4, digest §3).

It gathers one registration per site slot, installs view 1, and starts the ingress once every
site is connected. A site fails when its connection is lost or its heartbeat times out (a hung
site). Without replication (``--ha none``) a failure aborts the job with a message that says
how to survive it (``--ha flux``). With Flux-HA the controller installs the next view of a
totally ordered sequence without the failed site and delivers ``fail`` to every live site and
to the ingress and egress (take-over). A failed site is never readmitted into its old role
(a site learns it was excluded and stops: fail-stop, no zombies); a site process registering
after view 1 (Spark's retry of a crashed task) becomes a stateless standby.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

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
    Heartbeat,
    InstallView,
    Recovered,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    StopSite,
    Tick,
    View,
)
from sparkflux.dataflow.placement import Layout

log = logging.getLogger(__name__)


class Controller:
    """Membership and views for ``sites`` site slots."""

    def __init__(self, sites: int, heartbeat_timeout: float = 10.0, ha: bool = False,
                 layout: Layout | None = None, stages: int = 0) -> None:
        if sites < 1:
            raise ValueError("a controller needs at least one site")
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
        self.dead: set[int] = set()
        self.standbys: list[SiteAddress] = []  # idle standby processes
        self.layout = layout
        self.stages = stages
        self.awaiting: list[int] = []  # failed slots waiting for a standby, oldest first
        self.recovering: int | None = None
        self.adopted: SiteAddress | None = None
        self.queue: list[tuple[int, int, int]] = []
        self.current: tuple[int, int, int] | None = None
        self.recoveries: list[dict] = []
        self.epoch = 0

    def handle(self, *events: Event) -> list[Action]:
        actions: list[Action] = []
        for ev in events:
            match ev:
                case Registered():
                    actions += self._registered(ev)
                case SiteReady():
                    actions += self._ready_site(ev)
                case Heartbeat():
                    if self._is_member(ev.site, ev.attempt):
                        self._last_seen[ev.site] = ev.now
                case ConnectionClosed():
                    actions += self._lost(ev.site, ev.attempt, ev.reason, ev.now)
                case Tick():
                    actions += self._tick(ev.now)
                case Finished():
                    self.finished = True
                case CatchUpDone():
                    actions += self._catch_up_done(ev)
        return actions

    def _is_member(self, site: int, attempt: int) -> bool:
        m = self.view.members.get(site)
        return m is not None and m.attempt == attempt

    def _registered(self, ev: Registered) -> list[Action]:
        a = ev.address
        spare = a.site >= self.sites  # --spare-sites: standbys from the start
        if a.site < 0 or (spare and not self.ha):
            return [StopSite(site=a.site, attempt=a.attempt, reason="no such site slot")]
        if (self.view.number > 0 or spare) and self.ha:
            self.standbys.append(a)
            return [Standby(site=a.site, attempt=a.attempt), *self._adopt_next()]
        if self.view.number > 0 or a.site in self._pending:
            reason = ("the job no longer accepts sites (with --ha none a restarted site has no "
                      "role)" if self.view.number > 0 else "the slot already has a live site")
            return [StopSite(site=a.site, attempt=a.attempt, reason=reason)]
        self._pending[a.site] = a
        self._last_seen[a.site] = ev.now
        if len(self._pending) < self.sites:
            return []
        self.view = View(number=1, members=dict(self._pending))
        log.info("view 1 installed with %d sites", self.sites)
        return [InstallView(view=self.view)]

    def _ready_site(self, ev: SiteReady) -> list[Action]:
        if (self.recovering == ev.site and self.adopted is not None
                and self.adopted.attempt == ev.attempt and self.current is None):
            return self._next_catch_up()
        if not self._is_member(ev.site, ev.attempt) or self.started:
            return []
        self._ready.add(ev.site)
        if len(self._ready) == self.sites:
            self.started = True
            return [StartIngress()]
        return []

    def _lost(self, site: int, attempt: int, reason: str, now: float) -> list[Action]:
        if self.finished or self.aborted:
            return []
        pending = self._pending.get(site)
        if not self._is_member(site, attempt) and (pending is None or pending.attempt != attempt):
            return []
        self.failures.append((now, site, reason))
        if self.ha:
            return self._fail_site(site)
        self.aborted = (
            f"site {site} failed ({reason}); with --ha none a failed site stops the job. "
            f"Run with --ha flux to keep running through site failures."
        )
        return [Abort(reason=self.aborted)]

    def _fail_site(self, site: int) -> list[Action]:
        members = {s: m for s, m in self.view.members.items() if s != site}
        if not members:
            self.aborted = "every site failed"
            return [Abort(reason=self.aborted)]
        self.dead.add(site)
        self.view = View(number=self.view.number + 1, members=members)
        self._pending.pop(site, None)
        log.warning("site %d failed; view %d has sites %s", site, self.view.number,
                    sorted(members))
        actions: list[Action] = [FailSites(view=self.view, dead=tuple(sorted(self.dead)))]
        lost = self._lost_partition(site)
        if lost is not None:
            self.aborted = lost
            return actions + [Abort(reason=lost)]
        if self.recovering == site:  # the standby died mid-recovery: start over later
            self.recovering, self.adopted, self.current, self.queue = None, None, None, []
            self.awaiting.insert(0, site)
        elif site not in self.awaiting:
            self.awaiting.append(site)
        return actions + self._adopt_next()

    def _lost_partition(self, site: int) -> str | None:
        """A partition none of whose replicas is live and complete any more, if any.

        A replica is complete when its site is live and, if that site is being recovered,
        its catch-up has finished."""
        if self.layout is None:
            return None
        done = {(d["stage"], d["partition"], d["replica"]) for d in self.recoveries
                if d["site"] == self.recovering}
        for s in range(self.stages):
            for q in range(self.layout.partitions):
                live = [r for r in range(self.layout.replicas)
                        if self.layout.site_of(q, r) not in self.dead
                        and (self.layout.site_of(q, r) != self.recovering
                             or (s, q, r) in done)]
                if not live:
                    return (f"site {site} failed while partition {q} of stage {s} had no other "
                            f"complete replica (its copy was lost or still being caught up); "
                            f"its state is lost")
        return None

    # -- recovery (catch-up orchestration, digest §5.4) --------------------------------------------
    def _adopt_next(self) -> list[Action]:
        """Give the oldest failed slot to an idle standby (``avail``)."""
        if self.recovering is not None or not self.awaiting or not self.standbys:
            return []
        if self.layout is None or self.finished:
            return []
        slot = self.awaiting.pop(0)
        proc = self.standbys.pop(0)
        adopted = SiteAddress(site=slot, attempt=proc.attempt, host=proc.host, port=proc.port,
                              pid=proc.pid)
        members = {**self.view.members, slot: adopted}
        self.view = View(number=self.view.number + 1, members=members)
        self.dead.discard(slot)
        self.epoch = self.view.number  # names this incarnation in cu-start and retain
        self.recovering, self.adopted = slot, adopted
        self.queue = [(s, q, r) for s in range(self.stages)
                      for q, r in sorted(self.layout.hosted(slot).items())]
        log.warning("standby (pid %d) adopts site %d; %d replicas to catch up", proc.pid, slot,
                    len(self.queue))
        return [Adopt(slot=slot, address=adopted, view=self.view)]

    def _next_catch_up(self) -> list[Action]:
        assert self.layout is not None and self.recovering is not None
        if not self.queue:
            slot = self.recovering
            log.warning("site %d recovered: every replica caught up and folded in", slot)
            self.recovering, self.adopted, self.current = None, None, None
            return [Recovered(slot=slot), *self._adopt_next()]
        self.current = self.queue.pop(0)
        s, q, r = self.current
        return [CatchUp(stage=s, q=q, r=r, survivor=self.layout.site_of(q, 1 - r),
                        epoch=self.epoch)]

    def _catch_up_done(self, ev: CatchUpDone) -> list[Action]:
        if self.current != (ev.stage, ev.q, ev.r):
            return []  # stale: from an abandoned attempt
        self.recoveries.append({"stage": ev.stage, "partition": ev.q, "replica": ev.r,
                                "site": self.recovering, "state_bytes": ev.nbytes,
                                "done_at": ev.now})
        return self._next_catch_up()

    def _tick(self, now: float) -> list[Action]:
        actions: list[Action] = []
        members: Sequence[SiteAddress] = list(self.view.members.values())
        for m in members:
            seen = self._last_seen.get(m.site, now)
            if now - seen > self.heartbeat_timeout:
                actions += self._lost(
                    m.site, m.attempt, f"no heartbeat for {now - seen:.1f}s (hung?)", now
                )
        return actions
