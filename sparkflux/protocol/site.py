"""The sans-I/O core of a site: per stage, FH-Cons -> operator shell -> FH-Prod.

``SiteCore`` owns the replicas of every stage's mini-partitions that its site hosts (the
layout's chained declustering). It takes messages and view changes and returns the messages
to send; the real runtime (sockets) and the simulator (simulated links) drive the very same
object. Rows of all hosted partitions of a stage go through one vectorized operator call (the
thesis' operator shell / FluxPooler); the protocol state stays per partition replica.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkflux.dataflow.placement import DRIVER, NOWHERE, STORE, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.progress import END_OF_STREAM, Frontier
from sparkflux.model.schema import PART
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.catchup import (
    AskRetain,
    CatchUpAction,
    CatchUps,
    ReportCuDone,
    SendPSync,
    TransferState,
    new_replica_step,
)
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.memory import Key, Load, Memory, Spill
from sparkflux.protocol.merge_waits import MergeWaits
from sparkflux.protocol.messages import (
    SPILL,
    SRC,
    Ack,
    ConsumerSnapshot,
    CuDone,
    CuStart,
    Cut,
    Data,
    Installed,
    LoadPartition,
    Message,
    Outgoing,
    PartitionSnapshot,
    PSync,
    Reconciled,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Reverse,
    SpillInput,
    State,
    StoredPartition,
    Tentative,
)
from sparkflux.protocol.producer import ProducerBuffer
from sparkflux.protocol.roles import consumer_roles, producer_roles
from sparkflux.protocol.tentative import MERGE, Branches, tentative_sends

log = logging.getLogger(__name__)


def wire_schema(schema: pa.Schema) -> pa.Schema:
    """A stage's input schema plus ``_src`` (the producer partition), as sent on the wire."""
    return schema.append(pa.field(SRC, pa.int32(), nullable=False))


@dataclass(frozen=True, slots=True)
class Received:
    """Messages the site read from its links, ``(source site, message)`` in arrival order,
    handled as one scheduler pass (the thesis' FluxPooler)."""

    items: Sequence[tuple[int, Message]]


# What a site's core takes: a pass's messages, and the controller's ``fail``, ``move`` and
# ``avail`` (the view changes and re-placements every site applies).
SiteEvent = Received | cm.Fail | cm.Move | cm.Avail


SIZES_EVERY_S = 0.25  # the memory policy measures the partitions' state this often
# A stage's pending rows beyond this share of the budget: the spilled partitions' go to disk
INPUT_SPILL_SHARE = 16


