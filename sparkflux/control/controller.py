"""The controller core: membership, failure detection and views (thesis §3.4, digest §3).

Without replication (``--ha none``) the controller's job is small: gather one registration per
site slot, install view 1, start the ingress once every site is connected, and on any site
failure -- a lost connection or a heartbeat timeout (a hung site) -- abort the job with a
message that says what happened and how to survive it (``--ha flux``). A site process that
registers for a slot that already has a live member, or after the view was installed (Spark's
retry of a crashed site task), is told to stop: no zombies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sparkflux.control.events import (
    Abort,
    Action,
    ConnectionClosed,
    Event,
    Finished,
    Heartbeat,
    InstallView,
    Registered,
    SiteAddress,
    SiteReady,
    StartIngress,
    StopSite,
    Tick,
    View,
)

log = logging.getLogger(__name__)


class Controller:
    """Membership and views for ``sites`` site slots."""

    def __init__(self, sites: int, heartbeat_timeout: float = 10.0) -> None:
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
        self.aborted = (
            f"site {site} failed ({reason}); with --ha none a failed site stops the job. "
            f"Run with --ha flux to keep running through site failures."
        )
        return [Abort(reason=self.aborted)]

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
