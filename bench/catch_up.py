"""Catch-up: state-transfer throughput, catch-up time and output gap against state size.

    .venv/bin/python bench/catch_up.py [--sizes 10 100 500] [--rate 50000]

For each size, a keyed store (the latest 1 KB payload per key: session state of the kind a
packet-reassembly stage keeps) is filled to that many MB per dataflow copy, with the input
paced at ``--rate``; then site 1 is SIGKILLed, Spark restarts its task, the restarted task
adopts the slot as a standby and its 16 partition replicas are caught up one at a time while
the input keeps flowing. The run's output must equal the same run without a failure (the
store emits (key, payload length) for every input). Printed per size: state moved, catch-up
time, the StateMover's transfer throughput (bytes over the time from the first write of a
partition's state to its drained socket), the all-in catch-up throughput (bytes over the
whole per-partition catch-up: retain round trip, snapshot, transfer, install, fold-in), and
the longest output gap during catch-up and around the kill.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from sparkflux.dataflow.api import Dataflow, Source  # noqa: E402
from sparkflux.dataflow.compiler import compile_plan  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.model.random import counter_random  # noqa: E402
from sparkflux.model.schema import PART, SN, SNM, T0  # noqa: E402
from sparkflux.operators.base import Operator, PartitionInfo  # noqa: E402
from sparkflux.runtime.fault_specs import KillAt  # noqa: E402
from sparkflux.runtime.run_config import RunConfig  # noqa: E402
from sparkflux.spark.job import run  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

PAYLOAD = 1024


class Updates(Source):
    """Events 0..keys-1 insert distinct keys; later events update random existing keys."""

    schema = pa.schema([pa.field("key", pa.int64(), nullable=False),
                        pa.field("payload", pa.binary(), nullable=False)])

    def __init__(self, keys: int, events: int, batch: int = 4096) -> None:
        self.keys, self.events, self.batch = keys, events, batch

    def total(self) -> int:
        return self.events

    def batches(self) -> Iterator[pa.RecordBatch]:
        blob = np.frombuffer(np.random.default_rng(1).bytes(PAYLOAD * 64), dtype=np.uint8)
        for start in range(0, self.events, self.batch):
            n = np.arange(start, min(start + self.batch, self.events), dtype=np.int64)
            key = np.where(n < self.keys, n,
                           (counter_random(3, 1, n) % np.uint64(self.keys)).astype(np.int64))
            offs = np.arange(n.size + 1, dtype=np.int32) * PAYLOAD
            data = np.resize(blob, n.size * PAYLOAD)
            payload = pa.BinaryArray.from_buffers(pa.binary(), n.size, [None, pa.py_buffer(offs),
                                                                          pa.py_buffer(data)])
            yield pa.RecordBatch.from_arrays([pa.array(key), payload], schema=self.schema)


class KeyedStore(Operator):
    """Keeps the latest payload of every key; emits (key, payload length) for each input."""

    stateful = True

    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[int, dict[int, bytes]] = {}

    def _bind(self, s: pa.Schema) -> pa.Schema:
        return pa.schema([pa.field("key", pa.int64()), pa.field("size", pa.int32()),
                          pa.field(SN, pa.int64(), nullable=False),
                          pa.field(SNM, pa.int64(), nullable=False),
                          pa.field(T0, pa.float64(), nullable=False),
                          pa.field(PART, pa.int32(), nullable=False)])

    def process(self, b: pa.RecordBatch) -> pa.RecordBatch:
        keys = b.column("key").to_pylist()
        parts = b.column(PART).to_pylist()
        payloads = b.column("payload").to_pylist()
        for k, p, v in zip(keys, parts, payloads, strict=True):
            self.parts.setdefault(p, {})[k] = v
        sizes = pa.compute.binary_length(b.column("payload"))
        return pa.RecordBatch.from_arrays(
            [b.column("key"), sizes, b.column(SN), b.column(SNM), b.column(T0), b.column(PART)],
            schema=self.output_schema)

    def get_partition_state(self, part: int) -> Any:
        d = self.parts.get(part, {})
        return pa.table({"key": pa.array(list(d), pa.int64()),
                         "payload": pa.array(list(d.values()), pa.binary())})

    def install_partition_state(self, part: int, state: Any) -> None:
        self.parts[part] = dict(zip(state.column("key").to_pylist(),
                                    state.column("payload").to_pylist(), strict=True))

    def partition_info(self) -> list[PartitionInfo]:
        return [PartitionInfo(p, len(d), len(d) * (PAYLOAD + 8)) for p, d in self.parts.items()]


def plan_for(keys: int, events: int) -> Any:
    df = Dataflow("store")
    df.source(Updates(keys, events), name="updates").exchange(by=["key"]).apply(
        KeyedStore(), name="store").sink()
    return compile_plan(df, 32, 4)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 500])
    p.add_argument("--rate", type=float, default=50_000)
    p.add_argument("--after", type=float, default=6.0, help="seconds of input after the kill")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console()
    spark = spark_session(default_master(5))
    rows = []
    for mb in a.sizes:
        keys = mb * 1_000_000 // PAYLOAD
        fill = keys / a.rate
        events = keys + int(a.rate * (a.after + 1.0))
        kill_at = fill + 1.0
        cfg = dict(sites=4, partitions=32, ha="flux", rate=a.rate, window=400_000,
                   ingress_buffer=max(200_000, int(a.rate * 4)))
        base = run(plan_for(keys, events), RunConfig(**cfg), NullSink(), DeadLetters(),
                   spark=spark).metrics
        m = run(plan_for(keys, events), RunConfig(**cfg, kills=(KillAt(1, kill_at),)), NullSink(),
                DeadLetters(), spark=spark).metrics
        rec = m["recoveries"]
        moved = sum(r["state_bytes"] for r in rec)
        busy = sum(r["duration_s"] for r in rec)
        moving = sum(r["state_move_s"] for r in rec)
        span = (max(r["started_at_s"] + r["duration_s"] for r in rec)
                - min(r["started_at_s"] for r in rec)) if rec else 0.0
        row = {
            "state_mb_per_copy": mb, "moved_mb": moved / 1e6, "replicas": len(rec),
            "catch_up_s": span, "transfer_mb_s": moved / 1e6 / moving if moving else 0.0,
            "catch_up_mb_s": moved / 1e6 / busy if busy else 0.0,
            "largest_partition_mb": max((r["state_bytes"] for r in rec), default=0) / 1e6,
            "gap_during_catch_up_s": max((r["output_gap_s"] for r in rec), default=0.0),
            "gap_around_kill_s": m["failures"][0]["max_output_gap_s"] if m["failures"] else None,
            "dropped": m["ingress_dropped"],
            "same_output": m["output_digest"] == base["output_digest"],
        }
        rows.append(row)
        console.print(row)
    t = Table(title=f"catch-up of site 1 (16 partition replicas), input at {a.rate:,.0f}/s")
    for col in ("state MB/copy", "moved MB", "catch-up s", "StateMover MB/s",
                "catch-up MB/s (all-in)", "max gap in catch-up", "gap at kill", "dropped",
                "output = no-failure run"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["state_mb_per_copy"]), f"{r['moved_mb']:.1f}", f"{r['catch_up_s']:.2f}",
                  f"{r['transfer_mb_s']:.0f}", f"{r['catch_up_mb_s']:.0f}",
                  f"{r['gap_during_catch_up_s'] * 1000:.0f} ms",
                  f"{(r['gap_around_kill_s'] or 0) * 1000:.0f} ms", str(r["dropped"]),
                  str(r["same_output"]))
    console.print(t)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["same_output"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
