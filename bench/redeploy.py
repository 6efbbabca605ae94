"""Re-deploying copies when the latencies change (``--placement latency``, docs/racing.md).

netmon over ``examples/wan/region_shift.json``: the copies are placed by latency at view 1;
12 s after the launch the driver's region moves next to sites 0 and 2, and a quarter of the
partitions have no copy near it. Racing copies, in one run of each: the balancing rounds on
(they re-deploy by what the sites measure) and off (``--no-balance``: the copies stay).
(Flux-HA is not re-deployed: its egress reads column 0's copy, which a move leaves where
it is.)

Per run: output latency p50 / p99 / p99.9 over the whole run (the change lands about a third
into the input, the moves take the next seconds); p50 / p99 of the output delivered after
the re-deployment's last move ended (the same span of the input for the run without: the
copies where they are for good); the re-deployment (when, from the input's start; the
latency bound before and after as measured; the moves done); whether the output equals the
reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.dataflow.examples import load_example  # noqa: E402
from sparkflux.io.sinks import DeadLetters, NullSink  # noqa: E402
from sparkflux.runner import reference_digest, run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

SITES = 4
WAN = str(ROOT / "examples" / "wan" / "region_shift.json")


def args_for(events: int, rate: float, ha: str, balance: bool) -> argparse.Namespace:
    return argparse.Namespace(
        events=events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, sites=SITES,
        partitions=32, ha=ha, replicas=None, master=None, rate=rate, ingress_buffer=400_000,
        window=300_000, output=None, dead_letter=None, kill=[], hang=[], slow=[],
        site_cpu=None, no_balance=not balance, wan=WAN, placement="latency")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--rate", type=float, default=50_000)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    console = Console(width=150)
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(SITES + 1))
    ref, _, _ = reference_digest(module, args_for(a.events, a.rate, "none", False),
                                 spark=spark)
    rows: list[dict[str, Any]] = []
    for ha in ("race",):
        after = float("inf")  # from the input's start: the last latency move over
        for balance in (True, False):
            res = run_example(module, args_for(a.events, a.rate, ha, balance), sink=NullSink(),
                              dead=DeadLetters(), spark=spark)
            m = res.metrics
            re = m["placement"].get("redeploys", [])
            moved = [mv for mv in m["moves"] if mv["reason"] == "latency"]
            if balance and moved:
                after = max(mv["started_at_s"] + mv["duration"] for mv in moved)
            tl = res.timeline
            late = (tl.latencies_between(tl.start + after, float("inf"))
                    if tl is not None and tl.start is not None else np.zeros(0))
            row = {"mode": ha, "rounds": "on" if balance else "off (--no-balance)",
                   "p50": m["latency_p50_s"], "p99": m["latency_p99_s"],
                   "p999": m["latency_p999_s"],
                   "after_s": after if late.size else None,
                   "after_p50": float(np.percentile(late, 50)) if late.size else None,
                   "after_p99": float(np.percentile(late, 99)) if late.size else None,
                   "redeploy_at_s": re[0]["at_s"] if re else None,
                   "bound_ms": (re[0]["bound_ms"], re[0]["new_bound_ms"]) if re else None,
                   "moves": len(moved), "equal": m["output_digest"] == ref}
            rows.append(row)
            console.print(f"{ha:5s} rounds {row['rounds']:18s} p50 {row['p50'] * 1e3:5,.0f} ms"
                          f" p99 {row['p99'] * 1e3:5,.0f} ms, re-deployed at "
                          f"{row['redeploy_at_s']} s, {row['moves']} moves, "
                          f"{'equal' if row['equal'] else 'DIFFERS'}")
    t = Table(title=f"netmon, {a.events:,} events at {a.rate:,.0f}/s, 4 sites, 32 partitions, "
                    f"links: examples/wan/region_shift.json (the change 12 s after launch)")
    for col in ("mode", "balancing rounds", "p50 ms", "p99 ms", "p99.9 ms",
                "after the moves: from s", "p50 ms ", "p99 ms ",
                "re-deployed at s", "bound ms (measured)", "moves", "output"):
        t.add_column(col, justify="left" if col in ("mode", "balancing rounds") else "right")

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1e3:,.0f}"

    for r in rows:
        b = r["bound_ms"]
        t.add_row(r["mode"], r["rounds"], ms(r["p50"]), ms(r["p99"]), ms(r["p999"]),
                  "-" if r["after_s"] is None else f"{r['after_s']:.1f}",
                  ms(r["after_p50"]), ms(r["after_p99"]),
                  "-" if r["redeploy_at_s"] is None else f"{r['redeploy_at_s']:.1f}",
                  "-" if b is None else f"{b[0]:.0f} -> {b[1]:.0f}", str(r["moves"]),
                  "equal" if r["equal"] else "DIFFERS")
    console.print(t)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
