"""What running order-insensitive stages in arrival order buys racing copies.

    .venv/bin/python bench/arrival.py [--events 300000] [--rate 30000] [--wan FILE]

In one Spark session, ``examples/sensors.py --stages 4`` (three sources merged, then four map
stages, each after an exchange: every stage order-insensitive) on 4 sites and 16
mini-partitions with the input held at ``--rate``, run as:

- ``flux``: Flux-HA, every stage merging its input in SN order;
- ``race``: racing copies, every stage merging its input in SN order;
- ``race arrival``: racing copies with ``--arrival-order``, the four map stages run as their
  rows arrive;
- ``... unordered``: the same two with ``--unordered-output`` (no merge at the egress either).

``--wan FILE``: every run over that model of wide-area links (``runtime/wan.py``, e.g.
``examples/wan/three_regions.json``), where a merge waits for the farthest partition's claims.
``--repeat N``: every configuration N times, in rounds, each figure the median.

Per configuration: output latency p50 / p99 / p99.9, the share within 0.05 s and 0.2 s, and
whether the output's rows equal the Spark SQL reference's (order aside: rows digest).
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from sparkflux.runner import reference_result, run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES = 4
EXAMPLE = ROOT / "examples" / "sensors.py"
CONFIGS = {  # name -> options
    "flux": {"ha": "flux"},
    "race": {"ha": "race"},
    "race arrival": {"ha": "race", "arrival_order": True},
    "race unordered": {"ha": "race", "unordered_output": True},
    "race arrival unordered": {"ha": "race", "arrival_order": True, "unordered_output": True},
}
FIGURES = ("p50", "p99", "p999", "within_0.05", "within_0.2")


def args_for(events: int, rate: float, wan: str | None, **options: Any) -> argparse.Namespace:
    return run_args(EXAMPLE, events=events, stages=4, sites=SITES, partitions=16, rate=rate,
                    wan=wan, **options)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=300_000, help="readings per source")
    p.add_argument("--rate", type=float, default=30_000)
    p.add_argument("--wan", default=None, metavar="FILE",
                   help="every run over this wide-area links model (runtime/wan.py)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console(width=150)
    module = load_example(EXAMPLE)
    spark = spark_session(default_master(SITES + 1))
    ref, _ = reference_result(module, args_for(a.events, a.rate, None), spark)
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_ in range(a.repeat):
        for name, options in CONFIGS.items():
            m = run_example(module, args_for(a.events, a.rate, a.wan, **options),
                            sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
            row = {"config": name, "p50": m["latency_p50_s"], "p99": m["latency_p99_s"],
                   "p999": m["latency_p999_s"], "within_0.05": m["latency_within"]["0.05"],
                   "within_0.2": m["latency_within"]["0.2"],
                   "stages": len(m["arrival_stages"]),
                   "equal": m["rows_digest"] == ref.rows_digest
                   and m["output_tuples"] == ref.rows}
            runs.setdefault(name, []).append(row)
            console.print(f"[{round_ + 1}/{a.repeat}] {name:22s} p50 {row['p50'] * 1e3:6,.1f} "
                          f"ms, p99 {row['p99'] * 1e3:6,.1f} ms, {row['stages']} stages in "
                          f"arrival order, {'equal' if row['equal'] else 'DIFFERS'}")
    rows = []
    for rs in runs.values():
        out = dict(rs[0])
        for k in FIGURES:
            out[k] = float(statistics.median(r[k] for r in rs))
        out["equal"] = all(r["equal"] for r in rs)
        rows.append(out)
    t = Table(title=f"sensors --stages 4, {a.events:,} readings per source at {a.rate:,.0f}/s, "
                    f"{SITES} sites, links: {a.wan or 'loopback'}"
                    + (f", median of {a.repeat} runs" if a.repeat > 1 else ""))
    for col in ("configuration", "stages in arrival order", "p50 ms", "p99 ms", "p99.9 ms",
                "<= 0.05 s", "<= 0.2 s", "output"):
        t.add_column(col, justify="left" if col == "configuration" else "right")
    for r in rows:
        t.add_row(r["config"], str(r["stages"]), f"{r['p50'] * 1e3:,.1f}",
                  f"{r['p99'] * 1e3:,.1f}", f"{r['p999'] * 1e3:,.1f}",
                  f"{r['within_0.05']:.1%}", f"{r['within_0.2']:.1%}",
                  "equal" if r["equal"] else "DIFFERS")
    console.print(t)
    by = {r["config"]: r for r in rows}
    for fast, slow in (("race arrival", "race"), ("race arrival unordered", "race unordered")):
        console.print(f"{fast} against {slow}: p50 {by[fast]['p50'] / by[slow]['p50']:.2f}x, "
                      f"p99 {by[fast]['p99'] / by[slow]['p99']:.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
