"""The driver side's sans-I/O core: controller, ingress and egress behind one entry point.

A site has ``SiteCore``; the driver has ``Boundary``. It owns the controller (membership,
views, recovery, load balancing), the ingress (SIGMOD §3: input sequence numbers, FH-Prod
toward both replicas of the first stage) and the egress (the last stage's output, once and in
order), and works out what every event means for all three: a ``fail`` is the ingress's
``ack_all`` and the egress's ``reverse`` as well as a ``fail`` to every live site; an
``avail`` bumps the ingress's version numbers (epochs) and tells every member; a ``move`` is
taken over by the ingress and the egress before the sites hear of it; a first-stage ``retain``
is answered by the ingress's ``retaining``; a ``cu-done`` goes to the controller.

``handle(*events) -> list[BoundaryAction]``: events are the controller's own (``Registered``,
``SiteReady``, ``ConnectionClosed``, ``Suspected``, ``Tick``, ``Moved``), a site's protocol
message (``FromSite``), a site's heartbeat (``HeartbeatFrom``: the statistics of a balance
round are read from it), what the run's starts took (``StartTimes``: the standby wait), the
source's next batch (``Input``) and its end (``InputEnd``), and moves asked for by a test or an
operator (``RequestMoves``). Actions are sends on a site's data connection (``Outgoing``,
through the DTSB), control frames on its control connection (``Tell``), the view to a member
(``SendView``), a standby's adoption (``AdoptProcess``), output for the sink (``Deliver``),
rejected input (``Rejects``), the end of the output (``OutputEnded``), a finished catch-up
(``CaughtUp``), and the controller's actions that the host carries out itself
(``StartIngress``, ``StopSite``, ``Standby``, ``FailSites``, ``CatchUp``, ``Recovered``,
``Move``, ``InstallView``, ``Abort``), passed on after the boundary has done its part of them;
a registration's ``StopSite`` or ``Standby`` comes as its ``Answer``. The runtime host
(``runtime/driver.py``) and the simulator (``sim/run.py``) are thin drivers of this one object,
so every seed of the simulator runs the driver path that runs on Spark.

The ingress and egress are shaped for one input stream and one output; they are fields of
this object, not of its callers, so several of each can hang here later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from sparkflux.control.checkpoints import (
    CheckpointDone,
    CheckpointGivenUp,
    Checkpoints,
    CommitSinks,
    Due,
    ManifestWritten,
    SinksCommitted,
    StoredFrom,
    TakeCheckpoint,
    WriteManifest,
    fingerprint,
    manifest_name,
)
from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Abort,
    Action,
    Adopt,
    CatchUp,
    CatchUpDone,
    Collect,
    ConnectionClosed,
    FailSites,
    Finished,
    Folded,
    Heartbeat,
    InstallView,
    LaunchSites,
    Move,
    Moved,
    Recovered,
    Registered,
    Rescale,
    Rescaled,
    RescaleRefused,
    SiteReady,
    Standby,
    StartIngress,
    Stats,
    StopSite,
    Suspected,
    Tick,
)
from sparkflux.control.eventual import InputEpisodes, Released
from sparkflux.control.standby_wait import standby_wait
from sparkflux.control.watchdog import SILENT_S, InputState, StageLow, Standing
from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.dataflow.ports import encode_source, source_rows_schema
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Progress
from sparkflux.model.schema import SRC
from sparkflux.model.validate import Rejected, validate
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.consistency import Eventual
from sparkflux.protocol.consumer import PartitionLost
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import (
    Ack,
    CuDone,
    CuStart,
    Cut,
    Data,
    Echo,
    Message,
    Outgoing,
    Probe,
    PSync,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Tentative,
)
from sparkflux.protocol.sequencer import Sequencer


# -- events ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class FromSite:
    """A protocol message read from the data connection of slot ``slot``'s live process."""

    slot: int
    message: Message
    now: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatFrom:
    """A heartbeat of process ``attempt`` in slot ``slot`` (its liveness, and the counters a
    balance round's statistics are taken from)."""

    slot: int
    attempt: int
    beat: cm.Heartbeat
    now: float
    member: bool = True  # the process is the slot's current member (not a standby)


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """Source ``stream``'s next batch (user columns, or plain records): validated, put in
    the merged order by the sequencer, then numbered and sent."""

    batch: pa.RecordBatch | list[dict[str, Any]]
    now: float
    stream: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class InputEnd:
    """Source ``stream`` is exhausted (every source, when None); once all are, every
    first-stage replica learns the input is complete."""

    stream: int | None = None
    now: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestMoves:
    """Move replica r of q to ``dst``, ``(q, r, dst)`` each (a test's or an operator's)."""

    moves: tuple[tuple[int, int, int], ...]
    reason: str = "balance"


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteFailed:
    """Slot ``slot``'s process stopped on an error of its own (an operator raised, an
    invariant broke): the run stops with it."""

    slot: int
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StartTimes:
    """What this run's starts measured so far, for the standby wait
    (``control/standby_wait.py``): ``fixed``, the user's ``--standby-wait`` (None: measured);
    ``start_s``, the sites' start (job submission to view 1); ``adoptions_s``, each
    adoption's wait (failure to adoption); ``executor_start_s``, a new cluster application's
    executors' start, if timed."""

    fixed: float | None = None
    start_s: float | None = None
    adoptions_s: tuple[float, ...] = ()
    executor_start_s: float | None = None


