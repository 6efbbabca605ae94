"""Catch-up of one partition replica as tables (thesis §3.3, Figs 3.12-3.15).

Everything that moves a catch-up from one state to the next lives in this module: the
survivor's machine (``SURVIVOR_TRANSITIONS``), the new replica's (``NEW_REPLICA_TRANSITIONS``)
and the survivor's router of events to machines (``CatchUps``, with the early-``retaining``
stash). ``SiteCore`` feeds them events and carries out the actions they return; nothing here
sends, snapshots or touches a buffer.

The rules (the paper's names first, ours after):

1. ``cu-start`` (controller -> survivor of stage s partition q) starts the catch-up of
   replica r of q for incarnation ``epoch`` of r's site slot. Epochs are the paper's version
   numbers (``my_ver``, ``ver[d]``): every message of one catch-up carries it, and one of
   another incarnation never moves this machine. The paper's ``cu-ready`` has no message
   here: the controller knows from its views when take-over is done.
2. The paper's distributed *pause* (``pause`` / ``pause-ack``) is replaced by *retention*:
   every producer site keeps stream p -> q for the new replica (waits for its
   acknowledgements, sends it nothing) and says ``retaining`` on its data channel to the
   survivor. That marker is the cut: every row the survivor received from that site before
   it is in the survivor's snapshot, every later one is held for the new replica. Nothing
   pauses. A standby's catch-up asks every producer site (action ``retain``); a move's
   producers retained when they applied the move, so their ``retaining`` may reach the
   survivor before ``cu-start`` does (kept in a stash by epoch; a stash of an older epoch is
   pruned once a newer incarnation is current).
3. When every live producer site retains (``all-retained``, fired by the machine itself once
   nobody is left to wait for: their ``retaining`` arrived or their site failed), the
   survivor snapshots the partition and the StateMover moves it: *state transfer*
   (``getState`` / ``installState``), state ``TRANSFERRING``.
4. The new replica installs the state and rejoins its inputs with floors: the paper's
   ``csync`` (consumer -> upstream, on the acknowledgement channel), our ``Rejoin``; then it
   says ``installed`` to the survivor (the StateMover's connection).
5. On ``installed`` the survivor sends ``psync`` (producer -> downstream, on the data channel,
   in order with the data) and reports ``cu-done``: *fold-in*, state ``FOLDED_IN``. Every
   downstream consumer copy that reads from the survivor acknowledges to the new replica
   from then on; both keep reading from the survivor (not the paper's Fig 3.15, where each
   consumer copy returns to its own producer copy: ``docs/catchup.md`` says why and what it
   costs). A caught-up *consumer* copy is back in the normal case by its own ``csync``.
6. If the new replica's site fails (``target-failed``) or a ``cu-start`` for a newer
   incarnation of the same partition arrives (``superseded``), the catch-up is
   ``ABANDONED``; the controller starts another one later. A failed producer site
   (``producer-failed``) has nothing left to retain: it is struck off the waiting list.

Any (state, event) pair missing from a table is impossible: ``CatchUpError`` names the role
("survivor of stage s partition q replica r"), the state and the event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

import numpy as np

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition

log = logging.getLogger(__name__)


class CatchUpError(ProtocolError):
    """An impossible catch-up transition: names the role, the state and the event."""


# -- the survivor's machine --------------------------------------------------------------------
class Phase(Enum):
    """States of the survivor's catch-up of one partition replica."""

    READY = "cu-ready"  # take-over done; the catch-up may start (no message: see rule 1)
    RETAINING = "retaining"  # waiting for ``retaining`` from producer sites (the cut)
    TRANSFERRING = "transferring"  # state sent by the StateMover, waiting for ``installed``
    FOLDED_IN = "folded-in"  # ``psync`` sent, ``cu-done`` reported
    ABANDONED = "abandoned"  # the new replica's site failed, or a newer incarnation came


class Ev(Enum):
    """Events of the survivor's machine (``ALL_RETAINED`` is fired by the machine itself)."""

    CU_START = "cu-start"
    RETAINING = "retaining"
    PRODUCER_FAILED = "producer-failed"
    ALL_RETAINED = "all-retained"
    INSTALLED = "installed"
    TARGET_FAILED = "target-failed"
    SUPERSEDED = "superseded"


# (state, event) -> (next state, action names). Actions: ``retain`` (ask producer sites to
# retain: our pause), ``strike`` (a producer site needs no more waiting for), ``state-transfer``
# (snapshot, StateMover), ``psync`` (fold-in, on the data channel), ``cu-done`` (to the
# controller).
SURVIVOR_TRANSITIONS: dict[tuple[Phase, Ev], tuple[Phase, tuple[str, ...]]] = {
    (Phase.READY, Ev.CU_START): (Phase.RETAINING, ("retain",)),
    (Phase.RETAINING, Ev.RETAINING): (Phase.RETAINING, ("strike",)),
    (Phase.RETAINING, Ev.PRODUCER_FAILED): (Phase.RETAINING, ("strike",)),
    (Phase.RETAINING, Ev.ALL_RETAINED): (Phase.TRANSFERRING, ("state-transfer",)),
    (Phase.RETAINING, Ev.TARGET_FAILED): (Phase.ABANDONED, ()),
    (Phase.RETAINING, Ev.SUPERSEDED): (Phase.ABANDONED, ()),
    # the state is taken: a producer site failing now has nothing more to retain
    (Phase.TRANSFERRING, Ev.PRODUCER_FAILED): (Phase.TRANSFERRING, ()),
    (Phase.TRANSFERRING, Ev.INSTALLED): (Phase.FOLDED_IN, ("psync", "cu-done")),
    (Phase.TRANSFERRING, Ev.TARGET_FAILED): (Phase.ABANDONED, ()),
    (Phase.TRANSFERRING, Ev.SUPERSEDED): (Phase.ABANDONED, ()),
}


