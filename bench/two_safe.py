"""Time to two-safe: how long after a site fails every partition has ``--replicas`` complete
copies again, against the load.

    .venv/bin/python bench/two_safe.py [--loads 0.3 0.6 0.8] [--runs 2]

In one Spark session, netmon on 4 sites and 32 partitions with ``--ha flux``: an unpaced run
first measures what the machine sustains; then, per load (a share of that rate), runs with site
1 killed after ``--kill-at`` seconds. Spark restarts the site's task, the new process adopts
the slot as a standby and its replicas (16 per stage, 4 catch-ups at a time, the state in
parallel StateMover streams) are caught up while the input keeps flowing. Printed per run: the
rate as a share of the unpaced throughput, the failure's detection time, the time until it was
fault tolerant again (``fault_tolerant_after_s`` in the run's metrics: every replica caught up
and folded in), the longest output gap, and whether the output equals the Spark SQL reference.
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
from sparkflux.runner import reference_digest, run_example  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

NETMON = ROOT / "examples" / "netmon.py"


def args_for(events: int, rate: float | None, kill: list[str]) -> argparse.Namespace:
    return run_args(NETMON, events=events, ha="flux", rate=rate, ingress_buffer=2_000_000,
                    kill=kill, balance=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.6, 0.8],
                   help="input rates as shares of the unpaced throughput")
    p.add_argument("--runs", type=int, default=2, help="kill runs per rate")
    p.add_argument("--seconds", type=float, default=8.0, help="input per run, at its rate")
    p.add_argument("--kill-at", type=float, default=3.0)
    p.add_argument("--json", type=Path, help="write every run's figures here")
    a = p.parse_args()
    console = Console(stderr=True)
    module = load_example(NETMON)
    spark = spark_session(default_master(6), "sparkflux-two-safe")
    console.print("unpaced run (1,500,000 events) ...")
    top = run_example(module, args_for(1_500_000, None, []), sink=NullSink(),
                      dead=DeadLetters(), spark=spark).metrics["throughput_tps"]
    console.print(f"  {top:,.0f} tuples/s unpaced")
    rates = [round(load * top, -3) for load in a.loads]
    rows: list[dict[str, Any]] = []
    for rate in rates:
        events = int(rate * a.seconds)
        digest, _, _ = reference_digest(module, args_for(events, rate, []), spark=spark)
        for i in range(a.runs):
            console.print(f"[bold]{rate:,.0f}/s[/bold] run {i + 1}/{a.runs} ...")
            m = run_example(module, args_for(events, rate, [f"1@{a.kill_at}"]),
                            sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
            f = m["failures"][0] if m["failures"] else {}
            rows.append({"rate": rate, "load": rate / top, "equal": m["output_digest"] == digest,
                         "detect_s": f.get("detected_after_s"),
                         "two_safe_s": f.get("fault_tolerant_after_s"),
                         "gap_s": m["max_output_gap_s"]})
    t = Table(title="time to two-safe after a kill (netmon, 4 sites, 32 partitions)")
    for col in ("rate /s", "share of unpaced", "detected (s)", "two-safe after (s)",
                "longest gap (s)", "= reference"):
        t.add_column(col)
    for r in rows:
        t.add_row(f"{r['rate']:,.0f}", f"{r['load']:.0%}", str(r["detect_s"]),
                  str(r["two_safe_s"]), str(r["gap_s"]), "yes" if r["equal"] else "NO")
    Console().print(t)
    for rate in rates:
        got = [r["two_safe_s"] for r in rows if r["rate"] == rate and r["two_safe_s"]]
        if got:
            print(f"{rate:,.0f}/s ({rate / top:.0%} of unpaced): two-safe after "
                  f"{statistics.median(got):.2f} s median, {max(got):.2f} s at most")
    if a.json:
        a.json.write_text(json.dumps({"unpaced_tps": top, "runs": rows}, indent=1))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
