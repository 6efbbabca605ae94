"""The ingress (SIGMOD §3, thesis §3.3): the boundary where input enters the dataflow.

It assigns dense, increasing input sequence numbers (ISN) to accepted records, computes the
event-time watermark, routes each record to its first-stage mini-partition, and sends every
site a progress marker with each batch so that no merge waits on a quiet partition. Records
whose event time is behind the watermark are rejected (late) *before* they get an ISN, which
keeps the watermark a true bound and the run deterministic.

Flow control is end to end: the driver admits input only while the number of ISNs not yet
completed at the egress is below the window, which bounds the data in flight anywhere.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.compiler import stage_schema
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.dataflow.routing import Router
from sparkflux.model.progress import ENDED, NO_WATERMARK, Progress
from sparkflux.model.schema import PART, SN, SNM, T0
from sparkflux.model.validate import Rejected
from sparkflux.protocol.actions import SendData

INGRESS = -1


class Ingress:
    """Assigns ISNs and routes admitted input to the first stage."""

    def __init__(self, plan: PhysicalPlan) -> None:
        self.plan = plan
        self.schema = stage_schema(plan.source_schema)
        self.operators = plan.ingress_operators
        self.router = Router(plan, plan.stages[0])
        self.next_isn = 0
        self.watermark = NO_WATERMARK
        self.ended = False

    @property
    def progress(self) -> Progress:
        return ENDED if self.ended else Progress(self.next_isn - 1, self.watermark)

    def admit(self, batch: pa.RecordBatch, now: float) -> tuple[list[SendData], list[Rejected]]:
        """Number and route a batch of valid records (user columns in the source schema)."""
        rejected: list[Rejected] = []
        et = self.plan.event_time
        if et is not None and batch.num_rows:
            ts = batch.column(et).to_numpy(zero_copy_only=False).astype(np.int64)
            running = np.maximum.accumulate(np.r_[self.watermark, ts])
            late = ts < running[:-1]
            if late.any():
                rows = batch.filter(pa.array(late)).to_pylist()
                rejected = [Rejected(r, f"late: event time {r[et]} is behind the watermark")
                            for r in rows]
                batch = batch.filter(pa.array(~late))
            if batch.num_rows:
                self.watermark = max(self.watermark, int(running[-1]))
        n = batch.num_rows
        cols = list(batch.columns)
        cols += [
            pa.array(np.arange(self.next_isn, self.next_isn + n, dtype=np.int64)),
            pa.array(np.zeros(n, dtype=np.int64)),
            pa.array(np.full(n, now, dtype=np.float64)),
            pa.array(np.zeros(n, dtype=np.int32)),
        ]
        names = [*batch.schema.names, SN, SNM, T0, PART]
        numbered = pa.RecordBatch.from_arrays(cols, names=names)
        numbered = pa.RecordBatch.from_arrays(numbered.columns, schema=self.schema)
        self.next_isn += n
        for op in self.operators:  # stateless steps before the first exchange
            numbered = op.process(numbered)
        return self._sends(self.router.route(numbered)), rejected

    def finish(self) -> list[SendData]:
        """The end of the input: every site learns that the stream is complete."""
        self.ended = True
        return self._sends({})

    def _sends(self, parts: dict[int, pa.RecordBatch]) -> list[SendData]:
        p = self.progress
        return [SendData(site=s, stage=0, producer=INGRESS, progress=p, batch=parts.get(s))
                for s in range(self.plan.sites)]
