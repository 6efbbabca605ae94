"""What racing replicas buy and cost: latency through a slow, a hung and two killed sites.

    .venv/bin/python bench/racing.py [--events 600000] [--rate 50000] [--site-cpu 0.3]

In one Spark session, netmon on 4 sites and 32 mini-partitions with the input held at
``--rate``, every site's event loop capped at ``--site-cpu`` of a core (so that ``--slow``
has a capacity to divide), run with ``--ha none``, ``--ha flux``, ``--ha race`` and ``--ha
race --replicas 3`` (and ``--ha flux --replicas 3`` where two sites die), and racing copies
that garbage-collect their input streams (``--stream-replicas N``, modes ``...-gcN``: each copy
takes each stream from the N producer copies whose data came first), in scenarios:

- ``steady``: no fault;
- ``slow``: site 1 gets a third of its capacity from 2 s on (``--slow 1@2=0.33``), less
  than its share of the load needs;
- ``hang``: site 1 stopped (SIGSTOP) from 2 s for 4 s, past the heartbeat timeout (2 s);
- ``kill2``: sites 1 and 2 killed at the same moment (three copies only).

``--wan FILE``: every run over that model of wide-area links (``runtime/wan.py``; e.g.
``examples/wan/three_regions.json``: the driver and sites 0 and 1 in one place, site 2 30 ms
away, site 3 60 ms). With a model, every scenario also runs its racing (and steady's Flux-HA)
configurations with the copies placed by latency over the same matrix (``--placement
latency``, modes ``...@lat``) next to chained declustering's.

``--modes``: only these modes (of each scenario's). ``--repeat N``: every configuration N
times (in rounds), each figure the median of its runs.

Per run: output latency p50 / p99 / p99.9, the share of the output within 0.2 s and 0.5 s,
the longest output gap, and the replication cost: bytes written to every connection of the
run (driver and sites) per input tuple. Every run's output must equal the reference.
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

from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import reference_digest, run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES = 4
MODES = {"none": ("none", None, None), "flux": ("flux", None, None),
         "flux3": ("flux", 3, None), "race": ("race", None, None), "race3": ("race", 3, None),
         "race-gc1": ("race", 2, 1), "race3-gc1": ("race", 3, 1),
         "race3-gc2": ("race", 3, 2)}  # mode -> (--ha, --replicas, --stream-replicas)
LATENCY_PLACED = {"steady": ("flux", "race", "race3"), "slow": ("race",), "hang": ("race",),
                  "kill2": ("race3",)}  # ``mode@lat`` runs with --wan
SCENARIOS = {  # scenario -> (fault options, the modes it runs)
    "steady": ({}, ("none", "flux", "race", "race3", "race-gc1", "race3-gc1")),
    "slow": ({"slow": ["1@2=0.33"]}, ("none", "flux", "race", "race3")),
    "hang": ({"hang": ["1@2=4"]}, ("flux", "race", "race3", "race3-gc1", "race3-gc2")),
    "kill2": ({"kill": ["1@3", "2@3"]}, ("flux3", "race3", "race3-gc1")),
}


def args_for(events: int, rate: float, site_cpu: float, mode: str, wan: str | None = None,
             **fault: Any) -> argparse.Namespace:
    name, _, placed = mode.partition("@")
    ha, replicas, keep = MODES[name]
    base: dict[str, Any] = dict(
        events=events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, sites=SITES,
        partitions=32, ha=ha, replicas=replicas, master=None, rate=rate,
        ingress_buffer=400_000, window=300_000, output=None, dead_letter=None, kill=[],
        hang=[], slow=[], site_cpu=site_cpu, heartbeat_timeout=2.0, no_balance=True, wan=wan,
        placement="latency" if placed == "lat" else "chained", stream_replicas=keep)
    base.update(fault)
    return argparse.Namespace(**base)


def median_row(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's runs as one row: the median of every figure, equal only if every
    run's output was."""
    out = dict(rs[0])
    for k in ("p50", "p99", "p999", "within_0.2", "within_0.5", "gap", "bytes_per_tuple"):
        out[k] = float(statistics.median(r[k] for r in rs))
    out["equal"] = all(r["equal"] for r in rs)
    out["runs"] = len(rs)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=600_000)
    p.add_argument("--rate", type=float, default=50_000)
    p.add_argument("--site-cpu", type=float, default=0.3)
    p.add_argument("--wan", default=None, metavar="FILE",
                   help="every run over this wide-area links model (runtime/wan.py)")
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--modes", nargs="+", default=None, choices=list(MODES),
                   help="only these modes, in the scenarios that run them")
    p.add_argument("--repeat", type=int, default=1,
                   help="run every configuration this many times, in rounds, and print the "
                        "median of each figure (the runs of one round share the machine's "
                        "state)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console(width=150)  # the table whole, in a log too
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(SITES + 1))
    ref, _, _ = reference_digest(module, args_for(a.events, a.rate, a.site_cpu, "none"),
                                 spark=spark)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(a.repeat):
        for scenario in a.scenarios:
            fault, modes = SCENARIOS[scenario]
            if a.wan:
                modes = (*modes, *(f"{m}@lat" for m in LATENCY_PLACED[scenario]))
            if a.modes:
                modes = tuple(m for m in modes if m.partition("@")[0] in a.modes)
            for mode in modes:
                m = run_example(module, args_for(a.events, a.rate, a.site_cpu, mode, a.wan,
                                                 **fault),
                                sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
                sent = m["bytes_sent"]["driver"] + m["bytes_sent"]["sites"]
                row = {"scenario": scenario, "mode": mode, "p50": m["latency_p50_s"],
                       "p99": m["latency_p99_s"], "p999": m["latency_p999_s"],
                       "within_0.2": m["latency_within"]["0.2"],
                       "within_0.5": m["latency_within"]["0.5"],
                       "gap": m["max_output_gap_s"],
                       "bytes_per_tuple": sent / m["input_tuples"],
                       "equal": m["output_digest"] == ref,
                       "failures": [f["site"] for f in m["failures"]]}
                runs.setdefault((scenario, mode), []).append(row)
                console.print(f"[{round_ + 1}/{a.repeat}] {scenario:7s} {mode:10s} p99 "
                              f"{row['p99'] * 1e3:7,.0f} ms, gap {row['gap']:.2f} s, "
                              f"{row['bytes_per_tuple']:,.0f} B/tuple, "
                              f"{'equal' if row['equal'] else 'DIFFERS'}")
    rows = [median_row(rs) for rs in runs.values()]
    t = Table(title=f"netmon, {a.events:,} events at {a.rate:,.0f}/s, 4 sites, "
                    f"--site-cpu {a.site_cpu}, links: {a.wan or 'loopback'}"
                    + (f", median of {a.repeat} runs" if a.repeat > 1 else ""))
    for col in ("scenario", "mode", "p50 ms", "p99 ms", "p99.9 ms", "<= 0.2 s", "<= 0.5 s",
                "longest gap s", "bytes / input tuple", "output"):
        t.add_column(col, justify="left" if col in ("scenario", "mode") else "right")
    for r in rows:
        t.add_row(r["scenario"], r["mode"], f"{r['p50'] * 1e3:,.0f}", f"{r['p99'] * 1e3:,.0f}",
                  f"{r['p999'] * 1e3:,.0f}", f"{r['within_0.2']:.1%}",
                  f"{r['within_0.5']:.1%}", f"{r['gap']:.2f}", f"{r['bytes_per_tuple']:,.0f}",
                  "equal" if r["equal"] else "DIFFERS")
    console.print(t)
    steady = {r["mode"]: r["p99"] for r in rows if r["scenario"] == "steady"}
    for r in rows:
        if r["scenario"] != "steady" and r["mode"] in steady:
            console.print(f"{r['scenario']:6s} {r['mode']:10s}: p99 "
                          f"{r['p99'] / steady[r['mode']]:.2f}x its steady run's")
    chained = {(r["scenario"], r["mode"]): r["p99"] for r in rows}
    for r in rows:
        if r["mode"].endswith("@lat"):
            base = chained[(r["scenario"], r["mode"][:-4])]
            console.print(f"{r['scenario']:6s} {r['mode']:10s}: p99 {r['p99'] / base:.2f}x "
                          f"chained placement's ({r['p99'] * 1e3:,.0f} against "
                          f"{base * 1e3:,.0f} ms)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
