"""A running query rescaled on a standalone cluster: netmon with ``--ha flux`` on 4 sites, as fast
as it goes (back-pressure, no pacing), grown to 6 sites at ``--grow-at`` seconds, a site's
Python worker SIGKILLed at ``--kill-at``, shrunk to 3 sites at ``--shrink-at``. Prints the input
rate on 4, on 6 and on 3 sites (the mean over the progress intervals of each phase), each
rescale's time and copies moved, and whether the output equals the Spark SQL reference.

    bash scripts/cluster.sh start 3 3          # 9 task slots: 6 sites, a standby, spare
    .venv/bin/python bench/rescale.py --master spark://127.0.0.1:7077
    bash scripts/cluster.sh stop

(``--master local[10,400]`` runs it in local mode, without the kill.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sparkflux  # noqa: E402
from sparkflux.cli import _example_parser  # noqa: E402
from sparkflux.runner import example_reference  # noqa: E402
from sparkflux.spark.launcher import spark_session  # noqa: E402

EXAMPLE = ROOT / "examples" / "netmon.py"


def phase_rate(progress: list[Any], start: float, end: float) -> float | None:
    """The mean input rate over the progress intervals wholly inside [start, end)."""
    rates = [p.input_rows_per_s for p in progress
             if p.elapsed_s - p.duration_s >= start and p.elapsed_s <= end
             and p.input_rows_per_s > 0]
    return mean(rates) if rates else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--master", required=True)
    p.add_argument("--events", type=int, default=12_000_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--grow-at", type=float, default=10.0)
    p.add_argument("--kill-at", type=float, default=22.0)
    p.add_argument("--shrink-at", type=float, default=30.0)
    a = p.parse_args()
    console = Console()
    parser, netmon = _example_parser("run", str(EXAMPLE))
    args = parser.parse_args([str(EXAMPLE), "--events", str(a.events)])
    spark = spark_session(a.master)
    kill = [] if a.master.startswith("local") else [f"python:1@{a.kill_at:g}"]
    query = sparkflux.start(netmon.build(netmon.options(args)), spark=spark, sites=4,
                            partitions=a.partitions, ha="flux", kill=kill,
                            rescale=[f"6@{a.grow_at:g}", f"3@{a.shrink_at:g}"],
                            announce=console.print)
    seen: dict[int, Any] = {}
    while not query.await_termination(0.5):
        for prog in query.recent_progress:
            seen[prog.id] = prog
    for prog in query.recent_progress:
        seen[prog.id] = prog
    progress = [seen[k] for k in sorted(seen)]
    m = query.metrics
    grown, shrunk = m["rescales"]
    events = [e for prog in progress for e in prog.events if e.kind == "rescale"]
    grown_at = events[0].at_s if events else a.grow_at
    shrunk_at = events[1].at_s if len(events) > 1 else a.shrink_at
    kill_at = a.kill_at if kill else a.shrink_at
    t = time.time()
    expected = example_reference(EXAMPLE, "--events", str(a.events), spark=spark)
    equal = (m["output_digest"], m["output_tuples"]) == (expected.output_digest, expected.rows)
    table = Table(title=f"netmon {a.events:,} events, {a.partitions} partitions, --ha flux, "
                        f"{a.master}")
    table.add_column("phase")
    table.add_column("input rate", justify="right")
    table.add_column("rescale", justify="right")
    for name, lo, hi, r in [("4 sites", 0.0, a.grow_at, None),
                            ("6 sites", grown_at, kill_at, grown),
                            ("3 sites", shrunk_at, float("inf"), shrunk)]:
        rate = phase_rate(progress, lo, hi)
        table.add_row(name, f"{rate:,.0f} rows/s" if rate else "-",
                      "" if r is None else f"{r['seconds']} s, {r['moves']} copies moved"
                      + (f", retired {r['retired']}" if r["retired"] else ""))
    console.print(table)
    console.print(f"kills {m['kills']}, failures {[f['site'] for f in m['failures']]}, "
                  f"adoptions {[x['slot'] for x in m['adoptions']]}")
    console.print(f"output {m['output_tuples']:,} rows, digest {m['output_digest'][:16]}…: "
                  f"{'[green]equal to' if equal else '[red]differs from'}[/] the reference "
                  f"({time.time() - t:.0f} s)")
    sys.exit(0 if equal else 1)


if __name__ == "__main__":
    main()