BoundaryEvent = (Registered | SiteReady | ConnectionClosed | Suspected | Tick | Moved | Folded
                 | FromSite | HeartbeatFrom | Input | InputEnd | RequestMoves | SiteFailed
                 | StartTimes | TakeCheckpoint | StoredFrom | SinksCommitted | ManifestWritten
                 | Rescale)


def event_of(slot: int, attempt: int, member: bool, message: Any, now: float
             ) -> BoundaryEvent | None:
    """The driver's edge: what a frame read from process ``attempt`` in slot ``slot`` is to
    the core, for the runtime host and the simulator alike. ``member``: the process is the
    slot's current member (a standby's or a replaced process's frames count only as
    liveness and readiness). None: nothing for the core (a non-member's protocol frame).
    ``message`` is a decoded frame (``Any``, as the wire's payloads are)."""
    match message:
        case cm.Heartbeat():
            return HeartbeatFrom(slot=slot, attempt=attempt, beat=message, now=now,
                                 member=member)
        case cm.Ready():
            return SiteReady(site=slot, attempt=attempt)
        case cm.Moved(epoch=epoch) if member:
            return Moved(site=slot, epoch=epoch, now=now)
        case cm.Folded(stage=stage, p=p, r=r, epoch=epoch) if member:
            return Folded(site=slot, stage=stage, q=p, c=r, epoch=epoch, now=now)
        case cm.Unreachable(peer=peer, peer_attempt=peer_attempt, reason=reason,
                            peer_registered=registered) if member:
            return Suspected(site=peer, attempt=peer_attempt, by=slot, reason=reason, now=now,
                             registered=registered)
        case cm.SiteError(error=error):
            return SiteFailed(slot=slot, error=error)
        case cm.PartStored() if member:
            return StoredFrom(slot=slot, report=message)
        case _ if isinstance(message, cm.CONTROL_TYPES):
            return None
    return FromSite(slot=slot, message=message, now=now) if member else None


