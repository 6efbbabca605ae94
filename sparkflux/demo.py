"""``sparkflux demo``: the network-monitoring dataflow on the embedded default, checked.

Runs the paper's motivating dataflow (examples/netmon.py) partitioned over 4 sites on Spark
local mode, then computes the same query with Spark SQL and compares the two output digests.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.panel import Panel

from sparkflux.dataflow.examples import load_example

console = Console()

INTRO = (
    "[bold]sparkflux demo[/]: the network-monitoring dataflow of the Flux papers.\n\n"
    "  packets -> exchange(src,dst) -> session reconstruction\n"
    "          -> exchange(app,src) -> count-window max/avg of durations -> egress\n\n"
    "Every operator runs as {partitions} mini-partitions spread over {sites} sites; each site "
    "is a long-running Spark task (local mode here). The ingress in the driver numbers every "
    "packet, the sites merge their inputs in sequence-number order, and the egress delivers "
    "results once and in order. Afterwards the same query runs as plain Spark SQL and the two "
    "outputs are compared.\n\n"
    "Then the same dataflow runs with Flux-HA (--ha flux): every mini-partition as a pair of "
    "replicas on neighbouring sites, the input held at {rate:,} events/s, and one site's process "
    "killed with SIGKILL halfway through. The run goes on, and its output must still be "
    "identical to the reference: nothing lost, duplicated or reordered."
)


def find_example() -> Path:
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        p = base / "examples" / "netmon.py"
        if p.is_file():
            return p
    raise FileNotFoundError("examples/netmon.py not found; run the demo from the repository")


def demo(argv: list[str]) -> int:
    from sparkflux.display import live_progress
    from sparkflux.io.sinks import DeadLetters, NullSink
    from sparkflux.runner import reference_digest, run_example
    from sparkflux.spark.launcher import default_master, spark_session

    p = argparse.ArgumentParser(prog="sparkflux demo", allow_abbrev=False)
    p.add_argument("--events", type=int, default=400_000)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--rate", type=int, default=100_000)
    p.add_argument("--plot", default="out/demo-failover.png")
    a = p.parse_args(argv)
    console.print(Panel(INTRO.format(partitions=a.partitions, sites=a.sites, rate=a.rate)))
    module = load_example(find_example())
    args = argparse.Namespace(
        events=a.events, batch_size=8192, seed=7, cpu_work=False, bad_every=0,
        sites=a.sites, partitions=a.partitions, ha="none", master=None, rate=None,
        ingress_buffer=200_000, window=300_000, output=None, dead_letter=None,
    )
    spark = spark_session(default_master(a.sites))
    result = run_example(module, args, sink=NullSink(), dead=DeadLetters(), spark=spark,
                         display=live_progress, announce=console.print)
    m = result.metrics
    console.print(
        f"\n[bold]sparkflux[/]: {m['input_tuples']:,} events -> {m['output_tuples']:,} results "
        f"in {m['duration_s']:.2f}s = [bold]{m['throughput_tps']:,.0f} events/s[/]; latency "
        f"p50 {m['latency_p50_s'] * 1000:.0f} ms, p99 {m['latency_p99_s'] * 1000:.0f} ms"
    )
    console.print("computing the same query with Spark SQL (the reference) ...")
    digest, rows, seconds = reference_digest(module, args, spark=spark)
    assert digest is not None  # the demo's query has an SN-ordered reference
    same = digest == m["output_digest"] and rows == m["output_tuples"]
    console.print(f"reference: {rows:,} results in {seconds:.1f}s")
    console.print(f"  sparkflux digest {m['output_digest'][:16]}...")
    console.print(f"  reference digest {digest[:16]}...")
    if not same:
        console.print("[bold red]outputs differ[/]: this is a bug, please report it.")
        return 1
    console.print("[bold green]identical output[/]: every result, exactly once, in order.")
    return _failover(module, args, a, spark, digest, rows)


def _failover(module: ModuleType, args: argparse.Namespace, a: argparse.Namespace, spark: Any,
              digest: str, rows: int) -> int:
    """Part two: Flux-HA with a real crash, checked against the same reference."""
    from argparse import Namespace
    from dataclasses import replace  # noqa: F401

    from sparkflux.display import live_progress
    from sparkflux.io.sinks import DeadLetters, NullSink
    from sparkflux.runner import run_example
    from sparkflux.runtime.plot import plot_timeline

    kill_at = round(a.events / a.rate / 2, 1)
    fargs = Namespace(**{**vars(args), "ha": "flux", "rate": float(a.rate),
                         "kill": [f"1@{kill_at}"]})
    console.print(f"\n[bold]Flux-HA[/]: {a.events:,} events at {a.rate:,}/s, site 1 killed "
                  f"at {kill_at}s ...")
    res = run_example(module, fargs, sink=NullSink(), dead=DeadLetters(), spark=spark,
                      display=live_progress, announce=console.print)
    m = res.metrics
    f = m["failures"][0] if m["failures"] else None
    if f is not None:
        console.print(
            f"site {f['site']} died at {f['killed_at_s']:.2f}s; the controller saw it after "
            f"{f['detected_after_s'] * 1000:.0f} ms; the longest pause in the output around it "
            f"was {f['max_output_gap_s'] * 1000:.0f} ms; p99 latency around it "
            f"{f['latency_p99_s'] * 1000:.0f} ms; input dropped: {m['ingress_dropped']:,}")
    Path(a.plot).parent.mkdir(parents=True, exist_ok=True)
    assert res.timeline is not None  # a run's result has its egress timeline
    plot_timeline(a.plot, res.timeline, res.ingress_timeline, res.events,
                  f"sparkflux demo: --ha flux, site 1 killed at {kill_at}s")
    console.print(f"timeline drawn to {a.plot}")
    same = m["output_digest"] == digest and m["output_tuples"] == rows
    if same and m["kills"] == 1:
        console.print("[bold green]identical output through the crash[/]: the same "
                      f"{rows:,} results as the reference, exactly once, in order.")
        return 0
    console.print("[bold red]the output after the crash differs from the reference[/]: "
                  "this is a bug, please report it.")
    return 1
