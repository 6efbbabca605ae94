"""How much of the driver the input takes: the netmon dataflow at 4 unreplicated sites, fed
as fast as it accepts from its own generator, from a directory of Parquet files read by the
driver (``FileStreamSource``), from the same files read on the sites (``read_on="sites"``:
the driver deals chunks, the rows never reach it) and from a Spark DataFrame
(``DataFrameSource``), through the driver and written on the executors for the sites to
read, in one Spark session.

    .venv/bin/python bench/driver_input.py [--events 1000000] [--per-file 50000] [--json PATH]

Sources run in the driver, and so do the ingress (numbering, routing, sending every row to
every first-stage replica) and the egress; a source read on the sites leaves the driver the
footers, the event-time column and one record per chunk. Per configuration it prints the
input rate, the driver process's CPU share of the run (``driver_cpu_share``: every thread of
the driver's Python process; near 1.0 the driver, one core under Python's GIL, is what limits
the rate), the driver's CPU time per input row, the records its ingress numbered, and the
sites' mean busy fraction. All read the same events, so their output digests must agree, and
the bench says so. The sites share this machine's cores with the driver, so the figures say
where the driver's ceiling lies relative to the sites, not a cluster's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import track
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.dataflow.api import Source  # noqa: E402
from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io import DataFrameSource, FileStreamSource  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402


def args_for(events: int, sites: int, partitions: int) -> argparse.Namespace:
    return argparse.Namespace(
        events=events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, sites=sites,
        partitions=partitions, ha="none", master=None, rate=None, ingress_buffer=200_000,
        window=300_000, output=None, dead_letter=None, kill=[])


def with_source(module: Any, source: Source | None) -> Any:
    """The netmon example with ``source`` in place of its generator (None: its own)."""
    if source is None:
        return module
    return SimpleNamespace(options=module.options, __file__=module.__file__,
                           build=lambda opts: module.build(opts, source=source))


def write_files(module: Any, events: int, per_file: int, d: Path) -> None:
    """The generator's events as Parquet files in name order, and the end marker."""
    for i, start in enumerate(track(range(0, events, per_file), description="writing files",
                                    transient=True)):
        batch = module.generate(start, min(per_file, events - start))
        pq.write_table(pa.Table.from_batches([batch]), d / f"part-{i:05d}.parquet")
    (d / "_DONE").touch()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--per-file", type=int, default=50_000)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console(width=max(Console().width, 132))
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(a.sites + 1))  # DataFrameSource: one slot more
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        inbox = Path(tmp) / "inbox"
        inbox.mkdir()
        write_files(module, a.events, a.per_file, inbox)
        frame = spark.read.parquet(str(inbox))
        configs: list[tuple[str, Source | None]] = [
            ("generator", None),
            ("Parquet files", FileStreamSource(inbox, module.SCHEMA, event_time="ts",
                                               end_marker="_DONE", batch_size=8192)),
            ("Parquet files, read on the sites",
             FileStreamSource(inbox, module.SCHEMA, event_time="ts", end_marker="_DONE",
                              read_on="sites")),
            ("DataFrame", DataFrameSource(frame, order_by="ts", schema=module.SCHEMA,
                                          event_time="ts", batch_size=8192)),
            ("DataFrame, read on the sites",
             DataFrameSource(frame, order_by="ts", schema=module.SCHEMA, event_time="ts",
                             read_on="sites", staging=Path(tmp) / "staging")),
        ]
        for name, source in configs:
            console.print(f"[dim]running netmon from {name}...[/]")
            m = run_example(with_source(module, source), args_for(a.events, a.sites,
                                                                  a.partitions),
                            sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
            util = list(m["utilisation"].values())
            rows.append({"source": name, "input_tuples": m["input_tuples"],
                         "ingress_records": m["ingress_records"],
                         "throughput_tps": m["throughput_tps"],
                         "driver_cpu_share": m["driver_cpu_share"],
                         # the driver's CPU time per input row, whatever the rate
                         "driver_cpu_us_per_row": round(m["driver_cpu_share"] * m["duration_s"]
                                                        / m["input_tuples"] * 1e6, 2),
                         "site_busy_mean": round(sum(util) / len(util), 3) if util else None,
                         "output_digest": m["output_digest"]})
    table = Table(title=f"netmon, {a.sites} sites, --ha none, {a.events:,} events, unpaced")
    for col in ("source", "input rows/s", "vs generator", "driver CPU share",
                "driver CPU µs/row", "ingress records", "sites busy (mean)"):
        table.add_column(col, justify="left" if col == "source" else "right")
    base = rows[0]["throughput_tps"]
    for r in rows:
        table.add_row(r["source"], f"{r['throughput_tps']:,.0f}",
                      f"{r['throughput_tps'] / base:.2f}", f"{r['driver_cpu_share']}",
                      f"{r['driver_cpu_us_per_row']}", f"{r['ingress_records']:,}",
                      f"{r['site_busy_mean']}")
    console.print(table)
    digests = {r["output_digest"] for r in rows}
    same = len(digests) == 1 and all(r["input_tuples"] == a.events for r in rows)
    console.print("output digests: " + ("all equal" if same else f"DIFFER: {digests}"))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