# -- actions -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """The answer to process ``attempt``'s registration for slot ``site``: always the first
    action of its ``Registered``. ``member``: the process holds the slot (the view names it
    once every slot has registered); ``standby``: it is told ``message`` (``standby``) and
    waits for an adoption; ``refused``: it is told ``message`` (``stop``, excluded, with the
    controller's reason) and its connections are closed."""

    site: int
    attempt: int
    role: Literal["member", "standby", "refused"]
    message: cm.Standby | cm.Stop | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Tell:
    """A frame on the control connection of slot ``site`` (``fail``, ``move``, ``avail``,
    ``cu-start``): it never waits behind the input queued on the site's data connection."""

    site: int
    message: cm.Fail | cm.Move | cm.Avail | CuStart


@dataclass(frozen=True, slots=True, kw_only=True)
class SendView:
    """The view to member ``site``, on its data connection (it gives the site its core)."""

    site: int
    view: cm.View


@dataclass(frozen=True, slots=True, kw_only=True)
class AdoptProcess:
    """The standby process ``pid`` becomes slot ``slot``: it gets ``message`` on its data
    connection; the members have been told (``avail``)."""

    slot: int
    pid: int
    attempt: int
    registered: int
    message: cm.Adopt


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Output rows, in order, for the sink (possibly none: progress alone).

    ``op`` (``--consistency eventual``, ``protocol/consistency.py``): ``insert``, stable
    rows (``correction``: an episode's, replacing its tentative ones); ``tentative``, rows
    made from incomplete input; ``undo``, every tentative row so far is void; ``rec_done``,
    the episode's corrections are all delivered."""

    batch: pa.RecordBatch
    progress: Progress
    op: Literal["insert", "tentative", "undo", "rec_done"] = "insert"
    correction: bool = False
    # a correction's rows that are the first output made of their input (it reached the
    # output tentatively in no row, ``InputEpisodes.caught_up``): the availability bound is
    # about them
    first: np.ndarray | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejects:
    """Input records the ingress rejected, each with its reason."""

    rejected: tuple[Rejected, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputEnded:
    """The egress has delivered the end of the stream."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaughtUp:
    """``cu-done``: replica r of partition q of ``stage`` is folded in on ``site``."""

    stage: int
    q: int
    r: int
    site: int | None
    nbytes: int
    move_s: float


BoundaryAction = (Answer | Outgoing | Tell | SendView | AdoptProcess | Deliver | Rejects
                  | OutputEnded | CaughtUp | InstallView | StartIngress | StopSite | FailSites
                  | Standby | Adopt | CatchUp | Recovered | Abort | Move | CommitSinks
                  | WriteManifest | CheckpointDone | CheckpointGivenUp | LaunchSites | Rescaled
                  | RescaleRefused)

LOST_HINT = ("Two sites holding both replicas of a partition failed before recovery; nothing "
             "can bring that partition's state back.")


class Boundary:
    """Controller + ingress + egress of one run; no I/O. One entry point: ``handle``."""

    def __init__(self, plan: PhysicalPlan, layout: Layout, controller: Controller,
                 end_with_output: bool = True, eventual: Eventual | None = None,
                 unordered: bool = False) -> None:
        self.plan = plan
        # A run ends with its output: the controller then ignores the sites' departures.
        # The simulator keeps going past it, so that recoveries it schedules late still run.
        self.end_with_output = end_with_output
        self.controller = controller
        controller.eventual = eventual is not None
        # each source's records as the ingress numbers them (its columns, and its port)
        ports, rows_schema = plan.ingress.in_ports, source_rows_schema(plan.ingress.in_ports)
        self.sequencer = Sequencer(list(plan.streams), align=(
            lambda i, rows: encode_source(ports, rows_schema, ports[i], rows)))
        self.ingress = Ingress(plan, layout)
        if unordered and eventual is not None:  # corrections are split at an SN: in order
            raise PlanError("--unordered-output does not combine with --consistency eventual")
        self.egress = Egress(plan, layout, unordered)  # --unordered-output
        # --consistency eventual: the input's failure episodes (``control/eventual.py``)
        self.episodes: InputEpisodes | None = None
        if eventual is not None:
            if plan.isn_span is not None:
                raise PlanError("--consistency eventual needs the sources read by the driver: "
                                "a file source read on the sites (site_read) has no records "
                                "for it to send tentatively; read it on the driver or use "
                                "--consistency strict")
            self.episodes = InputEpisodes(eventual, self.sequencer, self.ingress,
                                          self.egress,
                                          pa.RecordBatch.from_pylist([], schema=rows_schema))
        self.dead: set[int] = set()  # slots whose process failed and is not replaced yet
        self.registered: dict[int, int] = {}  # slot -> the slot its process registered for
        self._collecting: dict[int, int] = {}  # slot -> the round its next heartbeat answers
        self.beats: dict[int, cm.Heartbeat] = {}  # slot -> its member's last heartbeat
        self.beat_at: dict[int, float] = {}  # slot -> when it came
        # slot -> (budget, bytes held, bytes on disk, state bytes per partition, partitions
        # on disk) from its last heartbeat with state (``control/memory_policy.py``)
        self.memory_of: dict[int, tuple[int, int, int, tuple[int, ...], tuple[int, ...]]] = {}
        # when the controller last found a network partition it waits for, and the output's
        # progress then (``standing`` names it while the output has not moved since)
        self._split_at: float | None = None
        self._split_sn: int | None = None
        self.failed: str | None = None  # why the run cannot go on, once it cannot
        self.hold = 0.0  # the longest a record waited in the sequencer for its stable release
        self.clock = 0.0  # the input's clock (``Input.now``, ``Tick.wall``): its latest reading
        # the checkpoints taken (docs/design.md §9): the host sets keep and timeout
        self.checkpoints = Checkpoints(len(plan.stages), plan.partitions, fingerprint(plan))

    # -- queries ---------------------------------------------------------------------------
    def in_flight(self) -> int:
        """Input records admitted and not yet past the egress's progress. Not what admission
        bounds: an operator holds its output progress below its lowest open window, so this
        stays above a window's length in records until the window closes, which may need
        more input (docs/flow-control.md)."""
        return self.ingress.next_isn - 1 - self.egress.progress.sn

    def unacknowledged(self) -> int:
        """Input records admitted and not yet acknowledged by every first-stage replica the
        ingress feeds: what admission bounds (``--window``). Consumers acknowledge on receipt,
        before processing, so this never waits for an operator (``Ingress.unacknowledged``)."""
        return self.ingress.unacknowledged()

    def next_due(self) -> float | None:
        """When the host should tick next, on the input's clock, if sooner than its period:
        an eventual run's delay bound falls due then (``InputEpisodes.next_due``)."""
        return None if self.episodes is None else self.episodes.next_due(self.clock)

    def held_back(self, window: int, pool_full: bool) -> Literal["", "window", "pool"]:
        """Why admission holds the next batch back (docs/flow-control.md), or "" when it
        may go: more than ``window`` admitted records unacknowledged by a first-stage
        replica ("window"), or the ingress's DTSB pool full ("pool": a site's connection
        cannot take more). Both wait only for sites to read their input, never for output:
        an operator may hold its output progress back until more input comes."""
        if self.unacknowledged() > window:
            return "window"
        return "pool" if pool_full else ""

    def marks(self, input_state: InputState) -> tuple[tuple[int, int, int], bool]:
        """What the watchdog watches for progress (records admitted, the egress's
        progress, rows delivered), and whether output is owed: not when the input is idle
        and everything admitted has come out."""
        admitted, out = self.ingress.next_isn, self.egress.progress.sn
        return ((admitted, out, self.egress.delivered),
                not (input_state == "idle" and out >= admitted - 1))

    def slowest_first(self) -> tuple[int, int, int, int] | None:
        """(acknowledged SN, partition, replica, site) of the first-stage replica that has
        acknowledged the least of the input; None when the ingress feeds none."""
        low = self.ingress.slowest()
        if low is None:
            return None
        sn, q, c = low
        return sn, q, c, self.ingress.layout.site_of(q, c)

    def standing(self, input_state: InputState, admission: str = "", now: float = 0.0
                 ) -> Standing:
        """Where the run's progress stands (the watchdog's report): the egress's progress and
        its lowest input, every stage's lowest input frontier and output progress over the
        live members' last heartbeats, and the members whose last heartbeat is late at
        ``now``."""
        e_sn = self.egress.cons.progress_sn[0]
        p = int(np.argmin(e_sn))
        n = len(self.plan.stages)
        stages: list[StageLow | None] = []
        for k in range(n):
            low_in: tuple[int, int, int] | None = None
            low_out: tuple[int, int, int] | None = None
            for slot, b in sorted(self.beats.items()):
                if slot in self.dead or b.in_sn.size != n:
                    continue
                if b.in_part[k] >= 0 and (low_in is None or b.in_sn[k] < low_in[0]):
                    low_in = (int(b.in_sn[k]), int(b.in_part[k]), slot)
                if b.out_part[k] >= 0 and (low_out is None or b.out_sn[k] < low_out[0]):
                    low_out = (int(b.out_sn[k]), int(b.out_part[k]), slot)
            stages.append(None if low_in is None or low_out is None else StageLow(
                k, self.plan.stages[k].name, *low_in, *low_out))
        silent = tuple((slot, now - at) for slot, at in sorted(self.beat_at.items())
                       if slot not in self.dead and now - at > SILENT_S)
        # a network partition the run waits for: named while no output came since the
        # judge last found it (it finds it again every link timeout while it lasts)
        split = self.controller.split
        named = split is not None and self.egress.progress.sn == self._split_sn
        return Standing(admitted=self.ingress.next_isn, output_sn=self.egress.progress.sn,
                        egress_sn=int(e_sn[p]), egress_part=p, stages=tuple(stages),
                        input=input_state, admission=admission, silent=silent,
                        split=split[0] if split is not None and named else "",
                        egress_from=self.egress.reads_from(p))

    def next_stream(self) -> int | None:
        """The source to read next (the one the merge waits for); None once all ended."""
        return self.sequencer.next_stream()

    # -- events ----------------------------------------------------------------------------
    def handle(self, *events: BoundaryEvent) -> list[BoundaryAction]:
        """Handle events in order; returns the actions to carry out, in order."""
        out: list[BoundaryAction] = []
        for ev in events:
            match ev:
                case FromSite(slot=slot, message=msg, now=now):
                    if slot not in self.dead:  # a failed process's late traffic is dropped
                        out += self._from_site(slot, msg, now)
                case HeartbeatFrom():
                    out += self._heartbeat(ev)
                case Input(batch=batch, now=now, stream=stream):
                    out += self._admit(stream, batch, now)
                case InputEnd(stream=stream, now=now):
                    out += self._end_input(stream, now)
                case RequestMoves(moves=moves, reason=reason):
                    out += self._controller(self.controller.request_moves(moves, reason))
                case SiteFailed(slot=slot, error=error):
                    out.append(Abort(reason=f"site {slot} stopped on an error:\n{error}"))
                case Registered():
                    out += self._registered(ev)
                case TakeCheckpoint():
                    out += self._take_checkpoint(ev)
                case StoredFrom(slot=slot, report=r):
                    if r.error:
                        out += self._give_up(f"site {slot} could not write partition {r.q} "
                                             f"of stage {r.stage}: {r.error}")
                    else:
                        out += self._due(self.checkpoints.stored(r.checkpoint, r.stage, r.q,
                                                                 r.name, r.nbytes))
                case SinksCommitted(checkpoint=k, sinks=sinks):
                    out += self._due(self.checkpoints.committed(k, list(sinks)))
                case ManifestWritten(checkpoint=k, error=error):
                    if error:
                        out += self._give_up(f"its manifest could not be written: {error}")
                    else:
                        p = self.checkpoints.pending
                        if p is not None and p.checkpoint == k:
                            remove = tuple(self.checkpoints.written(k))
                            out.append(CheckpointDone(checkpoint=k, cut=p.cut, remove=remove))
                case StartTimes():
                    # how long a failed slot waits for a standby before the survivors
                    # rebuild its replicas: from what this run's starts took
                    self.controller.standby_wait = standby_wait(
                        ev.fixed, ev.start_s, ev.adoptions_s, ev.executor_start_s)
                case _:
                    out += self._controller(self.controller.handle(ev))
                    if isinstance(ev, Tick):  # the egress's collected streams (V-C)
                        out += self._sends(self.egress.cons.on_tick(ev.now))
                    if isinstance(ev, Tick) and self.episodes is not None:
                        self.clock = ev.now if ev.wall is None else ev.wall
                        out += self._judge(self.clock, None)
                        due = self.episodes.merge_due(self.clock)
                        if due is not None:
                            out.append(Deliver(batch=due.drop_columns([SRC]),
                                               progress=self.egress.progress,
                                               op="tentative"))
        return out

    def _registered(self, ev: Registered) -> list[BoundaryAction]:
        """A process registered: the controller's ``StopSite`` or ``Standby`` for it (or
        neither: it holds its slot) becomes the ``Answer`` the host carries out on the
        process's connections, ahead of the rest (the view, once every slot is in)."""
        a = ev.address
        answer = Answer(site=a.site, attempt=a.attempt, role="member")
        rest: list[BoundaryAction] = []
        for act in self._controller(self.controller.handle(ev)):
            match act:
                case StopSite(site=a.site, attempt=a.attempt, reason=reason):
                    answer = Answer(site=a.site, attempt=a.attempt, role="refused",
                                    message=cm.Stop(excluded=True, reason=reason))
                case Standby(site=a.site, attempt=a.attempt):
                    answer = Answer(site=a.site, attempt=a.attempt, role="standby",
                                    message=cm.Standby())
                case _:
                    rest.append(act)
        return [answer, *rest]

    def _from_site(self, slot: int, msg: Message, now: float) -> list[BoundaryAction]:
        match msg:
            case Ack():
                self.ingress.on_ack(msg, slot)
                return []
            case Retain(stage=stage, q=q, c=c, epoch=epoch):
                # the catch-up of a first-stage replica: the ingress is its producer
                self.ingress.on_retain(q, c, epoch)
                return self._sends([Outgoing(slot, Retaining(stage, q, c, epoch))])
            case Rejoin():
                return self._sends(self.ingress.on_rejoin(msg, slot))
            case Rejoined():
                self.egress.cons.on_rejoined(msg, slot)
                return []
            case Probe(sent=sent):  # a site times its link to the driver: echo at once
                return self._sends([Outgoing(slot, Echo(sent))])
            case PSync():
                if msg.epoch != self.ingress.epochs[msg.p, msg.r]:
                    return []  # an earlier incarnation's fold-in (that process is gone)
                out = self._sends(self.egress.on_psync(msg))
                return out + self._controller(self.controller.handle(Folded(
                    site=DRIVER, stage=msg.stage, q=msg.p, c=msg.r, epoch=msg.epoch,
                    now=now)))
            case CuDone():
                done = CaughtUp(stage=msg.stage, q=msg.q, r=msg.r,
                                site=self.controller.catch_up_site(msg.q, msg.r),
                                nbytes=msg.nbytes, move_s=msg.move_s)
                return [done, *self._controller(self.controller.handle(CatchUpDone(
                    stage=msg.stage, q=msg.q, r=msg.r, nbytes=msg.nbytes,
                    now=now)))]
            case Data():
                return self._data(slot, msg)
            case Tentative(rows=rows, epoch=epoch) if self.episodes is not None:
                ep = self.episodes.episode
                if epoch == ep.epoch + 1 and not self.episodes.open and rows is not None:
                    self.episodes.open_merge(self.clock)  # a site's merge opened it
                if epoch != ep.epoch or not self.episodes.open or rows is None:
                    return []  # an episode that is over (or a claim alone)
                self.episodes.tentative_delivered(rows, self.clock)
                return [Deliver(batch=rows.drop_columns([SRC]), progress=self.egress.progress,
                                op="tentative")]
        return self._abort(f"the driver got an unexpected {type(msg).__name__} message "
                           f"from site {slot}")

    def _data(self, slot: int, msg: Data) -> list[BoundaryAction]:
        try:
            d, acks = self.egress.on_data(msg, slot)
        except ProtocolError as e:
            return self._abort(f"egress invariant violated: {e}")
        out: list[BoundaryAction] = list(self._sends(acks))
        if d is None:
            return out
        out.append(Deliver(batch=d.batch, progress=d.progress))
        if self.episodes is not None:
            out += self._reconcile(d.progress, self.clock)
        out += self._due(self.checkpoints.delivered(self._sunk()))
        if self.egress.ended:
            if self.end_with_output:
                self.controller.handle(Finished())
            out.append(OutputEnded())
        return out

    def _sunk(self) -> int:
        """The SN every row at or below which the sinks have (a checkpoint's test): the
        egress's progress, or the last row before an open episode's held corrections."""
        sn = self.egress.progress.sn
        return sn if self.egress.holding is None else min(sn, self.egress.holding)

    def _reconcile(self, progress: Progress, now: float) -> list[BoundaryAction]:
        """An episode whose stable output has passed its heal point ends: ``undo``, the
        corrections held, ``rec_done``, and the sites drop its branches."""
        assert self.episodes is not None
        live = [s for s in sorted(self.controller.view.members) if s not in self.dead]
        done = self.episodes.caught_up(now, live)
        if done is None:
            return []
        self._stage_states(now)
        rows, tell, first = done
        none = pa.RecordBatch.from_pylist([], schema=self.plan.output_schema)
        out: list[BoundaryAction] = [Deliver(batch=none, progress=progress, op="undo")]
        if rows is not None:
            out.append(Deliver(batch=rows, progress=progress, correction=True, first=first))
        out.append(Deliver(batch=none, progress=progress, op="rec_done"))
        return out + self._sends(tell)

    def _judge(self, now: float, released: Released | None) -> list[BoundaryAction]:
        assert self.episodes is not None
        out = list(self._sends(self.episodes.judge(now, released, self.dead)))
        self._stage_states(now)
        return out

    def _stage_states(self, now: float) -> None:
        """Each stage's consistency state (``stage_states.py``) from the input's and the
        live members' last heartbeats."""
        if self.episodes is None:
            return
        ep = self.episodes.episode
        self.episodes.stages.observe(now, ep.state, ep.heal, (
            b.in_sn for slot, b in self.beats.items() if slot not in self.dead))

    def _heartbeat(self, ev: HeartbeatFrom) -> list[BoundaryAction]:
        out = self._controller(self.controller.handle(
            Heartbeat(site=ev.slot, attempt=ev.attempt, now=ev.now)))
        rnd = self._collecting.pop(ev.slot, None) if ev.member else None
        b = ev.beat
        if ev.member and ev.slot not in self.dead:
            self.beats[ev.slot], self.beat_at[ev.slot] = b, ev.now
            self._stage_states(ev.now)
            if b.has_state:  # its memory, for the memory policy
                per = np.bincount(b.state_part, weights=b.state_bytes,
                                  minlength=self.plan.partitions) + np.bincount(
                    b.disk_part, weights=b.disk_bytes, minlength=self.plan.partitions)
                self.memory_of[ev.slot] = (b.budget, b.memory, b.spilled,
                                           tuple(int(x) for x in per),
                                           tuple(sorted({int(q) for q in b.disk_part})))
        if rnd is not None and b.counts.size:
            budget, memory, spilled, per_part, on_disk = self.memory_of.get(
                ev.slot, (-1, 0, 0, (), ()))
            out += self._controller(self.controller.handle(Stats(
                site=ev.slot, attempt=ev.attempt, round=rnd, busy_s=b.busy_s,
                capacity_s=b.capacity_s, counts=tuple(b.counts.tolist()), now=ev.now,
                at=b.at, budget=budget, memory=memory, spilled=spilled,
                part_bytes=per_part, on_disk=on_disk, link_ms=b.link_ms)))
        return out

    def _admit(self, stream: int, batch: pa.RecordBatch | list[dict[str, Any]], now: float
               ) -> list[BoundaryAction]:
        good, rejected = validate(batch, self.plan.source_schemas[stream])
        self.clock = max(self.clock, now)
        late = self.sequencer.offer(stream, good, now)
        out: list[BoundaryAction] = []
        if rejected or late:
            out.append(Rejects(rejected=tuple(rejected + late)))
        return out + self._release(now)

    def _end_input(self, stream: int | None, now: float) -> list[BoundaryAction]:
        for i in range(len(self.plan.streams)) if stream is None else [stream]:
            if not self.sequencer.ended[i]:
                self.sequencer.end(i)
        out = self._release(now)
        if self.sequencer.ended.all() and not self.ingress.ended:
            out += self._sends(self.ingress.finish())
        return out

    def _release(self, now: float) -> list[BoundaryAction]:
        """Number and send what the sequencer can release (in its merged order)."""
        seq = self.sequencer
        wm = seq.watermark()
        released = seq.release()
        out: list[BoundaryAction] = []
        done = None
        if released is not None:
            done = Released(released[0], released[1], seq.released_et, seq.released_at)
            if done.arrived.size:
                self.hold = max(self.hold, now - float(done.arrived.min()))
            out += self._sends(self.ingress.admit(released[0], now, wm, arrived=done.arrived))
        if self.episodes is not None:
            # an episode's tentative rows go ahead of the stable rows released with them
            # (they may overtake stable frames, ``protocol/channels.py``): at the heal the
            # stable release is the whole backlog, and the rows ``delay`` held until now
            # would otherwise wait behind it past the bound
            out = self._judge(now, done) + out
        return out

    # -- checkpoints (docs/design.md §9) -------------------------------------------------------
    def _take_checkpoint(self, ev: TakeCheckpoint) -> list[BoundaryAction]:
        """Cut the input at the last SN handed out: what the driver alone holds is recorded
        now (the ingress's next SN, the sequencer's held records and maxima, the sources'
        positions), and every live site learns the cut in-band, behind the rows at or below
        it on its data connection. None once the input has ended (no row follows its end
        to cut), nor while the run is failing."""
        if self.ingress.ended or self.failed is not None:
            return []
        cut = self.ingress.next_isn - 1
        seq = self.sequencer
        driver = {"next_isn": self.ingress.next_isn, "records": self.ingress.records,
                  "watermark": self.ingress.watermark, "sources": list(ev.sources),
                  "max_et": seq.max_et.tolist(), "ended": seq.ended.tolist(),
                  "held_rows": seq.held_rows.tolist()}
        out: list[BoundaryAction] = []
        before = self.checkpoints.pending
        p = self.checkpoints.begin(cut, ev.now, driver, held=tuple(
            tuple(h) for h in seq.held))
        if before is not None and self.checkpoints.pending is not before:
            reason = self.checkpoints.given_up[-1][1]
            out.append(CheckpointGivenUp(checkpoint=before.checkpoint, reason=reason))
        if p is None:
            return out
        live = [s for s in sorted(self.controller.view.members) if s not in self.dead]
        out += self._sends([Outgoing(s, Cut(0, p.checkpoint, cut)) for s in live])
        # the egress may have delivered the cut already (nothing held by an operator)
        return out + self._due(self.checkpoints.delivered(self.egress.progress.sn))

    def restore(self, manifest: dict[str, Any], held: list[pa.RecordBatch | None],
                complete: Sequence[int] = (), incomplete: Sequence[int] = ()) -> None:
        """A restart from the complete checkpoint ``manifest`` (before any site starts): the
        ingress numbers on after its cut, the egress has delivered up to it, the sequencer
        holds what it held then (``held``, per stream), and checkpoints number on after
        every one in the store; the store's other ``complete`` ones count for the retention,
        its ``incomplete`` ones are removed with the next completed one."""
        d, cut = manifest["driver"], int(manifest["cut"])
        self.ingress.restore(int(d["next_isn"]), int(d["records"]), int(d["watermark"]))
        self.egress.restore(cut)
        self.sequencer.restore(d["max_et"], d["ended"], held)
        k = int(manifest["checkpoint"])
        self.checkpoints.completed = sorted([(o, -1) for o in complete if o < k] + [(k, cut)])
        self.checkpoints.given_up = [(o, "the run stopped while it was taken")
                                     for o in incomplete]
        self.checkpoints.first = self.checkpoints._next = max([k, *complete, *incomplete]) + 1

    def _due(self, due: Due | None) -> list[BoundaryAction]:
        if due is None:
            return []
        if due.commit:
            return [CommitSinks(checkpoint=due.checkpoint, cut=due.cut)]
        assert due.manifest is not None
        p = self.checkpoints.pending
        return [WriteManifest(checkpoint=due.checkpoint, name=manifest_name(due.checkpoint),
                              manifest=due.manifest, held=p.held if p else ())]

    def _give_up(self, reason: str) -> list[BoundaryAction]:
        k = self.checkpoints.give_up(reason)
        return [] if k is None else [CheckpointGivenUp(checkpoint=k, reason=reason)]

    def _sends(self, outs: Sequence[Outgoing]) -> list[BoundaryAction]:
        return [o for o in outs if o.site not in self.dead]

    def _abort(self, reason: str) -> list[BoundaryAction]:
        if self.failed is None:
            self.failed = reason
        return [Abort(reason=reason)]

    # -- the controller's actions ------------------------------------------------------------
    def _controller(self, actions: list[Action]) -> list[BoundaryAction]:
        split = self.controller.split
        if split is not None and split[1] != self._split_at:  # judged (again) just now
            self._split_at, self._split_sn = split[1], self.egress.progress.sn
        out: list[BoundaryAction] = []
        for a in actions:
            match a:
                case InstallView(view=view, ring=ring, table=table):
                    members = {s: cm.Member(host=m.host, port=m.port, attempt=m.attempt,
                                            registered=s) for s, m in view.members.items()}
                    self.registered = {s: s for s in view.members}
                    # The ring over failure domains: the ingress and egress load it now, every
                    # site with its view, all before the ingress starts (after every site's
                    # ready), so every party routes by the same table from the first row.
                    if ring:
                        self.ingress.layout.set_ring(ring)
                        self.egress.layout.set_ring(ring)
                    if table is not None:  # --placement latency
                        self.ingress.layout.place(table)
                        self.egress.layout.place(table)
                    out.append(a)
                    placed = {} if table is None else {"table": table}
                    out += [SendView(site=s, view=cm.View(number=view.number, members=members,
                                                          ring=ring, **placed))
                            for s in view.members]
                case FailSites(view=view, dead=dead):
                    out.append(a)
                    out += self._give_up(f"site(s) {sorted(dead)} failed while it was taken")
                    out += self._fail(set(dead), list(view.members))
                case Adopt():
                    out.append(a)
                    out += self._give_up(f"a standby adopted slot {a.slot} while it was taken")
                    out += self._adopt(a)
                case CatchUp(stage=stage, q=q, r=r, survivor=survivor, epoch=epoch,
                             retained=retained):
                    out.append(a)
                    # on the control connection: the survivor's input queue does not delay
                    # it (its order with data does not matter: ``retaining`` marks the cut)
                    out.append(Tell(site=survivor, message=CuStart(stage, q, r, epoch,
                                                                  retained)))
                case Move():
                    out.append(a)
                    out += self._give_up(f"a copy of partition {a.q} moved while it was taken")
                    out += self._move(a)
                case Collect(round=rnd):
                    # Answered from each site's next heartbeat, which carries its counters:
                    # a request to the site would queue behind the data on its connection.
                    for s in self.controller.view.members:
                        if s not in self.controller.dead:
                            self._collecting[s] = rnd
                case Abort(reason=reason):
                    if self.failed is None:
                        self.failed = reason
                    out.append(a)
                case _:
                    out.append(a)
        return out

    def _fail(self, dead: set[int], live: list[int]) -> list[BoundaryAction]:
        """Take-over (SIGMOD §3.2): ``fail`` to every live site, ``ack_all`` at the ingress,
        ``reverse`` from the egress."""
        self.dead |= dead
        for slot in dead:
            self.beats.pop(slot, None)
            self.beat_at.pop(slot, None)
        out: list[BoundaryAction] = [Tell(site=s, message=cm.Fail(dead=tuple(sorted(self.dead))))
                                     for s in live]
        self.ingress.on_fail(self.dead)
        try:
            out += self._sends(self.egress.on_fail(self.dead))
        except PartitionLost as e:
            out += self._abort(f"{e}. {LOST_HINT}")
        return out

    def _adopt(self, a: Adopt) -> list[BoundaryAction]:
        """``avail``: the standby process becomes slot ``a.slot``; every live member learns
        its address and dials it. The ingress names the new incarnation (its version number)
        in what it retains for it."""
        slot, address = a.slot, a.address
        self.dead.discard(slot)
        self.ingress.layout.grow(slot + 1)  # a slot a rescale opened
        self.egress.layout.grow(slot + 1)
        self.beats.pop(slot, None)  # the standby's progress counts from its first heartbeat
        self.beat_at.pop(slot, None)
        epoch = self.controller.epoch
        self.ingress.on_avail(slot, epoch)
        self.egress.on_avail(slot)
        self.registered[slot] = a.registered
        layout = self.controller.layout
        assert layout is not None
        members = {j: cm.Member(host=m.host, port=m.port, attempt=m.attempt,
                                registered=self.registered.get(j, j))
                   for j, m in a.view.members.items()}
        msg = cm.Adopt(slot=slot, members=members, dead=tuple(sorted(self.dead)),
                       epochs=self.ingress.epochs.copy(), table=layout.table().copy())
        out: list[BoundaryAction] = [AdoptProcess(slot=slot, pid=address.pid,
                                                  attempt=address.attempt,
                                                  registered=a.registered, message=msg)]
        out += [Tell(site=s, message=cm.Avail(slot=slot, epoch=epoch, host=address.host,
                                              port=address.port, attempt=address.attempt,
                                              registered=a.registered))
                for s in a.view.members if s != slot]
        return out

    def _move(self, m: Move) -> list[BoundaryAction]:
        """Unified Flux's move: the ingress and egress take over from the moved copy here,
        every live site does the same (``move``) and confirms; catch-up follows. The
        ingress's ``retaining`` goes on the data channel, behind the rows sent so far."""
        retaining = self.ingress.on_move(m.q, m.r, m.dst, m.epoch, m.survivor)
        try:
            back = self.egress.on_move(m.q, m.r, m.dst)
        except PartitionLost as e:
            return self._abort(str(e))
        out: list[BoundaryAction] = list(self._sends(back))
        out += [Tell(site=s, message=cm.Move(q=m.q, r=m.r, dst=m.dst, epoch=m.epoch,
                                             survivor=m.survivor))
                for s in self.controller.view.members if s not in self.controller.dead]
        return out + self._sends(retaining)


def boundary_for(plan: PhysicalPlan, replicas: int,
                 options: ControlOptions = ControlOptions(),  # noqa: B008 - frozen
                 end_with_output: bool = True, eventual: Eventual | None = None,
                 race: bool = False, unordered: bool = False) -> Boundary:
    """A boundary with a fresh controller over chained declustering of ``replicas`` copies,
    run as ``options`` say (``eventual``: ``--consistency eventual``; ``race``: racing
    replicas, ``--ha race``; ``unordered``: ``--unordered-output``)."""
    layout = Layout(plan.sites, plan.partitions, replicas, race=race)
    controller = Controller(plan.sites, ha=replicas > 1, layout=layout,
                            stages=len(plan.stages), options=options)
    return Boundary(plan, layout, controller, end_with_output, eventual, unordered)


__all__ = ["Answer", "Boundary", "BoundaryAction", "BoundaryEvent", "boundary_for"]
