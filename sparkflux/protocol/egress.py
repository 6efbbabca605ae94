"""The egress (SIGMOD §3): receives the last stage's output and delivers it in order, once.

Every site sends its share of the last stage with progress markers; the egress merges them in
SN order up to the minimum progress and hands the released rows to the sink. Without
replication there is one copy of each partition, so nothing needs filtering.
"""

from __future__ import annotations

import pyarrow as pa

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.progress import OrderedMerge, Progress
from sparkflux.protocol.actions import Deliver


class Egress:
    def __init__(self, plan: PhysicalPlan) -> None:
        self.schema = plan.output_schema
        self.merge = OrderedMerge(range(plan.sites), self.schema)
        self.delivered = 0
        self.progress = Progress()

    @property
    def ended(self) -> bool:
        return self.progress.ended

    def on_data(
        self, site: int, batch: pa.RecordBatch | None, progress: Progress
    ) -> Deliver | None:
        self.merge.push(site, batch, progress)
        out, frontier = self.merge.release()
        if out.num_rows == 0 and frontier == self.progress:
            return None
        self.progress = frontier
        self.delivered += out.num_rows
        return Deliver(batch=out, progress=frontier)
