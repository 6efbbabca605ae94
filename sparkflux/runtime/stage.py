"""One site's share of one stage: ordered merge -> operator chain.

Pure computation (no sockets): the site's event loop pushes decoded frames in and sends what
``route`` returns. Without replication (``--ha none``) a site runs all of its mini-partitions
of a stage behind one merge whose inputs are the producing *sites* (or the ingress): every
producer feeds every consumer partition, so all of a site's partitions share one frontier, and
one vectorized operator call per step serves them all (the thesis' operator *shell*, ch. 4).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import pyarrow as pa

from sparkflux.dataflow.plan import StagePlan
from sparkflux.model.batch import concat, sort_by_sn
from sparkflux.model.progress import OrderedMerge, Progress


class StageRunner:
    """Merge, process and report progress for one stage on one site."""

    def __init__(self, stage: StagePlan, inputs: Iterable[Hashable]) -> None:
        self.stage = stage
        self.merge = OrderedMerge(inputs, stage.input_schema)
        self.done = Progress()
        self.rows_in = 0
        self.rows_out = 0

    def push(self, producer: Hashable, batch: pa.RecordBatch | None, progress: Progress) -> None:
        self.merge.push(producer, batch, progress)

    def step(self) -> tuple[pa.RecordBatch, Progress] | None:
        """Process everything the frontier releases; None when nothing moved."""
        batch, frontier = self.merge.release()
        if batch.num_rows == 0 and frontier == self.done:
            return None
        self.rows_in += batch.num_rows
        progress = frontier
        for op in self.stage.operators:
            batch = op.process(batch)
            extra, progress = op.advance(progress)
            if extra.num_rows:
                batch = sort_by_sn(concat([batch, extra]))
        self.done = frontier
        self.rows_out += batch.num_rows
        return batch, progress
