"""Three sensor streams through a chain of stages: the dataflow of the tentative-results
experiment (``bench/tentative.py``, docs/availability.md).

    temperature --+
    humidity    --+-- union --exchange(sensor)--> hop 1 --exchange(h1)--> hop 2 ... --> sink
    pressure    --+

Each source brings ``--events`` readings ``(sensor, value, ts)``: reading ``n`` of stream
``k`` at ``ts = 30 n + 10 k`` ms, so the three streams' event times interleave and SUnion
merges them one reading at a time. Each of the ``--stages`` hops (1 to 4) is a stage of its
own: it exchanges the readings by a key of its own (the sensor for the first, the previous
hop's column after) and adds a column ``h{i} = (value * (2 i + 1) + sensor) mod 997``. The
output is every reading with its hops' columns: a row leaves as soon as it arrives, so its
latency is the chain's, and a cut source shows at once.

``--work-us W`` makes each hop cost W microseconds of CPU per row (a busy loop: the columns
do not change), to model an operator whose redo of a long backlog takes seconds, as the
paper's did; 0 (the default) is the bare map.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.model.random import counter_random
from sparkflux.operators.stateless import Map

SENSORS, STEP_MS = 100, 30
STREAMS = ("temperature", "humidity", "pressure")

READINGS = pa.schema([pa.field("sensor", pa.int32(), nullable=False),
                      pa.field("value", pa.int64(), nullable=False),
                      pa.field("ts", pa.int64(), nullable=False)])


@dataclass(frozen=True)
class SensorsOptions:
    events: int = 100_000  # per stream
    seed: int = 5
    stages: int = 1
    batch: int = 4096
    work_us: float = 0.0  # CPU per row per hop


def readings(stream: int, start: int, count: int, seed: int) -> pa.RecordBatch:
    n = np.arange(start, start + count, dtype=np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array((counter_random(seed, 10 + stream, n) % np.uint64(SENSORS)).astype(np.int32)),
        pa.array((counter_random(seed, 20 + stream, n) % np.uint64(10_000)).astype(np.int64)),
        pa.array(n * STEP_MS + 10 * stream)], schema=READINGS)


class Readings(Source):
    schema = READINGS
    event_time = "ts"

    def __init__(self, o: SensorsOptions, stream: int) -> None:
        self.o = o
        self.stream = stream

    def total(self) -> int:
        return self.o.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        o = self.o
        for start in range(0, o.events, o.batch):
            yield readings(self.stream, start, min(o.batch, o.events - start), o.seed)


class Hop:
    """Hop ``i``'s column: ``(value * (2 i + 1) + sensor) mod 997``, at ``work_us`` of CPU
    per row."""

    def __init__(self, i: int, work_us: float = 0.0) -> None:
        self.i = i
        self.work_us = work_us

    def __call__(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        if self.work_us > 0 and batch.num_rows:
            until = time.perf_counter() + batch.num_rows * self.work_us * 1e-6
            while time.perf_counter() < until:
                pass
        value = batch.column("value").to_numpy()
        sensor = batch.column("sensor").to_numpy().astype(np.int64)
        return {f"h{self.i}": (value * (2 * self.i + 1) + sensor) % 997}


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=5, help="workload seed")
    parser.add_argument("--stages", type=int, default=1, choices=(1, 2, 3, 4),
                        help="hops in the chain, each a stage")
    parser.add_argument("--work-us", type=float, default=0.0,
                        help="CPU microseconds per row per hop (a modelled operator cost)")


def options(args: argparse.Namespace) -> SensorsOptions:
    if args.work_us < 0:
        raise SystemExit(f"--work-us must be 0 or more, not {args.work_us:g}")
    return SensorsOptions(events=args.events, seed=args.seed, stages=args.stages,
                          work_us=args.work_us)


def build(o: SensorsOptions) -> Dataflow:
    df = Dataflow(f"sensors_{o.stages}")
    a, b, c = (df.source(Readings(o, k), name=name) for k, name in enumerate(STREAMS))
    stream = a.union(b, c)
    key = "sensor"
    for i in range(1, o.stages + 1):
        stream = stream.exchange(by=[key]).apply(
            Map(Hop(i, o.work_us), [pa.field(f"h{i}", pa.int64(), nullable=False)]), name=f"hop{i}")
        key = f"h{i}"
    stream.sink(name="out")
    return df


def reference(spark, o: SensorsOptions):  # noqa: ANN001, ANN201 (pyspark types optional)
    """Every reading with its hops' columns, in Spark SQL."""
    from pyspark.sql import functions as F

    frames = [spark.createDataFrame(pa.Table.from_batches(
        [readings(k, 0, o.events, o.seed)]).to_pandas()) for k in range(len(STREAMS))]
    out = frames[0].unionByName(frames[1]).unionByName(frames[2])
    for i in range(1, o.stages + 1):
        out = out.withColumn(f"h{i}", ((F.col("value") * (2 * i + 1) + F.col("sensor"))
                                       % 997).cast("long"))
    return out
