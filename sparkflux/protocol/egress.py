"""The egress (SIGMOD §3): the last stage's output, delivered once and in order.

It is an FH-Cons with one consumer and the last stage's partitions as producers: it takes each
partition's output from one replica (initially replica 0, S-Prod^P), acknowledges everything
it receives to the other (S-Prod^S, whose buffer is the duplicate filter), merges in SN order
up to the minimum progress, and hands the rows to the sink. On a failure of the replica it
reads from, it sends ``reverse`` to the survivor (SIGMOD Fig. 4, action 1). With racing
replicas (``--ha race``) every copy sends, and the egress delivers the first copy of each row
to arrive (``ConsumerSet._first_copies``): a failure needs no take-over.

``unordered`` (``--unordered-output``, for a consumer that does not care about order): rows
are handed on as soon as they pass the duplicate filter, in arrival order, without waiting
for the SN-ordered merge across the last stage's partitions (the racing-replicas paper's
unordered delivery); each still carries its ``(SN, SNM)``, and the progress handed with them
is the merge's frontier as before, so rows above it may come before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.batch import split_at_sn
from sparkflux.model.progress import NO_WATERMARK, Progress
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.messages import SRC, ConsumerSnapshot, Data, Outgoing, PSync
from sparkflux.protocol.roles import egress_roles
from sparkflux.protocol.site import wire_schema


@dataclass(frozen=True, slots=True)
class Delivery:
    batch: pa.RecordBatch
    progress: Progress


class Egress:
    def __init__(self, plan: PhysicalPlan, layout: Layout, unordered: bool = False) -> None:
        self.layout = layout.copy()  # the egress's view of the placement; moves change it
        self.unordered = unordered
        self.schema = plan.output_schema
        site, sender, ack_to = egress_roles(self.layout)
        self.cons = ConsumerSet(len(plan.stages), {0: 0}, site, sender, ack_to,
                                wire_schema(plan.output_schema), name="the output (egress)",
                                unordered=plan.unordered(layout.race)[-1],
                                keep=plan.stream_replicas, stall=plan.stream_stall)
        self.delivered = 0
        self.progress = Progress()
        # An open failure episode (``consistency.py``): stable rows above ``holding`` are
        # corrections, held here (with the partition they came from, ``SRC``) until the
        # episode reconciles (then delivered whole).
        self.holding: int | None = None
        self.corrections: list[pa.RecordBatch] = []

    @property
    def ended(self) -> bool:
        return self.progress.ended

    def on_data(self, msg: Data, src: int | None = None
                ) -> tuple[Delivery | None, list[Outgoing]]:
        acks = self.cons.on_data(msg, src)
        early = self.cons.take_arrived() if self.unordered else None
        rel = self.cons.release()
        if rel is None and early is None:
            return None, acks
        if rel is not None:
            rows, f_sn, f_wm = rel
            self.progress = Progress(int(f_sn[0]), int(f_wm[0]))
        if early is not None:  # release had nothing left: every pending row came early
            assert rel is None or not rel[0].num_rows, "rows released after take_arrived"
            rows = early
        if self.holding is not None and rows.num_rows:
            rows, later = split_at_sn(rows, self.holding)
            if later.num_rows:  # (with their partition: ``InputEpisodes.caught_up``)
                self.corrections.append(later)
        out = rows.drop_columns([SRC])
        self.delivered += out.num_rows
        return Delivery(out, self.progress), acks

    def reads_from(self, p: int) -> str:
        """Where the output of last-stage partition ``p`` comes from, for a stall's report:
        the copy read, the copies acknowledged, and those still being rebuilt."""
        site = self.layout.table()[p]
        copy = int(self.cons.sender[0, p])
        if self.cons.race:
            raced = [f"copy {r} on site {int(site[r])}"
                     for r in np.flatnonzero(self.cons.ack_to[0, p] & self.cons.complete[p])]
            return (f"it races {', '.join(raced)}, taking each row from the first"
                    if raced else "no complete copy of it is left")
        text = f"it reads it from copy {copy} on site {int(site[copy])}"
        acked = [f"copy {r} on site {int(site[r])}"
                 for r in np.flatnonzero(self.cons.ack_to[0, p])]
        if acked:
            text += f" and acknowledges to {', '.join(acked)}"
        building = [f"{r}" for r in np.flatnonzero(~self.cons.complete[p])
                    if site[r] >= 0]
        if building:
            text += f"; copy {', '.join(building)} not yet folded in"
        return text

    def restore(self, cut: int) -> None:
        """A restart from a checkpoint cut at ``cut``: every row at or below it was delivered
        (the sinks committed them); the last stage's output above it comes next, and what a
        partition produces again at or below it is a duplicate, dropped."""
        streams = int(self.cons.sender.shape[1])
        self.cons.restore(0, ConsumerSnapshot(
            progress_sn=np.full(streams, cut, dtype=np.int64),
            progress_wm=np.full(streams, NO_WATERMARK, dtype=np.int64),
            released_sn=cut, released_wm=NO_WATERMARK, pending=None))
        self.progress = Progress(cut, NO_WATERMARK)

    def on_psync(self, msg: PSync) -> list[Outgoing]:
        """``psync`` from the survivor of a last-stage partition: acknowledge to its new
        replica from now on (FH-Cons fold-in)."""
        return self.cons.on_psync(msg)

    def on_fail(self, dead_sites: set[int]) -> list[Outgoing]:
        return self.cons.on_fail(self.layout.dead(dead_sites))

    def on_move(self, q: int, r: int, dst: int) -> list[Outgoing]:
        """Replica r of last-stage partition q moves to ``dst``: take over from it (``reverse``
        to the other replica if it was the one read from); ``psync`` after its catch-up makes
        the egress acknowledge to the new incarnation."""
        out = self.cons.on_fail(self.layout.only(q, r))
        self.layout.move(q, r, dst)
        self.cons.rebuilding(self.layout.only(q, r))
        return out

    def on_avail(self, slot: int) -> None:
        """A standby adopted ``slot``: its replicas start over empty until their ``psync``."""
        self.cons.rebuilding(self.layout.table() == slot)
