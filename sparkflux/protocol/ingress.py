"""The ingress (SIGMOD §3, thesis §3.3): where input enters the dataflow.

It assigns dense, increasing input sequence numbers (ISN) to accepted records, computes the
event-time watermark, routes each record to its first-stage mini-partition and sends it to
every replica of that partition, keeping it in its buffer until both have acknowledged it
(``del = {PROD, PRIM, SEC}``; on a replica's failure ``ack_all`` drops it from ``del``).
Progress markers go with every batch so no merge waits on a quiet partition. The records come
from the sequencer (``sequencer.py``) in their one merged order, late ones already rejected
*before* they get an ISN, which keeps the watermark a true bound and every run
deterministic.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import NOWHERE, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS, NO_WATERMARK, Frontier, Progress
from sparkflux.model.schema import PART, SN, SNM, T0
from sparkflux.protocol.messages import SRC, Ack, Outgoing, Rejoin, Retaining
from sparkflux.protocol.producer import ProducerBuffer
from sparkflux.protocol.roles import ingress_roles
from sparkflux.protocol.tentative import tentative_sends

# The ingress's steps are stateless (a stateful one needs an exchange before it): they get
# no progress to react to.
_STATELESS = Frontier.every(Progress(), 1)


RACE_LAG = 8  # racing replicas: how many windows a slow copy may fall behind the fastest


class Ingress:
    """Numbers admitted input and sends it to every replica of its first-stage partition."""

    def __init__(self, plan: PhysicalPlan, layout: Layout) -> None:
        self.plan = plan
        self.layout = layout.copy()  # the ingress's view of the placement; moves change it
        self.program = plan.ingress  # the sources as ports; stateless steps before exchanges
        self.wire = self.program.wire_schema
        site, send, wait = ingress_roles(self.layout)
        self.buffer = ProducerBuffer(0, {0: 0}, site, send, wait, self.wire)
        self.next_isn = 0
        self.records = 0  # records admitted (chunks, when a record takes several ISNs)
        self.epochs = np.zeros((layout.partitions, layout.columns), dtype=np.int64)
        self.watermark = NO_WATERMARK
        self.ended = False

    def admit(self, batch: pa.RecordBatch, now: float, watermark: int,
              arrived: np.ndarray | None = None) -> list[Outgoing]:
        """Number, route and send a batch of records (``source_rows_schema``: each source's
        columns and ``_port``, its source), in the order the sequencer released them;
        ``watermark``: no later record has an event time below it.

        Each record takes one ISN, or, with the plan's ``isn_span`` column, that many: a chunk
        of a source read on the sites takes one for each of its rows the readers will keep,
        and its own ``_sn`` is the first of them (``io/chunks.py``). Such records are spread
        over the first stage's partitions in turn (the ``n``-th admitted to partition ``n mod
        P``), so that consecutive chunks are read on different sites at once."""
        self.watermark = max(self.watermark, watermark)
        n = batch.num_rows
        part = np.full(n, -1, dtype=np.int32)  # no partition yet: routed by the first stage's key
        if self.plan.isn_span is None:
            first = np.arange(self.next_isn, self.next_isn + n, dtype=np.int64)
            taken = n
        else:
            part = ((self.records + np.arange(n)) % self.plan.partitions).astype(np.int32)
            spans = batch.column(self.plan.isn_span).to_numpy().astype(np.int64)
            if n and spans.min() < 1:
                raise ValueError(f"a record takes {int(spans.min())} sequence numbers "
                                 f"({self.plan.isn_span!r}): at least one each")
            ends = np.cumsum(spans)
            first, taken = self.next_isn + ends - spans, int(ends[-1]) if n else 0
        system = {SN: pa.array(first),
                  SNM: pa.array(np.zeros(n, dtype=np.int64)),
                  T0: pa.array(np.full(n, now, dtype=np.float64) if arrived is None
                               else arrived.astype(np.float64)),
                  PART: pa.array(part)}
        schema = self.program.in_schema
        numbered = pa.RecordBatch.from_arrays(
            [system[f.name] if f.name in system else batch.column(f.name) for f in schema],
            schema=schema)
        self.next_isn += taken
        self.records += n
        out, _ = self.program.run(numbered, _STATELESS, hold=False)
        return self._send(out)

    def tentative(self, batch: pa.RecordBatch, arrived: np.ndarray, tsn: np.ndarray,
                  sn: int, watermark: int, epoch: int, first_live: np.ndarray
                  ) -> list[Outgoing]:
        """Tentative rows of episode ``epoch`` (``protocol/consistency.py``): records in the
        sequencer's order that have no stable SN yet, numbered ``tsn`` and stamped with their
        arrival, routed as stable rows are, and sent to the first live copy of each
        first-stage partition (``first_live``, per partition) without FH-Prod: nothing keeps
        or resends them. Every such site gets the claim ``(sn, watermark)``, rows or not."""
        n = batch.num_rows
        system = {SN: pa.array(tsn), SNM: pa.array(np.zeros(n, dtype=np.int64)),
                  T0: pa.array(arrived.astype(np.float64)),
                  PART: pa.array(np.full(n, -1, dtype=np.int32))}
        schema = self.program.in_schema
        numbered = pa.RecordBatch.from_arrays(
            [system[f.name] if f.name in system else batch.column(f.name) for f in schema],
            schema=schema)
        out, _ = self.program.run(numbered, _STATELESS, hold=False)
        src = out.schema.get_field_index(SRC)
        out = out.set_column(src, SRC, pa.array(np.zeros(out.num_rows, np.int32)))
        return tentative_sends(out, first_live, 0, epoch, sn, watermark)

    def restore(self, next_isn: int, records: int, watermark: int) -> None:
        """A restart from a checkpoint cut at ``next_isn - 1``: numbering goes on after the
        cut, and every first-stage replica counts as having acknowledged it (each starts
        from its part, at the cut)."""
        self.next_isn, self.records = next_isn, records
        self.watermark = max(self.watermark, watermark)
        self.buffer.restore(0, next_isn - 1, watermark)

    def finish(self) -> list[Outgoing]:
        """The end of the input: every replica learns that the stream is complete."""
        self.ended = True
        return self._send(None)

    def _send(self, rows: pa.RecordBatch | None) -> list[Outgoing]:
        batch = None
        if rows is not None and rows.num_rows:  # the ingress is producer partition 0
            src = rows.schema.get_field_index(SRC)
            batch = rows.set_column(src, SRC, pa.array(np.zeros(rows.num_rows, np.int32)))
        sn = END_OF_STREAM if self.ended else self.next_isn - 1
        wm = END_OF_STREAM if self.ended else self.watermark
        return self.buffer.produce(batch, np.array([sn]), np.array([wm]))

    def on_ack(self, ack: Ack, src: int | None = None) -> None:
        self.buffer.on_ack(ack, src)

    def on_rejoin(self, msg: Rejoin, src: int) -> list[Outgoing]:
        return self.buffer.on_rejoin(msg, src)

    def on_move(self, q: int, r: int, dst: int, epoch: int, survivor: int = -1
                ) -> list[Outgoing]:
        """Replica r of first-stage partition q moves to ``dst`` (see ``SiteCore._on_move``):
        ``ack_all`` for its old incarnation, and retain for the new one at once (its
        ``retaining`` goes to the survivor, after the rows sent to it so far); the new one is
        fed once catch-up rejoins it. A move that retires a copy (``dst`` ``NOWHERE``) builds
        nothing, so nothing is retained."""
        self.buffer.on_fail(self.layout.only(q, r))
        self.layout.move(q, r, dst)
        self.epochs[q, r] = epoch
        if self.layout.replicas < 2 or dst == NOWHERE:
            return []
        self.on_retain(q, r, epoch)
        sr = survivor if survivor >= 0 else self.layout.next_copy(q, r)
        return [Outgoing(self.layout.site_of(q, sr), Retaining(0, q, r, epoch))]

    def on_fail(self, dead_sites: set[int]) -> None:
        self.buffer.on_fail(self.layout.dead(dead_sites))

    def on_avail(self, site: int, epoch: int = 0) -> None:
        """A standby took over site ``site``: its replicas come back one by one (retain)."""
        self.epochs[self.layout.table() == site] = epoch

    def on_retain(self, q: int, c: int, epoch: int) -> None:
        """Retain for first-stage replica (q, c) unless the request is for a dead incarnation."""
        if self.epochs[q, c] == epoch:
            self.buffer.on_retain(q, c)

    def buffered(self) -> int:
        return self.buffer.buffered_rows()

    # -- flow control ----------------------------------------------------------------------
    def unacknowledged(self) -> int:
        """Admitted records not yet acknowledged by every first-stage replica the ingress
        feeds: what admission bounds (``--window``). A consumer acknowledges a frame when its
        site's scheduler takes it, before any operator sees its rows, so this never waits for
        an operator (a window closing, a join's partner): only for sites reading their input.
        A replica being caught up is left out until it rejoins (its rows are retained for it,
        and its catch-up needs no more input)."""
        low = self._lowest()
        if low is None:
            return 0
        behind = max(0, self.next_isn - 1 - low[0])
        if not self.layout.race:
            return behind
        # Racing replicas: admission goes at the pace of each partition's fastest copy (a
        # slow or hung copy is raced past), and a copy may fall up to ``RACE_LAG`` times as
        # far behind before it holds admission back: what the ingress and the producers
        # retain for it stays bounded.
        fed = self.buffer.send[0]
        lead = np.where(fed, self.buffer.acked[0], NO_PROGRESS).max(axis=1)
        first = int(lead[fed.any(axis=1)].min())
        return max(self.next_isn - 1 - first, -(-behind // RACE_LAG), 0)

    def slowest(self) -> tuple[int, int, int] | None:
        """(acknowledged SN, partition q, replica c) of the fed first-stage replica that has
        acknowledged the least; None when none is fed."""
        return self._lowest()

    def _lowest(self) -> tuple[int, int, int] | None:
        fed = self.buffer.send[0]
        if not fed.any():
            return None
        acked = np.where(fed, self.buffer.acked[0], np.iinfo(np.int64).max)
        q, c = np.unravel_index(int(np.argmin(acked)), acked.shape)
        return int(acked[q, c]), int(q), int(c)


__all__ = ["Ingress", "SN", "SNM", "T0", "SRC"]
