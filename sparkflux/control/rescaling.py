"""The controller's rescaling of a running query (docs/design.md §9): the rescale's actions,
which ``rescale.py``'s table names, carried out on the controller's state (``Rescaling`` is a
part of ``Controller``): slots opened for new processes, the target placement's moves, and
the retiring slots' departure.
"""

from __future__ import annotations

import logging

from sparkflux.control.events import (
    Action,
    FailSites,
    LaunchSites,
    Rescale,
    Rescaled,
    RescaleRefused,
    SiteAddress,
    StopSite,
    View,
)
from sparkflux.control.link_judge import LinkJudge
from sparkflux.control.membership import Mode, Recovery, Slot, SlotEv
from sparkflux.control.moves import MoveRecord
from sparkflux.control.rescale import (
    GROW_WAIT_S,
    MOVE_ROUNDS,
    Ev,
    Phase,
    RescaleRecord,
    plan_moves,
    rescale_step,
    target_sets,
)
from sparkflux.dataflow.placement import Domain, Layout

log = logging.getLogger("sparkflux.control.controller")

GONE = (Slot.VACANT, Slot.ON_SURVIVORS, Slot.FAILED)  # slots no process will hold again


class Rescaling:
    """The rescaling part of the controller: its state lives on ``Controller`` (set up in its
    ``__init__``), named here for the methods below."""

    ha: bool
    mode: Mode
    sites: int
    started: bool
    finished: bool
    aborted: str | None
    now: float
    view: View
    dead: set[int]
    awaiting: list[int]
    moving: dict[int, MoveRecord]
    recovery_phase: Recovery
    pending_moves: list[tuple[int, int, int, str]]
    layout: Layout | None
    slot_state: dict[int, Slot]
    domains: dict[int, Domain]
    links: LinkJudge
    _last_seen: dict[int, float]
    rescaling: RescaleRecord | None
    rescales: list[RescaleRecord]
    _retiring: set[int]

    def _slot_step(self, slot: int, event: SlotEv, address: SiteAddress | None = None,
                   now: float = 0.0, why: str = "") -> list[Action]:
        raise NotImplementedError

    def _next_task(self) -> list[Action]:
        raise NotImplementedError

    def active_slots(self) -> list[int]:
        """The slots the query is spread over: members, and failed ones being recovered."""
        return sorted(s for s, st in self.slot_state.items() if st not in GONE)

    def _refuse(self, sites: int) -> str:
        """Why a rescale to ``sites`` cannot be done now ("" if it can)."""
        assert self.layout is not None or not self.ha
        if not self.ha or self.layout is None:
            return ("rescaling moves partitions between sites by catch-up from another copy, "
                    "which needs replicas: run with --ha flux")
        if self.rescaling is not None:
            return f"a rescale to {self.rescaling.sites} sites is in progress"
        if self.finished or self.aborted:
            return "the query has ended"
        if not self.started:
            return ("the query has not started yet: start it with the number of sites you "
                    "want (--sites), or rescale once its input has started")
        if sites < self.layout.replicas:
            return (f"--ha flux keeps {self.layout.replicas} copies of every partition on "
                    f"different sites: rescale to at least {self.layout.replicas} sites")
        if sites > self.layout.partitions:
            return (f"each site needs a mini-partition at least: at most "
                    f"{self.layout.partitions} sites with --partitions "
                    f"{self.layout.partitions}")
        if sites > len(self.active_slots()) and self.mode is Mode.SURVIVORS:
            return ("growing gives the new slots to standby processes, which --recovery "
                    "survivors stops: run with --recovery standby (the default)")
        return ""

    def _rescale(self, ev: Rescale) -> list[Action]:
        """``Rescale``: open slots for new processes (``LaunchSites``) or choose the slots
        to retire; the moves come once nothing else runs (``_rescale_progress``)."""
        self.now = max(self.now, ev.now)
        why = self._refuse(ev.sites)
        if why:
            log.warning("rescale to %d sites refused: %s", ev.sites, why)
            return [RescaleRefused(sites=ev.sites, reason=why)]
        assert self.layout is not None
        active = self.active_slots()
        n = len(active)
        r = RescaleRecord(before=n, sites=ev.sites, start=self.now,
                          phase=Phase.GROW if ev.sites > n else Phase.MOVING)
        self.rescaling = r
        actions: list[Action] = []
        if ev.sites > n:
            vacant = sorted(s for s, st in self.slot_state.items() if st is Slot.VACANT)
            need = ev.sites - n
            reopened = vacant[:need]
            fresh = list(range(self.sites, self.sites + need - len(reopened)))
            r.opened = reopened + fresh
            for s in fresh:
                self.slot_state[s] = Slot.VACANT
            self.sites += len(fresh)
            self.layout.grow(self.sites)
            for s in r.opened:
                self.dead.add(s)
                actions += self._slot_step(s, SlotEv.OPEN)
            r.target = sorted(active + r.opened)
            log.warning("rescale from %d to %d sites: slots %s open for new site tasks", n,
                        ev.sites, r.opened)
            actions.append(LaunchSites(count=need))
        else:
            r.target, r.retiring = active[:ev.sites], active[ev.sites:]
            self._retiring = set(r.retiring)
            log.warning("rescale from %d to %d sites: moving every copy off sites %s", n,
                        ev.sites, r.retiring)
        return actions + self._next_task()

    def _rescale_progress(self) -> list[Action]:
        """The rescale's next step, when no recovery and no move runs (``_next_task``)."""
        r = self.rescaling
        if r is None or self.layout is None:
            return []
        out: list[Action] = []
        if r.phase is Phase.GROW:
            if any(self.slot_state[s] is not Slot.MEMBER for s in r.opened):
                return []  # a new process is still to come, or to be caught up
            r.started_s = round(self.now - r.start, 3)
            out += self._rescale_step(Ev.STARTED)
        if any(m[3] == "rescale" for m in self.pending_moves):
            return out  # the round's moves are queued: ``_next_task`` starts them
        if any(s in self.awaiting for s in r.target):
            return out  # a target slot failed: its recovery first
        left = self._rescale_moves()
        return out + self._rescale_step(Ev.OFF_TARGET if left and r.rounds < MOVE_ROUNDS
                                        else Ev.PLACED)

    def _rescale_targets(self) -> list[int]:
        r = self.rescaling
        assert r is not None
        return [s for s in r.target if self.slot_state.get(s) is Slot.MEMBER
                and s not in self.dead]

    def _rescale_moves(self) -> list[tuple[int, int, int]]:
        """The moves from the placement now to chained declustering over the target slots."""
        assert self.layout is not None
        targets = self._rescale_targets()
        if len(targets) < self.layout.replicas:
            return []
        table = self.layout.table()
        want = target_sets(self.layout.partitions, targets, self.domains,
                           self.layout.replicas, table)
        return plan_moves(table, want)

    def _rescale_step(self, event: Ev) -> list[Action]:
        """One transition of the rescale, its actions carried out."""
        r = self.rescaling
        assert r is not None
        r.phase, names = rescale_step(r.phase, event)
        out: list[Action] = []
        for name in names:
            match name:
                case "vacate-unstarted":
                    r.unstarted = [s for s in r.opened if self.slot_state[s] is Slot.AWAITING]
                    for s in r.unstarted:
                        out += self._slot_step(s, SlotEv.RETIRE)
                    r.note = (f"no site task started for slots {r.unstarted} within "
                              f"{GROW_WAIT_S:.0f} s: the cluster has no free task slot for "
                              f"them (local mode: a master local[N] with N at least the "
                              f"sites, spares and standbys together)")
                    log.warning("rescale to %d sites: %s; spreading over %d", r.sites, r.note,
                                len(self._rescale_targets()))
                case "plan-moves":
                    moves = self._rescale_moves()
                    r.rounds += 1
                    r.moves += len(moves)
                    log.info("rescale to %d sites, round %d: %d copies to move", r.sites,
                             r.rounds, len(moves))
                    self.pending_moves += [(q, c, dst, "rescale") for q, c, dst in moves]
                case "retire-surplus":
                    out += self._retire_surplus(r)
                case "finish":
                    r.end = self.now
                    self.rescales.append(r)
                    self.rescaling, self._retiring = None, set()
                    log.warning("rescale to %d sites done in %.1f s: %d copies moved%s",
                                r.sites, r.end - r.start, r.moves,
                                f" ({r.note})" if r.note else "")
                    out.append(Rescaled(record=r.as_dict()))
        return out

    def _retire_surplus(self, r: RescaleRecord) -> list[Action]:
        """Every retiring slot that holds no copy leaves: stopped if it has a process."""
        assert self.layout is not None
        out: list[Action] = []
        kept = []
        for s in r.retiring:
            if self.layout.hosted(s):
                kept.append(s)
                continue
            if self.slot_state[s] in (Slot.MEMBER, Slot.AWAITING):
                out += self._slot_step(s, SlotEv.RETIRE)
                r.retired.append(s)
        if kept:
            r.note = f"sites {kept} still hold copies (a move could not be made): not retired"
        return out

    def _retire_slot(self, slot: int) -> list[Action]:
        """The slot table's ``retire``: the view without ``slot`` (a ``fail`` of a site that
        holds nothing: nobody takes anything over), its process stopped."""
        m = self.view.members[slot]
        members = {s: a for s, a in self.view.members.items() if s != slot}
        self.dead.add(slot)
        self.links.forget(slot)
        self._last_seen.pop(slot, None)
        self.view = View(number=self.view.number + 1, members=members)
        r = self.rescaling
        reason = f"retired: the query was rescaled to {r.sites if r else len(members)} sites"
        log.warning("site %d %s; view %d has sites %s", slot, reason, self.view.number,
                    sorted(members))
        return [StopSite(site=slot, attempt=m.attempt, reason=reason),
                FailSites(view=self.view, dead=tuple(sorted(self.dead)), retired=(slot,))]

    def _rescale_tick(self) -> list[Action]:
        """The grow wait: opened slots no process took after ``GROW_WAIT_S`` are closed."""
        r = self.rescaling
        if r is None or r.phase is not Phase.GROW or self.now - r.start <= GROW_WAIT_S:
            return []
        if self.recovery_phase is not Recovery.IDLE or self.moving:
            return []
        return self._rescale_step(Ev.WAITED) + self._next_task()
