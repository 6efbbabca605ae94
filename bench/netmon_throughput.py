"""Unreplicated throughput of the network-monitoring dataflow at 1, 2 and 4 sites.

    .venv/bin/python bench/netmon_throughput.py [--events 1000000] [--repeat 1] [--json PATH]

Runs the example back to back in one Spark session (the source as fast as the dataflow
accepts: back-pressure) and prints input tuples/s per site count and the ratios to 1 site.
All sites share this machine's cores, so the ratios show the runtime's overhead and
parallelism on those cores, not a cluster's scale-out.
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

from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402


def args_for(events: int, sites: int, partitions: int, cpu_work: bool) -> argparse.Namespace:
    return argparse.Namespace(
        events=events, batch_size=8192, seed=7, cpu_work=cpu_work, bad_every=0, sites=sites,
        partitions=partitions, ha="none", master=None, rate=None, ingress_buffer=200_000,
        window=300_000, output=None, dead_letter=None, kill=[],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--sites", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--cpu-work", action="store_true")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console()
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(max(a.sites)))
    results: dict[int, list[float]] = {}
    digests: set[str] = set()
    for n in a.sites:
        for r in range(a.repeat):
            res = run_example(module, args_for(a.events, n, a.partitions, a.cpu_work),
                              sink=NullSink(), dead=DeadLetters(),
                              spark=spark)
            tps = res.metrics["throughput_tps"]
            digests.add(res.metrics["output_digest"])
            results.setdefault(n, []).append(tps)
            console.print(f"sites={n} run {r + 1}: {tps:,.0f} tuples/s "
                          f"(p99 latency {res.metrics['latency_p99_s'] * 1000:.0f} ms)")
    base = statistics.median(results[a.sites[0]])
    t = Table(title=f"netmon --ha none, {a.events:,} events, {a.partitions} partitions")
    t.add_column("sites")
    t.add_column("input tuples/s (median)", justify="right")
    t.add_column(f"ratio to {a.sites[0]} site(s)", justify="right")
    out = {}
    for n in a.sites:
        med = statistics.median(results[n])
        out[n] = {"tps": med, "runs": results[n], "ratio": med / base}
        t.add_row(str(n), f"{med:,.0f}", f"{med / base:.2f}")
    console.print(t)
    console.print(f"all runs produced the same output digest: {len(digests) == 1}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
