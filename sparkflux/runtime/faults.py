"""The faults a run's options inject from the driver: ``--kill`` (SIGKILL a site's process,
at a moment, after the first recovery, after a slot's next adoption or inside a move),
``--hang`` (SIGSTOP, then SIGCONT), ``--cut``/``--isolate`` (packets dropped) and ``--slow``
(a site's capacity scaled). A moment is seconds after the input starts or a count of admitted
input records (``fault_specs.Moment``); a count the input never reaches is reported when the
run ends. Real process signals in local mode;
on a cluster a ``Kill`` frame the site carries out itself. ``--kill LEVEL:SITE@SECONDS`` on a
standalone cluster whose workers run on this machine (a test tool): SIGKILL, from outside, the
site's Python worker, its executor JVM or the Worker daemon JVM above it, found through
``/proc`` (``proctree.py``); ``most`` picks the one hosting the most live sites. What was
injected is recorded for the metrics and the timeline (a JVM's kill once per site it
hosted)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sparkflux.model.errors import PlanError
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import netcut, proctree
from sparkflux.runtime.fault_specs import (
    Admitted,
    CutSource,
    KillAdopted,
    KillAfterRecovery,
    KillAt,
    KillInMove,
    KillProcess,
    Moment,
    Partition,
)

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

log = logging.getLogger(__name__)


class Faults:
    """Fault injection for one run, on the host's loop."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.kills: list[dict[str, Any]] = []
        self.slowed: list[dict[str, Any]] = []
        self.cuts: list[dict[str, Any]] = []  # --cut and --isolate, as injected
        self.hangs: list[dict[str, Any]] = []  # --hang, as injected
        self.squeezed: list[dict[str, Any]] = []  # --squeeze, as injected
        self._on_adopt: dict[int, list[float]] = {}  # slot -> kill delays after its adoption
        # (records admitted, the spec, what to do): the faults due at a count of input
        self._on_input: list[tuple[int, str, Callable[[float], None]]] = []
        self._move_armed = False  # the first move's kills are scheduled
        self.rescales_due: list[int] = []  # --rescale targets due while another one ran
        self.partitions: list[dict[str, Any]] = []  # --partition, as injected
        self.source_cuts: list[dict[str, Any]] = []  # --cut-source, as injected
        names = [s.name for s in host.plan.streams]
        for c in host.cfg.source_cuts:
            if c.name not in names:
                raise PlanError(f"--cut-source {c}: the dataflow has no source {c.name!r}; "
                                f"its sources are {', '.join(map(repr, names))}")

    def _since_start(self, delay: float = 0.0) -> float:
        return time.time() + delay - (self.host.metrics.start or time.time())

    def arm(self) -> None:
        """Schedule the options' faults, timed from now (the input's start)."""
        cfg = self.host.cfg
        for k in cfg.kills_of(KillAt):
            self._at(k.at, f"--kill {k}", partial(self.kill, k.site))
        for s in cfg.slows:
            self._at(s.at, f"--slow {s}", partial(self.slow, s.site, s.factor))
        for h in cfg.hangs:
            self._at(h.at, f"--hang {h}", partial(self.hang, h.site, h.for_s))
        for c in cfg.cuts:
            self._at(c.at, f"{c.flag} {c}",
                     partial(self.cut, c.site, duration=c.for_s, driver=c.isolate))
        for part in cfg.partitions_cut:
            self._at(part.at, f"--partition {part}", partial(self.partition, part))
        for sc in cfg.source_cuts:
            self._at(sc.at, f"--cut-source {sc}", partial(self.cut_source, sc))
        for q in cfg.squeezes:
            self._at(q.at, f"--squeeze {q}", partial(self.squeeze, q.site, q.mb))
        for r in cfg.rescales:
            self._at(r.at, f"--rescale {r}", partial(self.rescale, r.sites))
        for a in cfg.kills_of(KillAdopted):  # ``--kill SITE@adopted+SECONDS``
            self._on_adopt.setdefault(a.site, []).append(a.after_s)
        for p in cfg.kills_of(KillProcess):  # ``--kill LEVEL:SITE@WHEN``
            self._at(p.at, f"--kill {p}", partial(self.kill_process, p.level, p.site))
        self._on_input.sort(key=lambda due: due[0])

    def _at(self, at: Moment, spec: str, fire: Callable[[float], None]) -> None:
        """Call ``fire`` (with the seconds since the input started) at the moment ``at``."""
        if isinstance(at, Admitted):
            self._on_input.append((at.records, spec, fire))
        else:
            asyncio.get_running_loop().call_later(at, lambda: fire(self._since_start()))

    def unfired(self) -> list[str]:
        """The specs of faults timed by a count of input records the input never reached."""
        return [spec for _, spec, _ in self._on_input]

    def after_recovery(self) -> None:
        """``--kill SITE@recovered+SECONDS``: kills timed from the first recovery's end."""
        loop = asyncio.get_running_loop()
        for k in self.host.cfg.kills_of(KillAfterRecovery):
            loop.call_later(k.after_s, self.kill, k.site, self._since_start(k.after_s))

    def admitted(self, records: int) -> None:
        """``records`` input records are admitted: the faults timed ``input+RECORDS`` that are
        due fire."""
        while self._on_input and self._on_input[0][0] <= records:
            _, _, fire = self._on_input.pop(0)
            fire(self._since_start())

    def adopted(self, slot: int) -> None:
        """A process adopted ``slot``: the kills waiting for it are due, and the slot's
        squeezed budget is its budget too (a squeeze is of the slot, as the thesis cuts a
        machine's memory)."""
        squeezed = [q for q in self.squeezed if q["site"] == slot]
        if squeezed:
            self.host.tell(slot, cm.Squeeze(budget=int(squeezed[-1]["mb"] * (1 << 20))))
        loop = asyncio.get_running_loop()
        for delay in self._on_adopt.pop(slot, []):
            log.warning("site %d was adopted: killing it in %.2fs as asked", slot, delay)
            loop.call_later(delay, self.kill, slot, self._since_start(delay))

    def moving(self, src: int, dst: int, built_from: int) -> None:
        """The run's first move started (its old copy on ``src``, the new one built on
        ``dst`` from ``built_from``): ``--kill ROLE@move+SECONDS`` kills are due."""
        if self._move_armed:
            return
        self._move_armed = True
        loop = asyncio.get_running_loop()
        roles = {"source": src, "destination": dst, "from": built_from}
        others = sorted(set(self.host.controller.view.members) - self.host.dead
                        - set(roles.values()))
        if others:
            roles["bystander"] = others[0]
        for k in self.host.cfg.kills_of(KillInMove):
            role, delay = k.role, k.after_s
            if role == "bystander" and role not in roles:
                log.warning("--kill bystander@move+%.2f: every live site takes part in the "
                            "move; nobody killed", delay)
                continue
            site = roles[role] if isinstance(role, str) else role
            log.warning("a move started (site %d -> %d, built from %d): killing site %d (%s) "
                        "in %.2fs as asked", src, dst, built_from, site, role, delay)
            loop.call_later(delay, self.kill, site, self._since_start(delay))

    def rescale(self, sites: int, after: float) -> None:
        """``--rescale SITES@WHEN``: asked now, or once the rescale running ends."""
        if self.host.controller.rescaling is not None:
            log.warning("--rescale %d@%.2f s: waits for the rescale in progress", sites, after)
            self.rescales_due.append(sites)
            return
        log.warning("--rescale: to %d sites, %.2f s after the input started", sites, after)
        why = self.host.rescale_here(sites)
        if why:
            self.host.abort(f"--rescale {sites}: {why}")

    def rescaled(self) -> None:
        """A rescale ended: the next ``--rescale`` that waited for it is asked now."""
        if self.rescales_due:
            self.rescale(self.rescales_due.pop(0), self._since_start())

    def kill(self, site: int, after: float) -> None:
        """Crash a site's process with SIGKILL. A slot with no live process at that moment
        (it failed, and no standby has adopted it yet) is killed once its next process has
        adopted it, right away, and the log says so."""
        host = self.host
        if host.over():
            return
        member = host.controller.view.members.get(site)
        if member is None or site in host.dead:
            log.warning("--kill %d@%.2f: site %d has no live process now; killing its next "
                        "process when it adopts the slot", site, after, site)
            self._on_adopt.setdefault(site, []).append(0.0)
            return
        self.kills.append({"site": site, "at_s": after, "pid": member.pid,
                           "time": time.time()})
        log.warning("killing site %d (pid %d) at %.2fs", site, member.pid, after)
        if host.cfg.local:
            _signal(member.pid, signal.SIGKILL)
        else:
            host.tell(site, cm.Kill())

    def kill_process(self, level: str, site: int | None, after: float) -> None:
        """``--kill LEVEL:SITE@WHEN``: SIGKILL the process of ``level`` (``python``,
        ``executor``, ``worker``) that holds ``site`` (None: the one holding the most live
        sites) on this machine, and record a kill for every live site it held."""
        host = self.host
        if host.over():
            return
        what = f"--kill {KillProcess(level, site, round(after, 2))}"
        members = host.controller.view.members
        live = {s: m.pid for s, m in members.items() if s not in host.dead}
        groups = proctree.group_by_holder(live, level)
        if site is None:
            target = proctree.most_sites(groups)
        else:
            target = next((h for h, sites in groups.items() if site in sites), None)
        if target is None:
            log.error("%s: no %s process found on this machine for %s (live sites and pids: "
                      "%s); this kill needs the sites on the driver's machine", what, level,
                      "any site" if site is None else f"site {site}", live)
            return
        sites = groups[target]
        now = time.time()
        for s in sites:
            self.kills.append({"site": s, "at_s": after, "pid": live[s], "time": now,
                               "level": level, "killed_pid": target})
        log.warning("%s: killing the %s process %d, which hosts sites %s, at %.2fs", what,
                    level, target, sites, after)
        _signal(target, signal.SIGKILL)

    def slow(self, site: int, factor: float, after: float = 0.0) -> None:
        """``--slow``: from now on (``after`` seconds into the input) the site gets ``factor``
        times its capacity."""
        if self.host.control_conn(site) is not None:
            self.slowed.append({"site": site, "factor": factor, "at_s": after,
                                "time": time.time()})
            self.host.tell(site, cm.Slow(factor=factor))

    def squeeze(self, site: int, mb: float, after: float = 0.0) -> None:
        """``--squeeze``: from now on the site's memory budget is ``mb`` megabytes."""
        log.warning("--squeeze: site %d's memory budget is %g MB from now (%.2f s)", site, mb,
                    after)
        self.squeezed.append({"site": site, "mb": mb, "at_s": round(after, 3),
                              "time": time.time()})
        self.host.tell(site, cm.Squeeze(budget=int(mb * (1 << 20))))

    def hang(self, site: int, duration: float, after: float = 0.0) -> None:
        """Freeze a site's process (SIGSTOP) for ``duration`` seconds: a hung site, found only
        by its silence: its peers' links (``--link-timeout``) with ``--ha flux``, else the
        heartbeat timeout. When it wakes it finds itself excluded and stops."""
        member = self.host.controller.view.members.get(site)
        if member is None or not self.host.cfg.local:
            return
        self.hangs.append({"site": site, "seconds": duration, "at_s": after,
                           "pid": member.pid, "time": time.time()})
        _signal(member.pid, signal.SIGSTOP)
        asyncio.get_running_loop().call_later(duration, _signal, member.pid, signal.SIGCONT)


    def cut(self, site: int, after: float, duration: float, driver: bool) -> None:
        """``--cut`` / ``--isolate``: drop the packets of the site's links to its peers (and
        to the driver) for ``duration`` seconds, on this machine's loopback interface
        (``netcut.py``); both ends live, their connections stay open. The rules are put in
        place off the loop (iptables takes a few milliseconds) and heal by themselves."""
        host = self.host
        member = host.controller.view.members.get(site)
        what = f"--{'isolate' if driver else 'cut'} {site}@{after:.2f}={duration:g}"
        if member is None or site in host.dead or not host.cfg.local:
            log.error("%s: site %d has no live process on this machine now", what, site)
            return
        peers = [m.port for s, m in host.controller.view.members.items() if s != site]
        assert host.port is not None  # the driver listens before any fault is due
        cut = netcut.Netcut(member.pid, driver_ports=[host.port], cut_driver=driver,
                            peer_ports=peers)
        record = {"site": site, "at_s": after, "seconds": duration, "driver": driver,
                  "pid": member.pid, "time": time.time()}
        log.warning("%s: cutting site %d (pid %d) off from its peers%s for %.0f s", what,
                    site, member.pid, " and the driver" if driver else "", duration)

        def apply() -> None:
            try:
                cut.cut(duration)
            except netcut.NetcutError as e:
                log.error("%s failed: %s", what, e)
                return
            self.cuts.append(record)  # (list.append: safe from this thread)

        asyncio.get_running_loop().run_in_executor(None, apply)


    def cut_source(self, c: CutSource, after: float) -> None:
        """``--cut-source``: the source's records are held outside the dataflow for a while
        (``SourceFeed.cut``); the strict merge of the sources waits for them."""
        host = self.host
        i = [s.name for s in host.plan.streams].index(c.name)
        if not host.feed.cut(i, c.for_s):
            log.error("--cut-source %s: the source had ended", c)
            return
        self.source_cuts.append({"source": c.name, "at_s": round(after, 3),
                                 "seconds": c.for_s})
        log.warning("--cut-source %s: source %r cut off from the ingress for %g s", c,
                    c.name, c.for_s)

    def partition(self, p: Partition, after: float) -> None:
        """``--partition``: drop the packets of the links between the two groups' processes
        (and between a group and the driver where it is named in the other), on this
        machine's loopback interface (``netcut.py``); every process lives and its
        connections stay open. The rules go in off the loop and heal by themselves."""
        host = self.host
        members = host.controller.view.members
        missing = [s for g in p.groups for s in g if s not in members or s in host.dead]
        if missing or not host.cfg.local:
            log.error("--partition %s: sites %s have no live process on this machine now", p,
                      missing or "of a cluster")
            return
        assert host.port is not None  # the driver listens before any fault is due
        peers = [m.port for m in members.values()]
        pids = [[members[s].pid for s in g] for g in p.groups]
        cuts = [netcut.Netcut(pid, driver_ports=[host.port], cut_driver=p.driver == 1,
                              peer_ports=peers, towards=pids[1]) for pid in pids[0]]
        if p.driver == 0:  # the second group is cut from the driver too
            cuts += [netcut.Netcut(pid, driver_ports=[host.port], cut_driver=True,
                                   peer_ports=peers, towards=()) for pid in pids[1]]
        record = {"groups": [list(g) for g in p.groups], "driver": p.driver,
                  "at_s": round(after, 3), "seconds": p.for_s, "time": time.time()}
        log.warning("--partition %s: sites %s cut off from sites %s%s for %g s", p,
                    list(p.groups[0]), list(p.groups[1]),
                    "" if p.driver is None else
                    f" (the driver with sites {list(p.groups[p.driver])})", p.for_s)

        def apply() -> None:
            done: list[netcut.Netcut] = []
            try:
                for cut in cuts:
                    done.append(cut.cut(p.for_s))
            except netcut.NetcutError as e:
                for cut in done:
                    cut.heal()
                log.error("--partition %s failed: %s", p, e)
                return
            self.partitions.append(record)

        asyncio.get_running_loop().run_in_executor(None, apply)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
