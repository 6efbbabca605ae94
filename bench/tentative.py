"""Tentative results under a cut input (the Borealis experiment, its Figures 3 and 4): three
sensor streams (``examples/sensors.py``), one of them cut off for ``--cut`` seconds,
through chains of 1 to 4 stages, each partition with two copies (``--ha flux``), a delay
bound of ``--max-delay`` seconds.

For each chain length it runs ``--consistency strict`` and ``--consistency eventual`` with
each ``--tentative-mode`` (``process``, ``delay``, ``suspend``) on the same input at the
same rate, and prints per run: the longest a row took to reach the output the first time
(``max_processing_delay_s``: tentative rows, stable rows that are not corrections, and the
corrections of input never sent tentatively; for strict, the longest latency), whether
that is within the paper's bound of k X for a chain of k stages, the tentative rows, the
corrections, the seconds each stage spent in stabilization, the longest stretch without
stable output and without any output (tentative rows counted), and whether the stable
output equals the Spark SQL reference. The bound of a chain of k stages is k X on top of
the chain's own latency: the longest a row took in a run of the same input without the cut
(a maximum is compared with a maximum).

``--work-us W`` gives every stage's operator W microseconds of CPU per row: with the bare
map the redo of a 15 s backlog takes a fraction of a second per stage, so suspending costs
little; the paper's operators took seconds to redo it, which is what separates the modes.

    .venv/bin/python bench/tentative.py                # the paper's 15 s cut
    .venv/bin/python bench/tentative.py --cut 5 --chains 1 2
    .venv/bin/python bench/tentative.py --rate 2000 --work-us 40   # a costly operator
    .venv/bin/python bench/tentative.py --chains 1 --modes process delay --repeat 5

``--repeat N`` runs the chain without the cut and each configuration N times, interleaved
(one of each, then again), and prints the median of each figure with its range: one run's
longest latency moves by tenths of a second between runs, more than the modes differ by at
one stage.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sparkflux  # noqa: E402
from sparkflux.cli import _example_parser  # noqa: E402
from sparkflux.runner import example_reference  # noqa: E402
from sparkflux.spark.launcher import spark_session  # noqa: E402

EXAMPLE = ROOT / "examples" / "sensors.py"
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("strict", "strict", {}),
    ("process", "process without delay",
     {"consistency": "eventual", "tentative_mode": "process"}),
    ("delay", "delay as much as possible",
     {"consistency": "eventual", "tentative_mode": "delay"}),
    ("suspend", "suspend while reconciling",
     {"consistency": "eventual", "tentative_mode": "suspend"}),
]


def run(sensors: Any, args: Any, spark: Any, **options: Any) -> dict[str, Any]:
    query = sparkflux.start(sensors.build(sensors.options(args)), spark=spark, sites=4,
                            partitions=16, ha="flux", announce=None, **options)
    query.await_termination()
    return query.metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=6_000.0, help="records/s, all streams")
    p.add_argument("--cut", type=float, default=15.0, help="seconds the stream is cut")
    p.add_argument("--cut-at", type=float, default=3.0, help="seconds into the input")
    p.add_argument("--after", type=float, default=6.0, help="seconds of input after the heal")
    p.add_argument("--max-delay", type=float, default=0.25, help="X, seconds")
    p.add_argument("--chains", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--work-us", type=float, default=0.0,
                   help="CPU microseconds per row per stage (the operator's cost)")
    p.add_argument("--modes", nargs="+", default=[key for key, _, _ in CONFIGS],
                   choices=[key for key, _, _ in CONFIGS], help="configurations to run")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of each configuration, interleaved; medians are printed")
    a = p.parse_args()
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    console = Console(width=max(Console().width, 132))
    seconds = a.cut_at + a.cut + a.after
    events = int(a.rate * seconds / 3)  # per stream
    spark = spark_session("local[6,400]")
    runs = "" if a.repeat == 1 else f", median (range) of {a.repeat} runs"
    table = Table(title=f"one of three streams cut for {a.cut:g} s at {a.cut_at:g} s, "
                        f"{a.rate:,.0f} records/s, X = {a.max_delay:g} s, {a.work_us:g} us per row "
                        f"per stage, 4 sites, 2 copies{runs}")
    for col in ("stages", "configuration", "max processing delay", "within the bound",
                "tentative rows", "corrections", "stabilization per stage",
                "longest gap: stable / any output", "stable output"):
        table.add_column(col, justify="right")
    configs = [c for c in CONFIGS if c[0] in a.modes]
    for stages in a.chains:
        parser, sensors = _example_parser("run", str(EXAMPLE))
        argv = [str(EXAMPLE), "--events", str(events), "--stages", str(stages),
                "--work-us", str(a.work_us)]
        args = parser.parse_args(argv)
        expected = example_reference(EXAMPLE, *argv[1:], spark=spark)
        owns: list[float] = []
        results: dict[str, list[dict[str, Any]]] = {key: [] for key, _, _ in configs}
        for i in range(a.repeat):
            # the chain's own latency, without the cut: the bound is k X on top of it, the
            # longest against the longest (the measure is a maximum)
            base = run(sensors, args, spark, rate=a.rate)
            owns.append(float(base["latency_max_s"]))
            console.print(f"{stages} stage(s) without the cut ({i + 1}/{a.repeat}): latency "
                          f"p99 {float(base['latency_p99_s']):.3f} s, longest {owns[-1]:.3f} s")
            for key, name, extra in configs:
                t = time.time()
                eventual = {"max_delay": a.max_delay, **extra} if extra else {}
                m = run(sensors, args, spark, rate=a.rate,
                        cut_source=[f"humidity@{a.cut_at:g}+{a.cut:g}"], **eventual)
                m["_delay"] = m.get("max_processing_delay_s", max_latency(m))
                m["_equal"] = (m["rows_digest"], m["output_tuples"]) == (expected.rows_digest,
                                                                        expected.rows)
                results[key].append(m)
                console.print(f"{stages} stage(s), {name} ({i + 1}/{a.repeat}): "
                              f"{time.time() - t:.0f} s, max delay {m['_delay']:.2f} s, "
                              f"{m.get('tentative_rows', 0):,} tentative rows, "
                              f"{'equal' if m['_equal'] else 'DIFFERS'}")
        own = statistics.median(owns)
        bound = stages * a.max_delay + own
        console.print(f"{stages} stage(s): the bound is {stages} x {a.max_delay:g} + "
                      f"{own:.3f} = {bound:.2f} s")
        for key, name, _ in configs:
            ms = results[key]
            delay = statistics.median(m["_delay"] for m in ms)
            equal = all(m["_equal"] for m in ms)
            table.add_row(str(stages), name,
                          f"{spread([m['_delay'] for m in ms], '{:.2f}')} s (bound {bound:.2f})",
                          "[green]yes[/]" if delay <= bound else "[red]no[/]",
                          spread([m.get("tentative_rows", 0) for m in ms], "{:,.0f}"),
                          spread([m.get("corrections", 0) for m in ms], "{:,.0f}"),
                          stabilization(sorted(ms, key=lambda m: m["_delay"])[len(ms) // 2]),
                          f"{statistics.median(m['max_output_gap_s'] for m in ms):.2f} / "
                          f"{statistics.median(gap_any(m) for m in ms):.2f} s",
                          "[green]equal[/]" if equal else "[red]differs[/]")
    console.print(table)
    console.print(f"availability bound: X = {a.max_delay:g} s per stage: a chain of k stages is "
                  f"allowed k X on top of its own latency (the longest of the same run without "
                  f"the cut{'' if a.repeat == 1 else ', median of the runs'})")


def spread(values: list[float], fmt: str) -> str:
    """One run's figure, or the median of several with their range."""
    if len(values) == 1:
        return fmt.format(values[0])
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def gap_any(m: dict[str, Any]) -> float:
    """The longest stretch without any output, tentative rows counted."""
    return float(m.get("max_gap_with_tentative_s", m["max_output_gap_s"]))


def stabilization(m: dict[str, Any]) -> str:
    """Each stage's seconds in stabilization (``consistency.stages``), first to last."""
    stages = m.get("consistency", {}).get("stages", [])
    if not stages:
        return "-"
    return " / ".join(f"{st['seconds']['stabilization']:.2f}" for st in stages) + " s"


def max_latency(m: dict[str, Any]) -> float:
    """Strict runs report latency percentiles; their longest output gap bounds the delay."""
    return max(float(m.get("latency_p99_s", 0.0)), float(m.get("max_output_gap_s", 0.0)))


if __name__ == "__main__":
    main()
