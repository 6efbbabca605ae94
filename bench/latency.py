"""Output latency per offered rate, with and without replication, in one run.

    .venv/bin/python bench/latency.py [--workloads q1 q5 netmon] [--rates 1000 10000 100000 0]
                                      [--modes none flux flux3] [--seconds 10] [--json F]
                                      [--max-batch-delay MS ...] [--kill]

In one Spark session, 4 sites and 32 partitions, each workload (``q1``: Nexmark Q1, a map;
``q5``: Nexmark Q5, hot auctions, a sliding-window count per auction and its max; ``netmon``:
``examples/netmon.py``) with the input held at each offered rate (records per second, for
``--seconds`` of input; 0: as fast as the dataflow takes it, ``--saturation-events``
records) under each mode (``none``: one copy; ``flux``: Flux-HA; ``flux3``: Flux-HA with 3
copies). Latency is from a record's admission by the ingress to its row's delivery to the
sink; a window's row is timed from its close (the newest record the window operator had
seen when the watermark passed the window's end), so it is the latency from the close.
Printed: p50 / p99 / p99.9 and the throughput per row, and whether every mode's rows at a
(workload, rate) are the same (rows digest).

``--max-batch-delay MS ...`` runs every mode once more per value, with the coalescing of
every hop capped there (the option of the same name), next to the defaults. ``--kill``
kills site 1 halfway through each replicated run's input (held rates only) and prints what
the fail-over cost: detection, the longest output gap within 5 s of the kill, the p99 from
0.5 s before to 3 s after it, and the run's longest gap and p99 to compare with.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.cli import run_args  # noqa: E402
from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES, PARTITIONS = 4, 32
NEXMARK = ROOT / "examples" / "nexmark" / "nexmark.py"
NETMON = ROOT / "examples" / "netmon.py"
MODES = {"none": {"ha": "none"}, "flux": {"ha": "flux"},
         "flux3": {"ha": "flux", "replicas": 3}}


def args_for(workload: str, events: int, rate: float | None, mode: str,
             delay: float | None = None, kill: bool = False) -> Any:
    common: dict[str, Any] = {"events": events, "sites": SITES, "partitions": PARTITIONS,
                              "rate": rate, "max_batch_delay": delay, **MODES[mode]}
    if kill:
        common["kill"] = [f"1@input+{events // 2}"]
    if workload == "netmon":
        return run_args(NETMON, **common)
    return run_args(NEXMARK, query=int(workload[1:]), **common)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--workloads", nargs="+", default=["q1", "q5", "netmon"])
    p.add_argument("--rates", nargs="+", type=float, default=[1_000, 10_000, 100_000, 0],
                   help="offered records/s; 0: as fast as taken")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--seconds", type=float, default=10.0, help="input per held rate")
    p.add_argument("--saturation-events", type=int, default=1_000_000)
    p.add_argument("--json", default=None)
    p.add_argument("--max-batch-delay", nargs="+", type=float, default=[], metavar="MS",
                   help="also run every mode with each of these caps (ms)")
    p.add_argument("--kill", action="store_true",
                   help="kill site 1 halfway through each replicated run at a held rate")
    a = p.parse_args()
    console = Console(width=150)
    modules = {w: load_example(NETMON if w == "netmon" else NEXMARK) for w in a.workloads}
    spark = spark_session(default_master(SITES + 1), "sparkflux-latency")
    rows: list[dict[str, Any]] = []
    delays: list[float | None] = [None, *a.max_batch_delay]
    total = len(a.workloads) * len(a.rates) * len(a.modes) * len(delays)
    kills: list[dict[str, Any]] = []
    for w in a.workloads:
        for rate in a.rates:
            events = int(rate * a.seconds) if rate else a.saturation_events
            for mode in a.modes:
                for delay in delays:
                    kill = a.kill and bool(rate) and mode != "none"
                    m = run_example(modules[w], args_for(w, events, rate or None, mode, delay,
                                                         kill),
                                    sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
                    label = mode if delay is None else f"{mode} <={delay:g}ms"
                    row = {"workload": w, "rate": rate, "mode": label, "events": events,
                           "p50": m["latency_p50_s"], "p99": m["latency_p99_s"],
                           "p999": m["latency_p999_s"], "tps": m["throughput_tps"],
                           "rows": m["output_tuples"], "digest": m["rows_digest"],
                           "gap": m["max_output_gap_s"]}
                    rows.append(row)
                    console.print(f"[{len(rows)}/{total}] {w} at "
                                  f"{f'{rate:,.0f}/s' if rate else 'saturation'} {label}: "
                                  f"p50 {row['p50'] * 1e3:,.1f} ms, p99 "
                                  f"{row['p99'] * 1e3:,.1f} ms, {row['tps']:,.0f} records/s")
                    for f in m["failures"] if kill else []:
                        kills.append({"workload": w, "rate": rate, "mode": label,
                                      "detected": f["detected_after_s"],
                                      "gap": f["max_output_gap_s"],
                                      "p99_around": f["latency_p99_s"], "p99": row["p99"]})
    t = Table(title=f"Latency from admission to the sink, {SITES} sites, {PARTITIONS} "
                    "partitions, loopback")
    for col in ("workload", "offered", "mode", "p50 ms", "p99 ms", "p99.9 ms", "longest gap ms",
                "records/s", "rows", "same rows"):
        t.add_column(col, justify="left" if col in ("workload", "offered", "mode") else "right")
    same = True
    for r in rows:
        peers = [q for q in rows if q["workload"] == r["workload"] and q["rate"] == r["rate"]]
        equal = all(q["digest"] == peers[0]["digest"] for q in peers)
        same = same and equal
        t.add_row(r["workload"], f"{r['rate']:,.0f}/s" if r["rate"] else "saturation",
                  r["mode"], f"{r['p50'] * 1e3:,.1f}", f"{r['p99'] * 1e3:,.1f}",
                  f"{r['p999'] * 1e3:,.1f}", f"{r['gap'] * 1e3:,.1f}", f"{r['tps']:,.0f}",
                  f"{r['rows']:,}",
                  "yes" if equal else "NO")
    console.print(t)
    if kills:
        k = Table(title="A kill of site 1 halfway through the input (the whole run's p99 and "
                        "gap include it)")
        for col in ("workload", "offered", "mode", "detected ms", "longest gap ms",
                    "p99 around ms", "run's p99 ms", "ratio"):
            k.add_column(col, justify="left" if col in ("workload", "offered", "mode")
                         else "right")
        for r in kills:
            k.add_row(r["workload"], f"{r['rate']:,.0f}/s", r["mode"],
                      f"{r['detected'] * 1e3:,.1f}", f"{r['gap'] * 1e3:,.1f}",
                      f"{r['p99_around'] * 1e3:,.1f}", f"{r['p99'] * 1e3:,.1f}",
                      f"{r['p99_around'] / r['p99']:.2f}" if r["p99"] else "-")
        console.print(k)
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": rows, "kills": kills}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
