"""The sans-I/O core of a site: per stage, FH-Cons -> operator shell -> FH-Prod.

``SiteCore`` owns the replicas of every stage's mini-partitions that its site hosts (the
layout's chained declustering). It takes messages and view changes and returns the messages
to send; the real runtime (sockets) and the simulator (simulated links) drive the very same
object. Rows of all hosted partitions of a stage go through one vectorized operator call (the
thesis' operator shell / FluxPooler); the protocol state stays per partition replica.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.batch import concat, sort_by_sn
from sparkflux.model.keys import partition_of
from sparkflux.model.progress import Progress
from sparkflux.model.schema import PART
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.messages import SRC, Ack, Data, Message, Outgoing, Reverse
from sparkflux.protocol.producer import ProducerBuffer, ProtocolError
from sparkflux.protocol.roles import consumer_roles, producer_roles

log = logging.getLogger(__name__)


def wire_schema(schema: pa.Schema) -> pa.Schema:
    """A stage's input schema plus ``_src`` (the producer partition), as sent on the wire."""
    return schema.append(pa.field(SRC, pa.int32(), nullable=False))


class SiteCore:
    """Everything one site computes; no I/O."""

    def __init__(self, site: int, plan: PhysicalPlan, layout: Layout) -> None:
        self.site = site
        self.plan = plan
        self.layout = layout
        self.hosted = layout.hosted(site)
        self.dead_sites: set[int] = set()
        self.stopped: str | None = None
        n = len(plan.stages)
        self.cons: list[ConsumerSet] = []
        self.prods: list[ProducerBuffer] = []
        for s, stage in enumerate(plan.stages):
            psite, sender, ack_to = consumer_roles(layout, self.hosted, first_stage=s == 0)
            self.cons.append(ConsumerSet(s, self.hosted, psite, sender, ack_to,
                                         wire_schema(stage.input_schema)))
            last = s == n - 1
            csite, send, wait = producer_roles(layout, self.hosted, to_egress=last)
            out_schema = plan.output_schema if last else plan.stages[s + 1].input_schema
            self.prods.append(ProducerBuffer(s + 1, self.hosted, csite, send, wait,
                                             wire_schema(out_schema)))
        self.holds = [any(getattr(o, "holds_progress", False) for o in st.operators)
                      for st in plan.stages]

    # -- events ------------------------------------------------------------------------------
    def on_message(self, src: int, msg: Message) -> list[Outgoing]:
        """Handle one message; returns what to send to *other* sites, in order."""
        if self.stopped or src in self.dead_sites:
            return []  # a failed site's late messages are ignored (fail-stop)
        return self._local(self._handle(msg))

    def _handle(self, msg: Message) -> list[Outgoing]:
        if isinstance(msg, Data):
            return self._on_data(msg)
        if isinstance(msg, Ack):
            self.prods[msg.stage - 1].on_ack(msg)
            return []
        if isinstance(msg, Reverse):
            return self.prods[msg.stage - 1].on_reverse(msg)
        raise ProtocolError(f"site {self.site}: unknown message {type(msg).__name__}")

    def on_fail(self, dead_sites: set[int]) -> list[Outgoing]:
        """A view change: these sites failed (take-over for every hosted replica)."""
        if self.site in dead_sites:
            self.stopped = "excluded from the view"
            return []
        new = set(dead_sites) - self.dead_sites
        if not new:
            return []
        self.dead_sites |= new
        table = self.layout.table()
        dead = np.isin(table, list(self.dead_sites))  # [P, R]
        out: list[Outgoing] = []
        for s in range(len(self.plan.stages)):
            if s > 0:
                out += self.cons[s].on_fail(dead)
            last = s == len(self.plan.stages) - 1
            if not last:
                self.prods[s].on_fail(dead)
        return self._local(out)

    # -- data path ---------------------------------------------------------------------------
    def _on_data(self, msg: Data) -> list[Outgoing]:
        out = self.cons[msg.stage].on_data(msg)  # acknowledgements go out before processing
        return out + self._drive(msg.stage)

    def _local(self, outs: list[Outgoing]) -> list[Outgoing]:
        """Deliver messages addressed to this site at once, in order; return the rest.

        Handling a self-addressed message synchronously is what a FIFO link to oneself would
        do, as long as every such message is handled before the next external event: an
        acknowledgement to a co-located producer then always precedes a later ``reverse``.
        """
        remote: list[Outgoing] = []
        queue = list(outs)
        while queue:
            o = queue.pop(0)
            if o.site == self.site:
                queue[0:0] = self._handle(o.message)
            else:
                remote.append(o)
        return remote

    def _drive(self, first: int) -> list[Outgoing]:
        out: list[Outgoing] = []
        for s in range(first, len(self.plan.stages)):
            rel = self.cons[s].release()
            if rel is None:
                break
            rows, f_sn, f_wm = rel
            batch, prog_sn, prog_wm = self._process(s, rows, f_sn, f_wm)
            sends = self.prods[s].produce(batch, prog_sn, prog_wm)
            for o in sends:
                if o.site == self.site:  # the next stage's replica is here: deliver now
                    assert isinstance(o.message, Data)
                    out += self.cons[o.message.stage].on_data(o.message)
                else:
                    out.append(o)
        return out

    def _process(self, s: int, rows: pa.RecordBatch, f_sn: np.ndarray, f_wm: np.ndarray
                 ) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
        stage = self.plan.stages[s]
        batch = rows.drop_columns([SRC])
        progress = Progress(int(f_sn.min()), int(f_wm.min()))
        for op in stage.operators:
            batch = op.process(batch)
            extra, progress = op.advance(progress)
            if extra.num_rows:
                batch = sort_by_sn(concat([batch, extra]))
        prog_sn, prog_wm = f_sn.copy(), f_wm.copy()
        if self.holds[s]:
            np.minimum(prog_sn, progress.sn, out=prog_sn)
            np.minimum(prog_wm, progress.wm, out=prog_wm)
        return self._route(s, batch), prog_sn, prog_wm

    def _route(self, s: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Set ``_part`` to the next stage's partition (0 for the egress), ``_src`` to mine."""
        last = s == len(self.plan.stages) - 1
        n = batch.num_rows
        src = batch.column(PART).to_numpy().astype(np.int32)
        if last:
            dest = np.zeros(n, dtype=np.int32)
            schema = wire_schema(self.plan.output_schema)
        else:
            nxt = self.plan.stages[s + 1]
            dest = partition_of(batch, list(nxt.key), self.plan.partitions) if n else \
                np.zeros(0, np.int32)
            schema = wire_schema(nxt.input_schema)
        cols = [batch.column(name) if name not in (PART, SRC) else None
                for name in schema.names]
        cols[schema.get_field_index(PART)] = pa.array(dest, type=pa.int32())
        cols[schema.get_field_index(SRC)] = pa.array(src, type=pa.int32())
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    # -- introspection -----------------------------------------------------------------------
    def buffered_rows(self) -> int:
        return sum(p.buffered_rows() for p in self.prods) + sum(
            sum(b.num_rows for b in c.pending) for c in self.cons)
