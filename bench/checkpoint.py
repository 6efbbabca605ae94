"""What checkpoints cost: netmon with ``--ha flux`` with no checkpoint, a checkpoint every 10 s
and one every second, in one Spark session, alternated.

    .venv/bin/python bench/checkpoint.py [--events 10000000] [--rate-events 3000000]
                                         [--rate 100000] [--repeat 2]

(1) Throughput: the input as fast as the dataflow takes it (``--events``, long enough for
several 10-second checkpoints), each configuration ``--repeat`` times, alternated; the median
of each and its ratio to no checkpoint (goal: at least 0.95 at 10 s). (2) Latency: the input
paced at ``--rate`` (``--rate-events`` of it), p50 and p99 of each configuration. Every run
writes its checkpoints to a directory of its own (removed after), and every run's output
digest must equal the others'. Prints a table per part, the checkpoints each run completed
and how long they took (from the cut to the manifest written).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
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

CONFIGS: tuple[tuple[str, float | None], ...] = (("none", None), ("every 10 s", 10.0),
                                                   ("every 1 s", 1.0))
EXAMPLE = ROOT / "examples" / "netmon.py"


def run(spark: Any, events: int, interval: float | None, rate: float | None) -> dict[str, Any]:
    module = load_example(EXAMPLE)
    where = Path(tempfile.mkdtemp(prefix="sparkflux-bench-ckpt-"))
    try:
        extra: dict[str, Any] = {"checkpoint": str(where), "checkpoint_interval": interval} \
            if interval else {}
        args = run_args(EXAMPLE, events=events, ha="flux", sites=4, partitions=32,
                        rate=rate, bad_every=0, **extra)
        result = run_example(module, args, sink=NullSink(), dead=DeadLetters(), spark=spark)
        return result.metrics
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--rate-events", type=int, default=3_000_000)
    p.add_argument("--rate", type=float, default=100_000.0)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    console = Console()
    spark = spark_session(default_master(4))
    digests: set[str] = set()
    tput: dict[str, list[float]] = {name: [] for name, _ in CONFIGS}
    taken: dict[str, list[float]] = {name: [] for name, _ in CONFIGS}
    for round_ in range(a.repeat):
        for name, interval in CONFIGS:
            console.log(f"throughput, round {round_ + 1}/{a.repeat}: {name}")
            m = run(spark, a.events, interval, None)
            digests.add(m["output_digest"])
            tput[name].append(m["throughput_tps"])
            taken[name] += [c["seconds"] for c in m.get("checkpoints", [])
                            if c["seconds"] is not None]
    lat: dict[str, dict[str, Any]] = {}
    for name, interval in CONFIGS:
        console.log(f"latency at {a.rate:,.0f}/s: {name}")
        lat[name] = run(spark, a.rate_events, interval, a.rate)
    rate_digests = {m["output_digest"] for m in lat.values()}
    base = statistics.median(tput["none"])
    t = Table(title=f"netmon --ha flux, 4 sites, 32 partitions: {a.events:,} events "
                    f"unpaced (median of {a.repeat}), {a.rate_events:,} at {a.rate:,.0f}/s")
    t.add_column("checkpoints", no_wrap=True)
    for col in ("tuples/s", "ratio", "completed", "cut to manifest, median",
                f"p50 at {a.rate:,.0f}/s", "p99"):
        t.add_column(col, justify="right")
    for name, _ in CONFIGS:
        med = statistics.median(tput[name])
        done = taken[name]
        m = lat[name]
        t.add_row(name, f"{med:,.0f}", f"{med / base:.3f}",
                  str(len(done) // a.repeat) if done else "0",
                  f"{statistics.median(done) * 1000:.0f} ms" if done else "-",
                  f"{m['latency_p50_s'] * 1000:.0f} ms", f"{m['latency_p99_s'] * 1000:.0f} ms")
    console.print(t)
    console.print(f"output digests: {len(digests)} distinct unpaced, {len(rate_digests)} "
                  f"paced (each must be 1)")
    if len(digests) != 1 or len(rate_digests) != 1:
        raise SystemExit("the runs' outputs differ")


if __name__ == "__main__":
    main()