class SiteCore:
    """Everything one site computes; no I/O. One entry point: ``handle(*events)``."""

    def __init__(self, site: int, plan: PhysicalPlan, layout: Layout,
                 standby: bool = False) -> None:
        self.site = site
        self.plan = plan
        self.layout = layout.copy()  # this site's view of the placement; moves change it
        self.dead_sites: set[int] = set()
        self.stopped: str | None = None
        n = len(plan.stages)
        P = layout.partitions  # noqa: N806 - the paper's P, the partitions of a stage
        hosted = self.layout.hosted(site)
        # Every stage keeps role arrays for all P partitions; the ones hosted here are
        # installed (a standby's wait for catch-up), a move adds or drops one.
        every = {q: hosted.get(q, 0) for q in range(P)}
        mine = np.zeros(P, dtype=bool)
        mine[list(hosted)] = True
        self.cons: list[ConsumerSet] = []
        self.prods: list[ProducerBuffer] = []
        # per stage: it runs its rows as they arrive (racing copies, ``PhysicalPlan.arrival``),
        # and its rows leave above its claim (``unordered``: its consumers filter per row; a
        # row of an ordered stream is covered by its own stream's claim, which judges it)
        self.arrival = plan.arrival(self.layout.race)
        self.unordered = plan.unordered(self.layout.race)
        for s, stage in enumerate(plan.stages):
            psite, sender, ack_to = consumer_roles(self.layout, every, first_stage=s == 0)
            self.cons.append(ConsumerSet(s, every, psite, sender, ack_to,
                                         wire_schema(stage.input_schema),
                                         installed=mine & (not standby),
                                         unordered=s > 0 and self.unordered[s - 1],
                                         keep=plan.stream_replicas,
                                         stall=plan.stream_stall))
            last = s == n - 1
            csite, send, wait = producer_roles(self.layout, every, to_egress=last)
            out_schema = plan.output_schema if last else plan.stages[s + 1].input_schema
            live = mine & (not standby)
            keep = live[:, None, None]
            send, wait = send & keep, wait & keep  # standby: send nothing, hold nothing yet
            self.prods.append(ProducerBuffer(s + 1, every, csite, send, wait,
                                             wire_schema(out_schema), hosted=live))
        # Catch-ups this site runs as the survivor, and a move's early ``retaining``.
        self.catchups = CatchUps()
        # The epoch (the paper's version number) of every replica's current incarnation: set
        # when a standby adopts its site slot or a move re-places it.
        self.epochs = np.zeros((P, layout.columns), dtype=np.int64)
        self.state_bytes = 0
        self.processed = np.zeros(P, dtype=np.int64)  # rows processed per partition (stats)
        # A checkpoint's cut per stage (docs/design.md §9): (checkpoint, sn) while a partition
        # here has not reached it; which partitions have (by consumer index; one not installed
        # when the cut came never writes for it); the newest checkpoint each stage learnt of.
        self.cuts: list[tuple[int, int] | None] = [None] * n
        self.cut_done: list[np.ndarray] = [np.ones(0, dtype=bool) for _ in range(n)]
        self.last_cut = [-1] * n
        # Spilling under the memory budget (``memory.py``): the partitions on disk hold
        # their merge where it stands; a catch-up's actions that need one on disk wait for
        # its load (from its ``TransferState`` on, in order).
        self.memory = Memory()
        self._waiting_load: dict[Key, list[CatchUpAction]] = {}
        self._sizes: tuple[float, dict[Key, int]] | None = None  # (when, partition_bytes)
        # Tentative processing of a failure episode (``tentative.py``), made at its first row
        self._branches: Branches | None = None
        # A pass's budget (set by the host before each pass, None: no limit): each stage's
        # merge releases about this many rows in a pass, the rest in the next passes
        # (``ConsumerSet.release``); the stages that hold ready rows back are ``backlog``,
        # and the host runs another pass for them at once (``Frames`` with nothing new).
        # ``_left``: what each stage may still release in this pass.
        self.pass_rows: int | None = None
        self.backlog: set[int] = set()
        self._left: list[int] | None = None
        # --consistency eventual: each stage's merge under the delay bound (``merge_waits.py``)
        self.waits = [MergeWaits(c, plan.max_delay) for c in self.cons] \
            if plan.max_delay is not None else []

    @classmethod
    def adopting(cls, plan: PhysicalPlan, layout: Layout, msg: cm.Adopt) -> SiteCore:
        """The core of a standby that adopts slot ``msg.slot`` (``avail``): the placement as
        the moves so far have left it, the failed sites, and every replica's current version
        number (epoch); its replicas are empty until catch-up installs them."""
        layout = layout.copy()
        layout.load(msg.table)
        layout.grow(max([msg.slot, *msg.members]) + 1)  # slots a rescale opened
        core = cls(msg.slot, plan, layout, standby=True)
        core.dead_sites = set(msg.dead)
        core.epochs = np.asarray(msg.epochs, dtype=np.int64).copy()
        core._rebuilding(layout.table() == msg.slot)
        return core

    def _rebuilding(self, copies: np.ndarray) -> None:
        """These replicas start over empty: no take-over may pick them until their
        ``psync``."""
        for cons in self.cons[1:]:  # the first stage's producer is the ingress
            cons.rebuilding(copies)

    @property
    def hosted(self) -> dict[int, int]:
        return self.layout.hosted(self.site)

    # -- events ------------------------------------------------------------------------------
    def handle(self, *events: SiteEvent) -> list[Outgoing]:
        """Handle events in order; returns what to send to *other* sites, in order."""
        out: list[Outgoing] = []
        for ev in events:
            match ev:
                case Received(items=items):
                    out += self._on_messages(list(items))
                case cm.Fail(dead=dead):
                    out += self._on_fail(set(dead))
                case cm.Move(q=q, r=r, dst=dst, epoch=epoch, survivor=survivor):
                    out += self._on_move(q, r, dst, epoch, survivor)
                case cm.Avail(slot=slot, epoch=epoch):
                    self._on_avail(slot, epoch)
                case _:
                    raise ProtocolError(f"site {self.site}: no event {type(ev).__name__}")
        return out

    def _on_messages(self, items: list[tuple[int, Message]]) -> list[Outgoing]:
        """Handle a batch of messages in arrival order, running the operators once at the
        end (the thesis' FluxPooler: under load, many small inputs become one vectorized
        pass). Acknowledgements still go out before processing, in order; handling a control
        message before the operators run on earlier data is an interleaving the network could
        have produced (different roles, or a later arrival), so the protocol allows it.

        A link's data frames of one stage, and its acknowledgements of one stage, are each
        handled together at the first one's place, up to the link's next message of another
        kind (``link_runs``): as if the network had delayed the other links' messages between
        them, which it may."""
        out: list[Outgoing] = []
        fed: set[int] = set()  # the stages that got input
        evict: set[int] = set()  # buffers acks arrived for: evicted once, not once per ack
        n = len(self.plan.stages)  # (``_local`` may drive a stage several times in a pass)
        self._left = None if self.pass_rows is None else [self.pass_rows] * n
        # tentative rows per (stage, episode), run through the branch once after the rest
        tentative: dict[tuple[int, int], list[tuple[int, Tentative]]] = {}
        for src, run in link_runs(items):
            if self.stopped or src in self.dead_sites:
                continue
            msg = run[0]
            if all(isinstance(m, Tentative) for m in run):
                for m in run:
                    assert isinstance(m, Tentative)
                    tentative.setdefault((m.stage, m.epoch), []).append((src, m))
            elif is_data_run(run):
                out += self.cons[run[0].stage].on_data(run[0], src, run[1:])
                fed.add(run[0].stage)
            elif is_ack_run(run):
                self.prods[run[0].stage - 1].on_ack(merge_acks(run), src, evict=False)
                evict.add(run[0].stage - 1)
            else:
                for i in evict:  # anything else sees the buffers as one at a time would
                    self.prods[i].evict()
                evict.clear()
                out += self._handle(msg, src)
        for i in evict:
            self.prods[i].evict()
        # (before the operators run on this pass's data, as each would have been handled in
        # its place: a branch forks from the stable state the pass found)
        for (stage, epoch), msgs in sorted(tentative.items()):
            if not self.stopped:
                out += self._tentative_many(stage, epoch, msgs)
        fed |= self.backlog  # the stages whose merge held ready rows back last pass
        self.backlog = set()
        if fed and not self.stopped:
            out += self._drive(*fed)
        out = self._local(out)
        self._left = None  # (a release outside a pass, a load's or a move's, is not split)
        return coalesce_acks(out)

    @property
    def tentative_open(self) -> bool:
        """Whether a tentative branch of an open episode runs here (the host keeps its
        passes short then: ``pass_rows``)."""
        return self._branches is not None and self._branches.open

    def _handle(self, msg: Message, src: int) -> list[Outgoing]:
        if isinstance(msg, Data):
            return self._on_data(msg, src)
        if isinstance(msg, Ack):
            self.prods[msg.stage - 1].on_ack(msg, src)
            return []
        if isinstance(msg, Reverse):
            return self.prods[msg.stage - 1].on_reverse(msg, src)
        if isinstance(msg, CuStart):
            return self._cu_start(msg)
        if isinstance(msg, Retain):
            return [self._retain(msg.stage, msg.q, msg.c, msg.epoch, src)]
        if isinstance(msg, Retaining):
            return self._retaining(msg, src)
        if isinstance(msg, State):
            return self._install(msg, src)
        if isinstance(msg, Installed):
            return self._fold_in(msg)
        if isinstance(msg, PSync):
            if msg.epoch != self.epochs[msg.p, msg.r]:
                return []  # an earlier incarnation's fold-in (that process is gone)
            return [*self.cons[msg.stage].on_psync(msg),
                    Outgoing(DRIVER, cm.Folded(stage=msg.stage, p=msg.p, r=msg.r,
                                               epoch=msg.epoch))]
        if isinstance(msg, Rejoin):
            return self.prods[msg.stage - 1].on_rejoin(msg, src)
        if isinstance(msg, Rejoined):
            self.cons[msg.stage].on_rejoined(msg, src)
            return []
        if isinstance(msg, Cut):
            return self._on_cut(msg)
        if isinstance(msg, Tentative):
            return self._tentative(msg, src)
        if isinstance(msg, Reconciled):
            if self._branches is None:  # the count of episodes over, for the next one
                self._branches = Branches()
            self._branches.reconciled(msg.epoch)
            for w in self.waits:
                w.reconciled()
            return []
        raise ProtocolError(f"site {self.site}: unknown message {type(msg).__name__}")

    # -- catch-up: the survivor's side (the machine is in ``catchup.py``) -------------------
    def _producer_sites(self, stage: int) -> set[int]:
        if stage == 0:
            return {DRIVER}
        return set(range(self.layout.sites)) - self.dead_sites

    def _cu_start(self, msg: CuStart) -> list[Outgoing]:
        """``cu-start``: catch up replica r of partition q (``catchup.py``, rule 1-2). A
        cu-start for an incarnation of (q, r) that is no longer the current one (its move was
        abandoned and the copy re-placed since) is stale and ignored, and so is one for a
        copy whose site failed since (``fail`` came first)."""
        if (msg.epoch != self.epochs[msg.q, msg.r]
                or self.layout.site_of(msg.q, msg.r) in {*self.dead_sites, NOWHERE}):
            return []
        return self._carry_out(self.catchups.cu_start(
            msg.stage, msg.q, msg.r, msg.epoch, self._producer_sites(msg.stage), msg.retained))

    def _retain(self, stage: int, q: int, c: int, epoch: int, survivor: int) -> Outgoing:
        """The producers here keep stream p -> q for the new replica (q, c), unless it is
        for an incarnation no longer current, and tell the survivor on the data channel."""
        if self.epochs[q, c] == epoch:
            self.prods[stage - 1].on_retain(q, c)
        return Outgoing(survivor, Retaining(stage, q, c, epoch))

    def _retaining(self, msg: Retaining, src: int) -> list[Outgoing]:
        return self._carry_out(self.catchups.retaining(msg.stage, msg.q, msg.c, msg.epoch, src))

    def _prune_early(self) -> None:
        self.catchups.prune_early(self.epochs)

    def _fold_in(self, msg: Installed) -> list[Outgoing]:
        return self._carry_out(self.catchups.installed(msg.stage, msg.q, msg.epoch))

    def _carry_out(self, actions: list[CatchUpAction]) -> list[Outgoing]:
        """The survivor's catch-up actions as messages. A snapshot of a partition on disk
        waits for its load, and every action after it with it (``spill_loaded``)."""
        out: list[Outgoing] = []
        for n, a in enumerate(actions):
            if isinstance(a, TransferState) and self._on_disk((a.stage, a.q)):
                self._waiting_load.setdefault((a.stage, a.q), []).extend(actions[n:])
                return out
            match a:
                case AskRetain(stage=s, q=q, r=r, epoch=e, sites=sites):
                    out += [Outgoing(x, Retain(s, q, r, e)) for x in sites]
                case TransferState():
                    out.append(self._snapshot(a))
                case SendPSync(stage=s, q=q, r=r, epoch=e):
                    out += self._psync(s, q, r, e)
                case ReportCuDone(stage=s, q=q, r=r):
                    # the runtime's StateMover fills in the bytes it moved
                    out.append(Outgoing(DRIVER, CuDone(s, q, r, 0)))
        return out

    def _snapshot(self, a: TransferState) -> Outgoing:
        """State transfer: every producer retains for the new replica, so everything the
        survivor has not received yet is kept for it: snapshot partition q and move it
        (StateMover)."""
        stage, q = a.stage, a.q
        pi = self.prods[stage].pi(q)
        snap = PartitionSnapshot(
            cons=self.cons[stage].snapshot(q),
            ops=tuple(op.get_partition_state(q) for op in self.plan.stages[stage].operators),
            out_sn=int(self.prods[stage].progress_sn[pi]),
            out_wm=int(self.prods[stage].progress_wm[pi]),
            held=self.prods[stage].held(q),
        )
        return Outgoing(self.layout.site_of(q, a.r), State(stage, q, a.r, snap, a.epoch))

    def _psync(self, stage: int, q: int, r: int, epoch: int) -> list[Outgoing]:
        """Fold-in: tell every downstream consumer (``psync``, on the data channel after
        everything sent so far)."""
        last = stage == len(self.plan.stages) - 1
        sites = {DRIVER} if last else set(range(self.layout.sites)) - self.dead_sites
        return [Outgoing(s, PSync(stage + 1, q, r, epoch)) for s in sorted(sites)]

    # -- catch-up: the new replica's side --------------------------------------------------------
    def _install(self, msg: State, survivor: int) -> list[Outgoing]:
        """Install the survivor's snapshot as this site's new replica, unless it was taken
        for an incarnation that is no longer current: a survivor that had not yet seen the
        failure of the process it was catching up can send one, and it can reach the process
        that took the slot over (whose own catch-up brings the state it needs). Installed,
        it would be overwritten by that one, leaving the rows received in between pending
        (simulator seed 294 caught one replica up twice)."""
        if msg.epoch != self.epochs[msg.q, msg.r]:
            return []
        s, q = msg.stage, msg.q
        new_replica_step(s, q, msg.r, bool(self.cons[s].installed[self.cons[s].index[q]]),
                         "state")  # install, csync, installed (``catchup.py``)
        snap = msg.snapshot
        dead = self._dead_replicas() if s > 0 else np.zeros((1, 1), dtype=bool)
        out = self.cons[s].install(q, snap.cons, dead)
        for op, st in zip(self.plan.stages[s].operators, snap.ops, strict=True):
            op.install_partition_state(q, st)
        n_cons = 1 if s == len(self.plan.stages) - 1 else self.layout.partitions
        alive = ~self._dead_replicas()[:n_cons] if s < len(self.plan.stages) - 1 else \
            np.ones((1, 1), dtype=bool)
        self.prods[s].install(q, snap.out_sn, snap.out_wm, alive, snap.held)
        # ``installed`` goes back to the survivor that sent the state (the StateMover's peer)
        return out + [Outgoing(survivor, Installed(s, q, msg.r, msg.epoch))] + self._drive(s)

    def restore(self, parts: Mapping[tuple[int, int], StoredPartition]) -> None:
        """A restart from a checkpoint, before any input (docs/design.md §9): every
        partition replica this site hosts starts from its part, ``parts[(stage, q)]``, cut at
        the same input SN as every other: its operators' state, its input streams' progress
        at the cut, its output's progress. Later cuts number on from the checkpoint's."""
        for s, cons in enumerate(self.cons):
            for i in np.flatnonzero(cons.installed):
                q = int(cons.parts[i])
                part = parts.get((s, q))
                if part is None:
                    raise ProtocolError(f"site {self.site}: the checkpoint has no part for "
                                        f"partition {q} of stage {s}")
                snap = part.snapshot
                cons.restore(q, snap.cons)
                for op, st in zip(self.plan.stages[s].operators, snap.ops, strict=True):
                    op.install_partition_state(q, st)
                self.prods[s].restore(q, snap.out_sn, snap.out_wm)
                self.last_cut[s] = max(self.last_cut[s], part.checkpoint)

    def _dead_replicas(self) -> np.ndarray:
        return self.layout.dead(self.dead_sites)

    def _on_avail(self, site: int, epoch: int = 0) -> None:
        """A new process holds site slot ``site`` (a standby adopting it): talk to it again."""
        self.dead_sites.discard(site)
        self.layout.grow(site + 1)  # a slot a rescale opened
        self.epochs[self.layout.table() == site] = epoch
        self._rebuilding(self.layout.table() == site)
        self._prune_early()

    def _on_move(self, q: int, r: int, dst: int, epoch: int, survivor: int = -1
                 ) -> list[Outgoing]:
        """Unified Flux's move (thesis ch. 5) of copy r of partition q (every stage) to site
        ``dst``, where catch-up builds it from copy ``survivor``. Here: the source site
        drops its copy; every site takes over from it (``reverse`` to another copy,
        ``ack_all`` for it); the destination hosts an empty copy; everybody's table says
        ``dst`` from now on.

        Make before break is two of these: the new copy is built in a free column (the
        source is ``NOWHERE``: nothing is dropped, nobody takes over), and once it is folded
        in, the old copy is retired (the destination is ``NOWHERE``: nothing is built)."""
        if self.stopped:
            return []
        src = self.layout.site_of(q, r)
        if src == self.site:
            for s, stage in enumerate(self.plan.stages):
                self.cons[s].drop(q)
                self.prods[s].drop(q)
                for op in stage.operators:
                    op.drop_partition(q)
        out = self._take_over(self.layout.only(q, r)) if src != NOWHERE else []
        self.layout.move(q, r, dst)
        self.epochs[q, r] = epoch
        self._rebuilding(self.layout.only(q, r))
        self._prune_early()
        if dst == self.site:
            for s in range(len(self.plan.stages)):
                self.cons[s].add(q, r)
                self.prods[s].add(q, r)
        # Retain for the new copy now, not on the survivor's request once its catch-up
        # starts: every site applies a move before the controller starts any catch-up, so
        # the survivor need not wait for a round of ``retain`` through every site (the
        # thesis: the overloaded site, usually one of them, is never on a move's critical
        # path). On the data channel, ``retaining`` follows everything sent to the survivor
        # before it, as the reply to a ``retain`` would.
        if self.layout.replicas > 1 and dst != NOWHERE:
            sr = survivor if survivor >= 0 else self.layout.next_copy(q, r)
            at = self.layout.site_of(q, sr)
            if at not in self.dead_sites:
                out += [self._retain(s, q, r, epoch, at)
                        for s in range(1, len(self.plan.stages))]
        return self._local(out)

    def _on_fail(self, dead_sites: set[int]) -> list[Outgoing]:
        """A view change: these sites failed (take-over for every hosted replica)."""
        if self.site in dead_sites:
            self.stopped = "excluded from the view"
            return []
        new = set(dead_sites) - self.dead_sites
        if not new:
            return []
        self.dead_sites |= new
        # before take-over changes the buffers: a snapshot due now is taken as it was before
        targets = {key: self.layout.site_of(key[1], cu.r)
                   for key, cu in self.catchups.running.items()}
        out_cu = self._carry_out(self.catchups.failed(new, targets))
        dead = self.layout.dead(self.dead_sites)  # [P, C]
        return self._local(self._take_over(dead) + out_cu)

    def _take_over(self, dead: np.ndarray) -> list[Outgoing]:
        """``dead[p, r]``: these replicas are gone. FH-Cons reverses every stream it took
        from one of them; FH-Prod stops sending to and waiting for them (``ack_all``)."""
        out: list[Outgoing] = []
        for s in range(len(self.plan.stages)):
            if s > 0:
                out += self.cons[s].on_fail(dead)
            if s < len(self.plan.stages) - 1:
                self.prods[s].on_fail(dead)
        return out

    # -- data path ---------------------------------------------------------------------------
    def _on_data(self, msg: Data, src: int) -> list[Outgoing]:
        out = self.cons[msg.stage].on_data(msg, src)  # acks go out before processing
        return out + self._drive(msg.stage)

    def _local(self, outs: list[Outgoing]) -> list[Outgoing]:
        """Deliver messages addressed to this site at once, in order; return the rest.

        This is a FIFO link to oneself, delivered before the next external event: what
        handling a self-addressed message emits comes after everything emitted before it
        (an acknowledgement to a co-located producer still precedes a later ``reverse``). It
        must not go ahead of them: a progress claim emitted later would overtake the rows
        it covers, which the consumer would then take for duplicates.
        """
        remote: list[Outgoing] = []
        queue = deque(outs)
        while queue:
            o = queue.popleft()
            if o.site == self.site:
                # controller messages go to DRIVER only, never to a site
                assert not isinstance(o.message, cm.CONTROL_TYPES)
                queue.extend(self._handle(o.message, self.site))
            else:
                remote.append(o)
        return remote

    def _drive(self, *stages: int) -> list[Outgoing]:
        """Release, process and produce the input of each of ``stages`` (those that got
        input in a pass), in stage order. What goes to a replica of the next stage on this
        site is returned like the rest, for ``_local`` to deliver in its turn (it drives
        that stage then): handed over at once, it would pass self-addressed messages queued
        before it (a ``reverse``'s resent rows), and its progress claim would overtake the
        rows it covers. And a stage whose frontier did not move says nothing of the stages
        after it: each one that got input is driven. (The simulator found both with three
        stages in a chain.)"""
        out: list[Outgoing] = []
        for s in sorted(set(stages)):
            while True:  # (more than once only to go on past a checkpoint's cut)
                left = None if self._left is None else self._left[s]
                if left is not None and left <= 0:  # this pass's share is spent
                    self.backlog.add(s)
                    break
                cap = self._cap(s)
                rel = self.cons[s].release_arrived(cap) if self.arrival[s] \
                    else self.cons[s].release(cap, left)
                if self.cons[s].backlog:
                    self.backlog.add(s)
                if rel is not None:
                    rows, f_sn, f_wm = rel
                    if self._left is not None:
                        self._left[s] -= rows.num_rows
                    batch, prog_sn, prog_wm = self._process(s, rows, f_sn, f_wm)
                    out += self.prods[s].produce(batch, prog_sn, prog_wm)
                if self.cuts[s] is None:
                    break
                parts, cut = self._take_cuts(s)
                out += parts
                if not cut:
                    break
        return out

    # -- tentative rows of a failure episode (``consistency.py``, ``tentative.py``) ----------
    def _tentative(self, msg: Tentative, src: int) -> list[Outgoing]:
        """Tentative rows for a stage: processed in its branch for the partitions this site
        holds as their first live copy (in memory), the branch's output on to the next
        stage's first live copies, or to the egress."""
        return self._tentative_many(msg.stage, msg.epoch, [(src, msg)])

    def _tentative_many(self, s: int, epoch: int, msgs: list[tuple[int, Tentative]]
                        ) -> list[Outgoing]:
        """``_tentative`` for the messages of one stage and episode a pass received, the
        branch run once over them all (a stage's branch fans out to every next-stage site,
        so one run per message would multiply along a chain)."""
        if self._branches is None:
            self._branches = Branches()
        first = self.layout.first_live(self.dead_sites)
        mine = (first == self.site) & self.cons[s].installed
        for k in (*self.memory.spilled, self.memory.loading):
            if k is not None and k[0] == s:
                mine[k[1]] = False
        res = self._branches.feed_many(s, epoch, [(src, m.rows, m.sn, m.wm)
                                                  for src, m in msgs],
                                       self.plan.stages[s].program, mine, mine)
        if res is None:
            return []
        return self._branch_out(s, epoch, *res, first)

    def stream_tick(self, now: float) -> list[Outgoing]:
        """The host's clock for racing copies' collected streams: revival on delay
        (``ConsumerSet.on_tick``; the first stage's producer is the ingress)."""
        if self.stopped:
            return []
        out: list[Outgoing] = []
        for cons in self.cons[1:]:
            out += cons.on_tick(now)
        return self._local(out)

    def clock(self, now: float) -> list[Outgoing]:
        """The host's clock (``--consistency eventual``): every stage's merge that has held
        rows for the delay bound releases them tentatively (``merge_waits.py``) into the
        stage's branch, for the partitions this site holds as their first live copy; the
        episode is the one after the last reconciled (``Reconciled``), or the open one. An
        episode of the input (tentative rows numbered apart reached this site) gets nothing
        from the merges: the ingress sends every record tentatively already, and what a
        merge holds then is the backlog of the stable redo."""
        if not self.waits or self.stopped:
            return []
        if self._branches is None:
            self._branches = Branches()
        b = self._branches
        epoch = b.epoch if b.epoch > b.closed else b.closed + 1
        first = self.layout.first_live(self.dead_sites)
        out: list[Outgoing] = []
        for s, w in enumerate(self.waits):
            due = w.look(now)
            if b.from_input and b.epoch > b.closed:
                continue  # the input's episode: every record comes tentatively already
            mine = (first[:due.size] == self.site) & self.cons[s].installed
            for k in (*self.memory.spilled, self.memory.loading):
                if k is not None and k[0] == s:
                    mine[k[1]] = False
            go = (due | w.forked) & mine
            fed = w.feed(go, now)
            if fed is None:
                continue
            rows, sn, wm = fed
            res = b.feed(s, epoch, rows, sn, wm, MERGE, self.plan.stages[s].program, mine,
                         go)
            if res is None:
                continue
            out += self._branch_out(s, epoch, *res, first)
        return self._local(out)

    def _branch_out(self, s: int, epoch: int, rows: pa.RecordBatch, sn: int, wm: int,
                    first: np.ndarray) -> list[Outgoing]:
        """A stage's branch output: to the next stage's first live copies, or the egress."""
        assert self._branches is not None
        if s + 1 == len(self.plan.stages):
            if not rows.num_rows:
                return []  # the egress needs rows only
            return [Outgoing(DRIVER, Tentative(s + 1, epoch, rows, sn, wm))]
        return self._branches.news(tentative_sends(rows, first, s + 1, epoch, sn, wm))

    # -- checkpoints: each partition cuts itself at the input SN its cut names ---------------
    def _on_cut(self, msg: Cut) -> list[Outgoing]:
        """A checkpoint's cut for ``msg.stage``, learnt in-band (its first sender's copy; the
        others' are the same news): every partition of the stage here holds its merge at the
        cut until it has reached it, and the next stage's consumers learn it before anything
        of this stage above the cut can reach them. A newer checkpoint replaces one not yet
        cut here (the older one then lacks parts: the driver gives it up)."""
        s = msg.stage
        if msg.checkpoint <= self.last_cut[s]:
            return []
        self.last_cut[s] = msg.checkpoint
        self.cuts[s] = (msg.checkpoint, msg.sn)
        self.cut_done[s] = ~self.cons[s].installed.copy()
        out: list[Outgoing] = []
        if s + 1 < len(self.plan.stages):
            for site in sorted(set(range(self.layout.sites)) - self.dead_sites):
                out.append(Outgoing(site, Cut(s + 1, msg.checkpoint, msg.sn)))
        parts, _ = self._take_cuts(s)  # a partition that stands at the cut already
        return out + parts

    def _cap(self, s: int) -> np.ndarray | None:
        """Where stage ``s``'s merge stops, per partition: a pending cut's SN for the
        partitions that have not reached it, where it stands for a partition on disk (or
        being loaded), none for the rest."""
        cut = self.cuts[s]
        held = self._held_on_disk(s)
        if cut is None and held is None:
            return None
        cap = (np.full(self.cons[s].parts.size, END_OF_STREAM, dtype=np.int64) if cut is None
               else np.where(self.cut_done[s], END_OF_STREAM, cut[1]).astype(np.int64))
        if held is not None:
            cap[held] = np.minimum(cap[held], self.cons[s].released_sn[held])
        return cap

    def _held_on_disk(self, s: int) -> np.ndarray | None:
        """The consumer indexes of stage ``s``'s partitions on disk or being loaded."""
        m = self.memory
        keys = [k for k in (*m.spilled, m.loading) if k is not None and k[0] == s]
        if not keys:
            return None
        cons = self.cons[s]
        idx = cons.index[[q for _, q in keys]]
        return idx[idx >= 0]

    def _on_disk(self, k: Key) -> bool:
        return k in self.memory.spilled or self.memory.loading == k

    # -- memory: spilling whole partitions under the budget (``memory.py``) ------------------
    def partition_bytes(self) -> dict[Key, int]:
        """The bytes of each hosted (stage, partition)'s operator state (``partition_info``,
        every operator of the stage)."""
        sizes: dict[Key, int] = {}
        for s, stage in enumerate(self.plan.stages):
            for op in stage.operators:
                for info in op.partition_info():
                    sizes[(s, info.part)] = sizes.get((s, info.part), 0) + info.nbytes
        return sizes

    def buffered_bytes(self) -> int:
        """The bytes of the rows the site buffers: pending input and FH-Prod buffers."""
        return int(sum(b.nbytes for p in self.prods for b in p.buffer)
                   + sum(b.nbytes for c in self.cons for b in c.pending))

    def memory_tick(self, now: float) -> list[Outgoing]:
        """The memory policy's decisions now (``Memory.plan``), carried out: a spill takes
        the partition's operators' state, drops it here and sends it to the spill store; a
        load asks the store for it. Partitions with a cut pending or in a catch-up or a move
        stay in memory; one a catch-up waits for is loaded first."""
        hosted = [(s, int(q)) for s, cons in enumerate(self.cons)
                  for q in cons.parts[cons.installed]]
        m = self.memory
        m.track(hosted)
        if m.budget is None and not m.spilled:
            return []
        wanted = [k for k in self._waiting_load if k in m.spilled]
        if wanted and m.loading is None:
            m.spilled = {**{k: m.spilled[k] for k in wanted},
                         **{k: v for k, v in m.spilled.items() if k not in wanted}}
        if self._sizes is None or now - self._sizes[0] >= SIZES_EVERY_S:
            self._sizes = (now, self.partition_bytes())  # (a pass over every partition)
        out: list[Outgoing] = []
        for d in m.plan(now, self._sizes[1], self.buffered_bytes(), self._pinned()):
            match d:
                case Spill(key=(s, q)):
                    out.append(self._spill(s, q))
                case Load(key=(s, q)):
                    out.append(Outgoing(STORE, LoadPartition(s, q, m.loads)))
        return out + self._spill_input()

    def _spill_input(self) -> list[Outgoing]:
        """The pending rows of the partitions on disk (not the one loading: its load may
        have read the disk already), to disk beside their state, for each stage where their
        pending rows pass 1/``INPUT_SPILL_SHARE`` of the budget. They stay received and
        acknowledged (their progress stays); the load brings them back."""
        m = self.memory
        if m.budget is None or not m.spilled:
            return []
        out: list[Outgoing] = []
        floor = m.budget // INPUT_SPILL_SHARE
        for s, cons in enumerate(self.cons):
            qs = {q for st, q in m.spilled if st == s}
            total = sum(b.nbytes for b in cons.pending)
            if not qs or total < floor:
                continue
            # the spilled partitions' own share of the pending bytes (rows, not bytes, are
            # counted per partition): the others' backlog makes no file of theirs
            mine = np.array(sorted(qs), dtype=np.int32)
            rows = sum(b.num_rows for b in cons.pending)
            theirs = sum(int(np.isin(b.column(PART).to_numpy(), mine).sum())
                         for b in cons.pending)
            if theirs * total < floor * rows:
                continue
            for q, rows_q in cons.take_pending(qs).items():
                m.add_input((s, q), rows_q.nbytes)
                out.append(Outgoing(STORE, SpillInput(s, q, rows_q)))
        return out

    def _pinned(self) -> frozenset[Key]:
        """Partitions that must stay in memory now: a cut pending for them, or a catch-up
        they survive (a new copy is not installed until its state comes)."""
        pins: set[Key] = set(self.catchups.running)
        for s, cut in enumerate(self.cuts):
            if cut is not None:
                cons = self.cons[s]
                pins |= {(s, int(q)) for q in cons.parts[~self.cut_done[s] & cons.installed]}
        return frozenset(pins)

    def _spill(self, s: int, q: int) -> Outgoing:
        """Partition q of stage ``s`` to disk: its operators' state leaves memory (the
        writer holds it until it is written); its merge holds where it stands."""
        ops = self.plan.stages[s].operators
        state = tuple(op.get_partition_state(q) for op in ops)
        for op in ops:
            op.drop_partition(q)
        cons = self.cons[s]
        i = int(cons.index[q])
        none = np.zeros(0, dtype=np.int64)
        snap = PartitionSnapshot(
            cons=ConsumerSnapshot(progress_sn=none, progress_wm=none,
                                  released_sn=int(cons.released_sn[i]),
                                  released_wm=int(cons.released_wm[i]), pending=None),
            ops=state, out_sn=0, out_wm=0, held=None)
        return Outgoing(STORE, StoredPartition(SPILL, s, q, int(cons.released_sn[i]), snap))

    def spill_written(self, s: int, q: int) -> None:
        """The spill store has partition q of stage ``s`` on disk."""
        self.memory.written((s, q))

    def spill_loaded(self, s: int, q: int, snapshot: PartitionSnapshot, now: float,
                     seq: int = 0) -> list[Outgoing]:
        """Partition q of stage ``s`` is back (load number ``seq``): its operators' state
        installed, the input it had on disk back among the pending rows, the catch-up
        actions that waited for it carried out, then its pending input processed."""
        k = (s, q)
        if self.memory.loading != k or seq != self.memory.loads:
            return []  # it left meanwhile (moved away, retired), or an earlier load's answer
        for op, st in zip(self.plan.stages[s].operators, snapshot.ops, strict=True):
            op.install_partition_state(q, st)
        if snapshot.cons.pending is not None:
            self.cons[s].put_pending(snapshot.cons.pending)
        self.memory.loaded(k, now)
        out = self._carry_out(self._waiting_load.pop(k, []))
        return self._local(out + self._drive(s))

    def _take_cuts(self, s: int) -> tuple[list[Outgoing], bool]:
        """The partitions of stage ``s`` that have reached the pending cut: the one copy of
        each that writes it takes its state to the store (``StoredPartition``). Whether any
        reached it (their merge then goes on past it)."""
        cut = self.cuts[s]
        assert cut is not None
        checkpoint, sn = cut
        cons = self.cons[s]
        reached = ~self.cut_done[s] & cons.installed & (cons.released_sn >= sn)
        held = self._held_on_disk(s)
        if held is not None:  # its state is on disk: it cuts once loaded
            reached[held] = False
        out: list[Outgoing] = []
        for i in np.flatnonzero(reached):
            q = int(cons.parts[i])
            if int(cons.released_sn[i]) != sn:  # passed unknowing: cannot happen in-band
                raise ProtocolError(f"site {self.site}: stage {s} partition {q} is at SN "
                                    f"{int(cons.released_sn[i])}, past checkpoint "
                                    f"{checkpoint}'s cut at {sn}, which it learnt late")
            if self._writes(q):
                out.append(Outgoing(STORE, StoredPartition(
                    checkpoint, s, q, sn, self._cut_snapshot(s, q, int(i), sn))))
        self.cut_done[s] |= reached
        if self.cut_done[s].all():
            self.cuts[s] = None
        return out, bool(reached.any())

    def _writes(self, q: int) -> bool:
        """Whether this site writes partition q's checkpoint parts: its first live copy."""
        for r in range(self.layout.columns):
            site = self.layout.site_of(q, r)
            if site != NOWHERE and site not in self.dead_sites:
                return site == self.site
        return False

    def _cut_snapshot(self, s: int, q: int, i: int, sn: int) -> PartitionSnapshot:
        """Partition q of stage ``s`` at the cut: its operators' state, every input stream
        at the cut with the watermark that holds there, nothing pending (the rows above the
        cut are produced again after a restart), FH-Prod's output progress and no buffer
        (the next stage's partitions, cut at the same SN, have what was sent at or below)."""
        cons, prod = self.cons[s], self.prods[s]
        wm = int(cons.released_wm[i])
        streams = int(cons.progress_sn[i].size)
        pi = prod.pi(q)
        return PartitionSnapshot(
            cons=ConsumerSnapshot(progress_sn=np.full(streams, sn, dtype=np.int64),
                                  progress_wm=np.full(streams, wm, dtype=np.int64),
                                  released_sn=sn, released_wm=wm, pending=None),
            ops=tuple(op.get_partition_state(q) for op in self.plan.stages[s].operators),
            out_sn=int(prod.progress_sn[pi]), out_wm=int(prod.progress_wm[pi]), held=None)

    def _process(self, s: int, rows: pa.RecordBatch, f_sn: np.ndarray, f_wm: np.ndarray
                 ) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
        """Run stage ``s``'s program (``dataflow/program.py``) on the released rows with each
        partition's own frontier: the site hosts only some partitions (the others never
        progress here), and a window of one closes on that partition's watermark alone.
        The output is routed (``_part``: the next stage's partition, 0 for the egress) and
        carries ``_src``, the partition it comes from."""
        if rows.num_rows:
            self.processed += np.bincount(rows.column(PART).to_numpy(),
                                          minlength=self.processed.size)
        out, frontier = self.plan.stages[s].program.run(rows.drop_columns([SRC]),
                                                        Frontier(f_sn, f_wm),
                                                        hold=not self.unordered[s])
        return out, frontier.sn, frontier.wm

    # -- introspection -----------------------------------------------------------------------
    def buffered_rows(self) -> int:
        return sum(p.buffered_rows() for p in self.prods) + sum(
            sum(b.num_rows for b in c.pending) for c in self.cons)

    def pending_rows(self) -> int:
        """Rows received and waiting for the merge (above their partition's frontier)."""
        return sum(sum(b.num_rows for b in c.pending) for c in self.cons)

    def lowest(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per stage: the lowest input frontier over the installed consumer replicas here
        and the partition holding it, then the lowest output progress over the producer
        replicas here and the partition holding it (``END_OF_STREAM`` and -1 for a stage
        with none). What the driver's watchdog names when the run stops progressing."""
        n = len(self.plan.stages)
        in_sn = np.full(n, END_OF_STREAM, dtype=np.int64)
        out_sn = np.full(n, END_OF_STREAM, dtype=np.int64)
        in_part = np.full(n, -1, dtype=np.int64)
        out_part = np.full(n, -1, dtype=np.int64)
        for s, (cons, prod) in enumerate(zip(self.cons, self.prods, strict=True)):
            f_sn = np.where(cons.installed, cons.frontier(self._cap(s))[0], END_OF_STREAM)
            if cons.installed.any():
                i = int(np.argmin(f_sn))
                in_sn[s], in_part[s] = f_sn[i], cons.parts[i]
            o_sn = np.where(prod.hosted, prod.progress_sn, END_OF_STREAM)
            if prod.hosted.any():
                i = int(np.argmin(o_sn))
                out_sn[s], out_part[s] = o_sn[i], prod.parts[i]
        return in_sn, in_part, out_sn, out_part

    def watermarks(self) -> tuple[npt.NDArray[np.int64], ...]:
        """The event-time watermark of every consumer replica installed here: three arrays
        (stage, partition, watermark of its input frontier). The driver's progress keeps,
        per partition, the highest any copy reported (a watermark is a promise: it holds
        once made) and gives a stage the lowest over its partitions."""
        stages: list[npt.NDArray[np.int64]] = []
        parts: list[npt.NDArray[np.int64]] = []
        wms: list[npt.NDArray[np.int64]] = []
        for s, cons in enumerate(self.cons):
            mine = np.flatnonzero(cons.installed)
            stages.append(np.full(mine.size, s, dtype=np.int64))
            parts.append(cons.parts[mine].astype(np.int64))
            # (with the merge's cap: the frontier call moves the watermarks on, and a
            # partition held on disk or at a cut must not get one past its held rows)
            wms.append(cons.frontier(self._cap(s))[1][mine].astype(np.int64))
        empty = np.zeros(0, dtype=np.int64)
        return tuple(np.concatenate(x) if x else empty for x in (stages, parts, wms))

    def state_sizes(self) -> tuple[npt.NDArray[np.int64], ...]:
        """The state of every operator's mini-partitions hosted here (``partition_info``,
        the thesis' getPartitionInfo): four arrays of one entry per (operator, partition),
        the operator's index over the plan's stages in order, the partition, its keys and
        its bytes. The driver keeps, per operator and partition, the largest over the
        copies, so that replicas are counted once."""
        ops: list[int] = []
        parts: list[int] = []
        keys: list[int] = []
        nbytes: list[int] = []
        k = 0
        for s, stage in enumerate(self.plan.stages):
            hosted = set(self.prods[s].parts[self.prods[s].hosted].tolist())
            for op in stage.operators:
                for info in op.partition_info():
                    if info.part in hosted:
                        ops.append(k)
                        parts.append(info.part)
                        keys.append(info.keys)
                        nbytes.append(info.nbytes)
                k += 1
        return tuple(np.asarray(x, dtype=np.int64) for x in (ops, parts, keys, nbytes))


def coalesce_acks(outs: list[Outgoing]) -> list[Outgoing]:
    """One acknowledgement frame per (site, stage) where a pass emitted several in a row.

    Acks are cumulative (the producer keeps the maximum per stream), so several merge into
    one with all their entries. Only acks with no other message to the same site between them
    are merged, into the first one's place: nothing else to that site changes order. Under
    load a pass answers many data frames, and each ack frame otherwise costs both sides a
    frame's fixed work (encode, send, decode, handle)."""
    result: list[Outgoing] = []
    open_at: dict[tuple[int, int], int] = {}  # (site, stage) -> index of the ack merged into
    merged: dict[int, list[Ack]] = {}
    for o in outs:
        m = o.message
        if isinstance(m, Ack):
            i = open_at.get((o.site, m.stage))
            if i is not None:
                first = result[i].message
                assert isinstance(first, Ack)  # open_at holds the places of acks only
                merged.setdefault(i, [first]).append(m)
                continue
            open_at[(o.site, m.stage)] = len(result)
        else:
            for key in [k for k in open_at if k[0] == o.site]:
                del open_at[key]
        result.append(o)
    for i, acks in merged.items():
        result[i] = Outgoing(result[i].site, merge_acks(acks))
    return result


def merge_acks(acks: list[Ack]) -> Ack:
    """Acknowledgements of one stage as one (they are cumulative: the receiver keeps the
    maximum per stream)."""
    if len(acks) == 1:
        return acks[0]
    return Ack(acks[0].stage, p=np.concatenate([a.p for a in acks]),
               q=np.concatenate([a.q for a in acks]), c=np.concatenate([a.c for a in acks]),
               upto=np.concatenate([a.upto for a in acks]))


def is_data_run(run: list[Message]) -> TypeGuard[list[Data]]:
    """Whether ``run`` (one of ``link_runs``) is data frames: a run gathers one kind only."""
    return isinstance(run[0], Data)


def is_ack_run(run: list[Message]) -> TypeGuard[list[Ack]]:
    """Whether ``run`` (one of ``link_runs``) is acknowledgements (one kind only, as above)."""
    return isinstance(run[0], Ack)


def link_runs(items: list[tuple[int, Message]]) -> list[tuple[int, list[Message]]]:
    """``items`` in arrival order, with each link's data frames of one stage (and its
    acknowledgements of one stage) gathered at the first one's place, up to the link's next
    message of another kind.

    Any other message (``reverse``, ``psync``, a catch-up step, ...) closes the link's runs:
    it stays after everything the link sent before it and before everything after it, as
    the protocol requires of a FIFO link. Data and acknowledgements are independent (rows for
    this site's consumers; progress of its producers' buffers), so a link's run of one may
    pass the other. Messages of other links that arrived between the gathered ones are
    handled after them: an order the network could have delivered them in."""
    runs: list[tuple[int, list[Message]]] = []
    open_runs: dict[tuple[int, type, int], int] = {}  # (src, kind, stage) -> its run's index
    for src, msg in items:
        if isinstance(msg, (Data, Ack)):
            key = (src, type(msg), msg.stage)
            i = open_runs.get(key)
            if i is not None:
                runs[i][1].append(msg)
                continue
            open_runs[key] = len(runs)
        else:
            for k in [k for k in open_runs if k[0] == src]:
                del open_runs[k]
        runs.append((src, [msg]))
    return runs
