"""A site squeezed short of memory (the thesis' memory experiment, in spirit): netmon with
``--ha flux`` on 4 sites at a steady rate, each site's budget ``--budget`` MB, site 2's budget
cut at ``--squeeze-at`` seconds to half of what its partitions' state and buffers took in a
first run. Three configurations, one after the other in one session:

- **no spilling**: no budget at all (what happens without spilling: the site simply holds
  more than the squeezed budget; its peak is printed);
- **spilling, no policy**: the squeeze, no balancing rounds (the thesis' static case: the
  squeezed site spills and rotates its partitions, and everything waits for them);
- **hybrid**: the squeeze with the hybrid policy (the default), which moves partitions off the
  squeezed site to sites with room.

For each: the input rate, p50 and p99 latency before and after the squeeze, per second around
it, how long after the squeeze the p99 latency came back within twice its value before (the
thesis' policy took 36 s), the longest output gap, the squeezed site's spills and loads, the
longest a spill or a load held up a site's other partitions (``memory_pause_max_s``), and
whether the output equals the Spark SQL reference.

    .venv/bin/python bench/memory.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median
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


def run(netmon: Any, args: Any, spark: Any, console: Console, **options: Any
        ) -> tuple[dict[str, Any], list[Any]]:
    """One run; its metrics and every progress interval."""
    query = sparkflux.start(netmon.build(netmon.options(args)), spark=spark, sites=4,
                            partitions=32, ha="flux", announce=None, **options)
    seen: dict[int, Any] = {}
    while not query.await_termination(0.5):
        for p in query.recent_progress:
            seen[p.id] = p
    for p in query.recent_progress:
        seen[p.id] = p
    return query.metrics, [seen[k] for k in sorted(seen)]


def latency(progress: list[Any], lo: float, hi: float) -> tuple[float | None, float | None]:
    p50 = [p.latency_p50_s for p in progress if lo <= p.elapsed_s < hi and p.latency_p50_s]
    p99 = [p.latency_p99_s for p in progress if lo <= p.elapsed_s < hi and p.latency_p99_s]
    return (median(p50) if p50 else None, median(p99) if p99 else None)


def back_after(progress: list[Any], at: float, limit: float) -> float | None:
    """Seconds after ``at`` from which every interval's p99 stays within ``limit``."""
    after = [p for p in progress if p.elapsed_s > at and p.latency_p99_s is not None]
    for i, p in enumerate(after):
        if all(x.latency_p99_s <= limit for x in after[i:-2] or [p]):
            return round(p.elapsed_s - at, 1)
    return None


def seconds(x: float | None) -> str:
    return "never" if x is None else f"{x} s"


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.0f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=4_000_000)
    p.add_argument("--rate", type=float, default=100_000.0)
    p.add_argument("--budget", type=float, default=16.0, help="MB per site")
    p.add_argument("--squeeze-at", type=float, default=10.0)
    a = p.parse_args()
    console = Console(width=max(Console().width, 132))
    parser, netmon = _example_parser("run", str(EXAMPLE))
    args = parser.parse_args([str(EXAMPLE), "--events", str(a.events)])
    spark = spark_session("local[6,400]")
    expected = example_reference(EXAMPLE, "--events", str(a.events), spark=spark)
    console.print(f"netmon {a.events:,} events at {a.rate:,.0f}/s, 4 sites, 32 partitions, "
                  f"--ha flux; reference {expected.rows:,} rows")

    m0, prog0 = run(netmon, args, spark, console, rate=a.rate)
    share = int(m0["site_load"]["2"]["memory_bytes_max"])
    squeeze_mb = share / 2 / (1 << 20)
    console.print(f"no spilling: site 2 held at most {share / (1 << 20):.2f} MB; the squeeze "
                  f"cuts its budget to half of that, {squeeze_mb:.2f} MB, at {a.squeeze_at} s")
    squeeze = [f"2@{a.squeeze_at:g}={squeeze_mb:.4f}"]
    runs = [("no spilling", m0, prog0)]
    t = time.time()
    m1, prog1 = run(netmon, args, spark, console, rate=a.rate, site_memory=a.budget,
                    squeeze=squeeze, balance=False)
    runs.append(("spilling, no policy", m1, prog1))
    m2, prog2 = run(netmon, args, spark, console, rate=a.rate, site_memory=a.budget,
                    squeeze=squeeze)
    runs.append(("hybrid policy", m2, prog2))
    console.print(f"(two squeezed runs in {time.time() - t:.0f} s)")

    table = Table(title="a site squeezed to half its share of memory")
    for col in ("configuration", "rate", "p50 / p99 before", "p50 / p99 after",
                "p99 back within 2x", "longest output gap", "site 2 spills / loads",
                "longest spill pause", "memory moves", "output"):
        table.add_column(col, justify="right")
    per_second = Table(title="p99 latency per second around the squeeze")
    per_second.add_column("s")
    for name, _, _ in runs:
        per_second.add_column(name, justify="right")
    for name, m, prog in runs:
        before = latency(prog, 2.0, a.squeeze_at)
        after = latency(prog, a.squeeze_at, float("inf"))
        limit = 2 * (before[1] or 0.05)
        site2 = m["site_load"]["2"]
        moves = sum(1 for mv in m["moves"] if mv.get("reason") == "memory")
        equal = (m["output_digest"], m["output_tuples"]) == (expected.output_digest,
                                                            expected.rows)
        table.add_row(name, f"{m['throughput_tps']:,.0f}/s",
                      f"{ms(before[0])} / {ms(before[1])}", f"{ms(after[0])} / {ms(after[1])}",
                      "-" if name == "no spilling" else
                      seconds(back_after(prog, a.squeeze_at, limit)),
                      f"{m['max_output_gap_s']:.2f} s",
                      f"{site2.get('spills', 0)} / {site2.get('loads', 0)}",
                      f"{1000 * pause(m):.0f} ms",
                      str(moves),
                      "[green]equal[/]" if equal else "[red]differs[/]")
    by_second = [{int(p.elapsed_s): p.latency_p99_s for p in prog} for _, _, prog in runs]
    for sec in range(int(a.squeeze_at) - 3, int(a.squeeze_at) + 25):
        per_second.add_row(str(sec), *(ms(b.get(sec)) for b in by_second))
    console.print(table)
    console.print(per_second)


def pause(m: dict) -> float:
    """The longest a spill or a load held up a site's other partitions, over the sites."""
    return max((s.get("memory_pause_max_s", 0.0) for s in m["site_load"].values()), default=0.0)


if __name__ == "__main__":
    main()