# Events (small frozen records; the machine knows its stage, partition, replica and epoch).
@dataclass(frozen=True, slots=True, kw_only=True)
class CuStartEvent:
    """``cu-start``: ``producers`` are the live producer sites of the stage; for a move
    (``retained``) ``early`` are those whose ``retaining`` already came (the stash)."""

    producers: frozenset[int]
    retained: bool = False
    early: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class RetainingEvent:
    """``retaining`` from producer site ``site`` (of this machine's epoch)."""

    site: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerFailed:
    """Producer sites that failed (a view change)."""

    sites: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class InstalledEvent:
    """``installed`` from the new replica (of this machine's epoch)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetFailed:
    """The new replica's site failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Superseded:
    """A ``cu-start`` for incarnation ``epoch`` of the same partition replaced this one."""

    epoch: int


CatchUpEvent = (CuStartEvent | RetainingEvent | ProducerFailed | InstalledEvent | TargetFailed
                | Superseded)
_KIND: dict[type, Ev] = {CuStartEvent: Ev.CU_START, RetainingEvent: Ev.RETAINING,
                         ProducerFailed: Ev.PRODUCER_FAILED, InstalledEvent: Ev.INSTALLED,
                         TargetFailed: Ev.TARGET_FAILED, Superseded: Ev.SUPERSEDED}


# Actions the site carries out (what the table's action names become).
@dataclass(frozen=True, slots=True, kw_only=True)
class AskRetain:
    """``retain``: send ``Retain(stage, q, r, epoch)`` to each of ``sites``."""

    stage: int
    q: int
    r: int
    epoch: int
    sites: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferState:
    """``state-transfer``: snapshot partition q of ``stage`` and move it to replica r."""

    stage: int
    q: int
    r: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPSync:
    """``psync``: replica r of producer partition q of ``stage`` is back (downstream)."""

    stage: int
    q: int
    r: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportCuDone:
    """``cu-done`` to the controller."""

    stage: int
    q: int
    r: int
    epoch: int


CatchUpAction = AskRetain | TransferState | SendPSync | ReportCuDone


class SurvivorCatchUp:
    """The survivor's catch-up of replica r of partition q of ``stage``, incarnation
    ``epoch``: one state, the producer sites still to retain, and the table."""

    def __init__(self, stage: int, q: int, r: int, epoch: int) -> None:
        self.stage, self.q, self.r, self.epoch = stage, q, r, epoch
        self.state = Phase.READY
        self.waiting: set[int] = set()

    @property
    def role(self) -> str:
        return f"survivor of stage {self.stage} partition {self.q} replica {self.r}"

    @property
    def done(self) -> bool:
        return self.state in (Phase.FOLDED_IN, Phase.ABANDONED)

    def handle(self, event: CatchUpEvent) -> list[CatchUpAction]:
        """One event in; the actions of every transition it triggers out, in order."""
        out = self._fire(_KIND[type(event)], event)
        if self.state is Phase.RETAINING and not self.waiting:
            out += self._fire(Ev.ALL_RETAINED, None)  # state-triggered, as h11 does
        return out

    def _fire(self, kind: Ev, event: CatchUpEvent | None) -> list[CatchUpAction]:
        nxt, names = transition(SURVIVOR_TRANSITIONS, self.state, kind, CatchUpError,
                                f"{self.role} (epoch {self.epoch})")
        log.debug("%s: %s --%s--> %s %s", self.role, self.state.value, kind.value, nxt.value,
                  names)
        self.state = nxt
        out: list[CatchUpAction] = []
        for name in names:
            out += self._act(name, event)
        return out

    def _act(self, name: str, event: CatchUpEvent | None) -> list[CatchUpAction]:
        who = {"stage": self.stage, "q": self.q, "r": self.r, "epoch": self.epoch}
        if name == "retain":
            assert isinstance(event, CuStartEvent)
            if event.retained:  # a move: every producer retained when it applied it
                self.waiting = set(event.producers) - set(event.early)
                return []
            self.waiting = set(event.producers)
            return [AskRetain(**who, sites=tuple(sorted(event.producers)))]
        if name == "strike":
            if isinstance(event, RetainingEvent):
                self.waiting.discard(event.site)
            else:
                assert isinstance(event, ProducerFailed)
                self.waiting -= event.sites
            return []
        if name == "state-transfer":
            return [TransferState(**who)]
        if name == "psync":
            return [SendPSync(**who)]
        if name == "cu-done":
            return [ReportCuDone(**who)]
        raise AssertionError(f"no action {name!r}")  # pragma: no cover - the table's names


