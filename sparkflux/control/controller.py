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
    ConnectionClosed,
    Event,
    FailSites,
    Finished,
    Heartbeat,
    InstallView,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    StartIngress,
    StopSite,
    Tick,
    View,
)

log = logging.getLogger(__name__)


class Controller:
    """Membership and views for ``sites`` site slots."""

    def __init__(self, sites: int, heartbeat_timeout: float = 10.0, ha: bool = False) -> None:
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
        self.standbys: list[SiteAddress] = []

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
        return actions

    def _is_member(self, site: int, attempt: int) -> bool:
        m = self.view.members.get(site)
        return m is not None and m.attempt == attempt

    def _registered(self, ev: Registered) -> list[Action]:
        a = ev.address
        if not 0 <= a.site < self.sites:
            return [StopSite(site=a.site, attempt=a.attempt, reason="no such site slot")]
        if self.view.number > 0 and self.ha:
            self.standbys.append(a)
            return [Standby(site=a.site, attempt=a.attempt)]
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
        return [FailSites(view=self.view, dead=tuple(sorted(self.dead)))]

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
