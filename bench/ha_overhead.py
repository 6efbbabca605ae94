"""What Flux-HA costs: throughput with and without replication, and what a failure costs.

    .venv/bin/python bench/ha_overhead.py [--events 1000000] [--repeat 2] [--plot PNG]

In one Spark session: (1) ``--ha none`` and ``--ha flux`` on the same input as fast as the
dataflow accepts, alternated, and their ratio (the paper: 36K vs 82K tuples/s, 0.44);
(2) ``--ha flux`` with the input held at ``--rate`` while a site is SIGKILLed, and the output
gap and p99 latency around the kill (target: no gap above 0.2 s). Every run's output digest
must equal the others' (the failure run's too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.cli import run_example  # noqa: E402
from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.runtime.plot import plot_timeline  # noqa: E402
from sparkflux.runtime.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402


def args_for(events: int, ha: str, rate: float | None = None,
             kill: list[str] | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        events=events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, sites=4,
        partitions=32, ha=ha, master=None, rate=rate, ingress_buffer=200_000, window=400_000,
        output=None, dead_letter=None, kill=kill or [], heartbeat_timeout=10.0,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rate", type=float, default=100_000)
    p.add_argument("--kill-events", type=int, default=800_000)
    p.add_argument("--plot", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console()
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(5))
    tps: dict[str, list[float]] = {"none": [], "flux": []}
    digests = set()

    def run(args: argparse.Namespace):  # noqa: ANN202
        return run_example(module, args, show_progress=False, sink=NullSink(),
                           dead=DeadLetters(), spark=spark)

    for r in range(a.repeat):
        for ha in ("none", "flux"):
            res = run(args_for(a.events, ha))
            tps[ha].append(res.metrics["throughput_tps"])
            digests.add(res.metrics["output_digest"])
            console.print(f"run {r + 1} --ha {ha}: {res.metrics['throughput_tps']:,.0f} tuples/s")
    ratios = [f / n for f, n in zip(tps["flux"], tps["none"], strict=True)]
    t = Table(title=f"netmon, {a.events:,} events, 4 sites, 32 partitions, back-pressure")
    t.add_column("mode")
    t.add_column("input tuples/s (median)", justify="right")
    t.add_row("--ha none", f"{statistics.median(tps['none']):,.0f}")
    t.add_row("--ha flux", f"{statistics.median(tps['flux']):,.0f}")
    t.add_row("flux / none", f"{statistics.median(ratios):.2f} (paper: 0.44)")
    console.print(t)

    res = run(args_for(a.kill_events, "flux", rate=a.rate, kill=["1@3"]))
    m = res.metrics
    f = m["failures"][0]
    k = Table(title=f"--ha flux at {a.rate:,.0f} events/s, site 1 SIGKILLed at 3 s")
    k.add_column("figure")
    k.add_column("value", justify="right")
    k.add_row("failure detected after", f"{f['detected_after_s'] * 1000:.0f} ms")
    k.add_row("longest output gap around the kill", f"{f['max_output_gap_s'] * 1000:.0f} ms")
    k.add_row("p99 latency around the kill", f"{f['latency_p99_s'] * 1000:.0f} ms")
    k.add_row("p99 latency, whole run", f"{m['latency_p99_s'] * 1000:.0f} ms")
    k.add_row("input dropped at the ingress", f"{m['ingress_dropped']:,}")
    console.print(k)
    if a.plot:
        plot_timeline(a.plot, res.timeline, res.ingress_timeline, res.events,
                      "netmon --ha flux, 4 sites, site 1 killed at 3 s")
        console.print(f"timeline drawn to {a.plot}")
    out = {"tps": tps, "ratio_median": statistics.median(ratios), "kill": m}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2, default=str))
    same = len(digests) == 1
    console.print(f"all back-pressure runs produced the same output digest: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