# -- the router: a site's catch-ups as the survivor, and the early stash --------------------
class CatchUps:
    """The catch-ups one site runs as the survivor, one machine per (stage, q), and the
    ``retaining`` that came ahead of their ``cu-start`` (a move's producers retain when they
    apply the move): ``((stage, q, r), epoch) -> sites``. Events of another incarnation than
    a machine's never reach it (rule 1): the router drops or stashes them."""

    def __init__(self) -> None:
        self.running: dict[tuple[int, int], SurvivorCatchUp] = {}
        self.early: dict[tuple[tuple[int, int, int], int], set[int]] = {}

    def cu_start(self, stage: int, q: int, r: int, epoch: int, producers: set[int],
                 retained: bool) -> list[CatchUpAction]:
        """A current ``cu-start`` (the site has checked the incarnation and that r's site
        lives). A machine still listed for (stage, q) is superseded."""
        out: list[CatchUpAction] = []
        old = self.running.pop((stage, q), None)
        if old is not None:
            out += old.handle(Superseded(epoch=epoch))
        key = (stage, q, r)
        early: set[int] = set()
        for stash in [x for x in self.early if x[0] == key and x[1] <= epoch]:
            got = self.early.pop(stash)  # older epochs: moves that were abandoned
            if stash[1] == epoch:
                early = got
        cu = SurvivorCatchUp(stage, q, r, epoch)
        self.running[(stage, q)] = cu
        out += cu.handle(CuStartEvent(producers=frozenset(producers), retained=retained,
                                      early=frozenset(early)))
        self._reap()
        return out

    def retaining(self, stage: int, q: int, r: int, epoch: int, site: int
                  ) -> list[CatchUpAction]:
        cu = self.running.get((stage, q))
        if cu is None or cu.epoch != epoch:
            if cu is None or epoch > cu.epoch:
                # a move's retention ahead of its cu-start (kept until that comes), possibly
                # while an abandoned catch-up of the same partition is still listed here
                self.early.setdefault(((stage, q, r), epoch), set()).add(site)
            return []  # else the reply to the retain of an abandoned catch-up
        out = cu.handle(RetainingEvent(site=site))
        self._reap()
        return out

    def installed(self, stage: int, q: int, epoch: int) -> list[CatchUpAction]:
        cu = self.running.get((stage, q))
        if cu is None or cu.epoch != epoch:
            return []  # none, or the reply of an earlier incarnation (a process since gone)
        out = cu.handle(InstalledEvent())
        self._reap()
        return out

    def failed(self, new: set[int], target_sites: dict[tuple[int, int], int]
               ) -> list[CatchUpAction]:
        """A view change: ``new`` sites failed; ``target_sites[(stage, q)]`` is where each
        running catch-up's new replica lives."""
        out: list[CatchUpAction] = []
        for key, cu in list(self.running.items()):
            if target_sites[key] in new:
                out += cu.handle(TargetFailed())  # the controller retries later
            else:
                out += cu.handle(ProducerFailed(sites=frozenset(new)))
        self._reap()
        return out

    def prune_early(self, current: np.ndarray) -> None:
        """Drop stashed ``retaining`` of incarnations older than the current one
        (``current[q, r]``): a move abandoned before its cu-start came never gets one that
        counts, so without this its stash stayed for the run."""
        self.early = {k: v for k, v in self.early.items()
                      if k[1] >= current[k[0][1], k[0][2]]}

    def _reap(self) -> None:
        """Forget machines that are folded in or abandoned."""
        for key in [k for k, cu in self.running.items() if cu.done]:
            del self.running[key]


# -- the new replica's machine -------------------------------------------------------------------
class NewPhase(Enum):
    """States of the new replica of one partition on its site."""

    WAITING_FOR_STATE = "waiting-for-state"
    CAUGHT_UP = "caught-up"


# ``install`` = the paper's installState; ``csync`` = our ``Rejoin`` to every producer
# replica of its inputs (with floors); ``installed`` = to the survivor. A state for another
# incarnation than the current one never gets here (the site drops it).
NEW_REPLICA_TRANSITIONS: dict[tuple[NewPhase, str], tuple[NewPhase, tuple[str, ...]]] = {
    (NewPhase.WAITING_FOR_STATE, "state"): (NewPhase.CAUGHT_UP,
                                            ("install", "csync", "installed")),
}


def new_replica_step(stage: int, q: int, r: int, installed: bool, event: str
                     ) -> tuple[NewPhase, tuple[str, ...]]:
    """The new replica's transition from its state (``installed`` or not) on ``event``."""
    state = NewPhase.CAUGHT_UP if installed else NewPhase.WAITING_FOR_STATE
    return transition(NEW_REPLICA_TRANSITIONS, state, event, CatchUpError,
                      f"new replica of stage {stage} partition {q} replica {r}")
