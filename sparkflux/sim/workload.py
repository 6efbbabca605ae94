"""A small, output-rich workload for the simulator: sessions over a tiny key space.

The network-monitoring shape (exchange(src,dst) -> sessions -> exchange(app,src) -> count
window, plus a filter in the ingress) with few keys and a short session lag, so that a few
hundred events exercise every operator, every exchange and every survival case, and one seed
runs in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.random import counter_random
from sparkflux.operators.count_window import CountWindowAggregate
from sparkflux.operators.session import SessionReconstruction
from sparkflux.operators.stateless import Filter, Map

SCHEMA = pa.schema([pa.field("src", pa.int32(), nullable=False),
                    pa.field("dst", pa.int32(), nullable=False),
                    pa.field("kind", pa.int8(), nullable=False),
                    pa.field("ts", pa.int64(), nullable=False),
                    pa.field("app", pa.int32(), nullable=False)])


class TinySessions(Source):
    schema = SCHEMA
    event_time = "ts"

    def __init__(self, events: int, batch: int, seed: int = 1, lag: int = 6) -> None:
        self.events, self.batch, self.seed, self.lag = events, batch, seed, lag

    def batches(self) -> Iterator[pa.RecordBatch]:
        for start in range(0, self.events, self.batch):
            yield self.generate(start, min(self.batch, self.events - start))

    def generate(self, start: int, count: int) -> pa.RecordBatch:
        n = np.arange(start, start + count, dtype=np.int64)
        end = (n & 1).astype(bool)
        session = np.where(end, (n - 1) // 2 - self.lag, n // 2)
        pair = counter_random(self.seed, 1, session) % np.uint64(24)
        app = counter_random(self.seed, 2, n) % np.uint64(3)
        return pa.RecordBatch.from_arrays([
            pa.array((pair // np.uint64(4)).astype(np.int32)),
            pa.array((pair % np.uint64(4)).astype(np.int32)),
            pa.array(end.astype(np.int8)),
            pa.array(n * 5),
            pa.array(app.astype(np.int32)),
        ], schema=SCHEMA)


def tiny_plan(events: int = 400, batch: int = 40, sites: int = 4, partitions: int = 8,
              seed: int = 1) -> tuple[PhysicalPlan, list[pa.RecordBatch]]:
    src = TinySessions(events, batch, seed)
    df = Dataflow("tiny")
    (df.source(src, name="events")
       .apply(Filter(pc.field("dst") != 3), name="drop_dst3")
       .exchange(by=["src", "dst"])
       .apply(Map(lambda b: {"app": pc.add(b.column("app"), 1)},
                  [pa.field("app", pa.int32())]), name="bump")
       .apply(SessionReconstruction(key=["src", "dst"], kind="kind", start=0, end=1, time="ts",
                                    carry=["app", "src"]), name="sessions")
       .exchange(by=["app", "src"])
       .apply(CountWindowAggregate(by=["app", "src"], value="dur", history=3, slide=1, every=2,
                                   aggs={"mx": "max", "n": "count", "avg": "avg"}),
              name="stats")
       .sink())
    return compile_plan(df, partitions, sites), list(src.batches())
