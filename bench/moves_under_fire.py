"""Moves under fire: a site killed inside a load-balancing move, run after run.

    .venv/bin/python bench/moves_under_fire.py [--runs 20] [--events 1000000]

In one Spark session, netmon on 4 sites with ``--ha flux``, every site capped at
``--site-cpu`` of wall time and site 2 slowed to half of it after ``--slow-at`` seconds, so
that the balancing policy moves partitions off it. A calibration run without a kill measures
how long a move takes (D, the shortest); then each run kills one site inside the first move
(``--kill ROLE@move+SECONDS``): the old copy's site (``source``), the ``destination``, the
site the new copy is built from (``from``) or a ``bystander``, in turn, at delays spread over
[0, 0.8 D]. Every run's output must equal the Spark SQL reference, and a move is made before it
breaks: the bench prints, per run, where the kill landed (before the first move ended, or
after) and every move's time with fewer complete copies than ``--replicas`` because of the
move (``short_of_copies_s``: 0 everywhere), the moves given up (their build lost its
destination or its source of state) and the old copies retired early (their site was the one
killed).
"""

from __future__ import annotations

import argparse
import json
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
from sparkflux.runtime.run_config import RunFailed  # noqa: E402
from sparkflux.spark.launcher import default_master, spark_session  # noqa: E402

ROLES = ("source", "destination", "from", "bystander")


def args_for(a: argparse.Namespace, kill: list[str]) -> argparse.Namespace:
    return argparse.Namespace(
        events=a.events, batch_size=8192, seed=7, cpu_work=False, bad_every=0, skew=False,
        sites=4, partitions=a.partitions, ha="flux", replicas=None, master=None, rate=a.rate,
        ingress_buffer=2_000_000, window=200_000, output=None, dead_letter=None, kill=kill,
        heartbeat_timeout=10.0, spare_sites=0, site_cpu=a.site_cpu,
        slow=[f"2@{a.slow_at}=0.5"], recovery="standby", no_balance=False,
        balance_delta_min=0.5, balance_window=1.0,
    )


def moves_of(res: Any) -> list[dict[str, Any]]:
    return list(res.metrics.get("moves", []))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--rate", type=float, default=40_000)
    p.add_argument("--site-cpu", type=float, default=0.15)
    p.add_argument("--slow-at", type=float, default=1.0)
    p.add_argument("--json", type=Path, help="write every run's figures here")
    a = p.parse_args()
    console = Console(stderr=True)
    module = load_example(ROOT / "examples" / "netmon.py")
    spark = spark_session(default_master(4), "sparkflux-moves-under-fire")
    digest, n_rows, _ = reference_digest(module, args_for(a, []), spark=spark)
    console.print(f"reference: {n_rows} rows, digest {str(digest)[:8]}")

    console.print("[bold]calibration[/bold] (no kill) ...")
    cal = run_example(module, args_for(a, []), sink=NullSink(), dead=DeadLetters(),
                      spark=spark)
    cal_moves = moves_of(cal)
    if not cal_moves:
        console.print("[red]the policy moved nothing: slow the site more or run longer[/red]")
        return 1
    span = min(float(m["duration"]) for m in cal_moves)
    console.print(f"  {len(cal_moves)} moves; the shortest took {span:.3f}s")

    rows: list[dict[str, Any]] = []
    for i in range(a.runs):
        role = ROLES[i % len(ROLES)]
        # from the move's start to 0.8 of the shortest move: inside it
        delay = round(0.8 * span * (i // len(ROLES)) / max(1, -(-a.runs // len(ROLES)) - 1), 3)
        kill = f"{role}@move+{delay}"
        console.print(f"[bold]run {i + 1}/{a.runs}[/bold] --kill {kill} ...")
        try:
            res = run_example(module, args_for(a, [kill]), sink=NullSink(), dead=DeadLetters(),
                              spark=spark)
        except RunFailed as e:
            console.print(f"  [red]failed[/red]: {e}")
            rows.append({"run": i + 1, "kill": kill, "error": str(e)})
            continue
        m = res.metrics
        moves = moves_of(res)
        kills = m.get("failures", [])
        first_move = min(moves, key=lambda x: x["started_at_s"]) if moves else None
        inside = None
        if kills and first_move is not None:
            k_at = float(kills[0]["killed_at_s"])
            inside = first_move["started_at_s"] <= k_at <= (first_move["started_at_s"]
                                                            + first_move["duration"])
        row = {"run": i + 1, "kill": kill, "equal": m["output_digest"] == digest,
               "killed": [k["site"] for k in kills], "inside_first_move": inside,
               "moves": len(moves),
               "short_of_copies_s": [mv.get("short_of_copies_s", 0.0) for mv in moves],
               "abandoned": sum("abandoned" in mv for mv in moves),
               "retired_early": sum(mv["reason"] == "balance" and "old_copy_retired_s" in mv
                                    and mv["old_copy_retired_s"] < mv["duration"]
                                    for mv in moves),
               "max_gap_s": m.get("max_output_gap_s")}
        rows.append(row)
        console.print(f"  equal {row['equal']}, kill inside the first move {inside}, "
                      f"{row['moves']} moves, short of copies "
                      f"{max(row['short_of_copies_s'], default=0.0):.3f}s")

    t = Table(title=f"moves under fire: {a.runs} runs, netmon {a.events:,} events")
    for col in ("run", "kill", "killed", "inside 1st move", "moves", "given up",
                "short of copies (s, max)", "max gap (s)", "= reference"):
        t.add_column(col)
    for r in rows:
        if "error" in r:
            t.add_row(str(r["run"]), r["kill"], "", "", "", "", "", "", f"FAILED: {r['error']}")
            continue
        t.add_row(str(r["run"]), r["kill"], ",".join(map(str, r["killed"])),
                  str(r["inside_first_move"]), str(r["moves"]), str(r["abandoned"]),
                  f"{max(r['short_of_copies_s'], default=0.0):.3f}", str(r["max_gap_s"]),
                  "yes" if r["equal"] else "NO")
    Console().print(t)
    ok = [r for r in rows if r.get("equal")]
    inside = [r for r in rows if r.get("inside_first_move")]
    short = max((s for r in rows for s in r.get("short_of_copies_s", [])), default=0.0)
    print(f"equal to the reference: {len(ok)}/{len(rows)}; kills inside the first move: "
          f"{len(inside)}/{len(rows)}; moves: {sum(r.get('moves', 0) for r in rows)}; "
          f"longest time a move left a partition short of copies: {short:.3f}s")
    if a.json:
        a.json.write_text(json.dumps({"span_s": span, "runs": rows}, indent=1))
    return 0 if len(ok) == len(rows) and short == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
