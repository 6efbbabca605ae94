"""A driver killed and the same command run again: netmon with ``--ha flux --checkpoint DIR
--output-table PATH``, the driver's whole process tree SIGKILLed (its process group: the
Python driver and its JVM at once; the sites stop on their own, fail-stop), then the same
command started again, which goes on from the newest complete checkpoint.

    .venv/bin/python bench/driver_restart.py --kill-at 20          # one kill, 20 s in
    .venv/bin/python bench/driver_restart.py --random 5 --seed 1   # five, at random moments

Prints each incarnation (when it was killed, the checkpoint the next one restored and its
cut), the last run's time from its process start to its first output row (Spark Structured
Streaming's restart from its checkpoint, measured the same way on this machine: 13.4-14.1 s),
and whether the table equals the Spark SQL reference with no duplicate row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.model.compare import duplicate_rows  # noqa: E402
from sparkflux.runner import example_reference  # noqa: E402

EXAMPLE = ROOT / "examples" / "netmon.py"


def command(d: Path, a: argparse.Namespace, metrics: Path) -> list[str]:
    return [sys.executable, "-m", "sparkflux.cli", "run", str(EXAMPLE), "--events",
            str(a.events), "--rate", str(a.rate), "--sites", str(a.sites), "--partitions",
            "32", "--ha", "flux", "--checkpoint", str(d / "ckpt"), "--checkpoint-interval",
            str(a.interval), "--output-table", str(d / "table"), "--no-progress",
            "--metrics", str(metrics)]


def restored_from(log: str) -> str:
    for line in log.splitlines():
        if line.startswith("restored checkpoint"):
            return line.split(":")[0].removeprefix("restored ")
    return "the start"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=5_000_000)
    p.add_argument("--rate", type=float, default=100_000.0)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--kill-at", type=float, action="append", default=[],
                   help="seconds after an incarnation's start to kill it (repeatable)")
    p.add_argument("--random", type=int, default=0, help="this many kills at random moments")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the working directory")
    a = p.parse_args()
    rng = random.Random(a.seed)
    span = a.events / a.rate  # an incarnation that is not killed needs about this long
    kills = list(a.kill_at) + [round(rng.uniform(4.0, 4.0 + span / 3), 1)
                               for _ in range(a.random)]
    console = Console()
    d = Path(tempfile.mkdtemp(prefix="sparkflux-driver-restart-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)}
    rows = []
    try:
        for i, at in enumerate([*kills, None]):
            metrics = d / f"m{i}.json"
            log = d / f"run{i}.log"
            with open(log, "w") as out:
                t0 = time.monotonic()
                proc = subprocess.Popen(command(d, a, metrics), stdout=out,
                                        stderr=subprocess.STDOUT, cwd=d, env=env,
                                        start_new_session=True)
                if at is None:
                    proc.wait(timeout=3 * span + 300)
                else:
                    try:
                        proc.wait(timeout=at)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(30)
            text = log.read_text()
            done = proc.returncode == 0
            rows.append((i, "finished" if done else f"killed at {at:.1f} s"
                         if at is not None else f"exit {proc.returncode}",
                         restored_from(text), round(time.monotonic() - t0, 1)))
            console.log(f"incarnation {i}: {rows[-1][1]}, went on from {rows[-1][2]}")
            if at is None and not done:
                raise SystemExit(f"the last run failed:\n{text[-3000:]}")
        m = json.loads((d / f"m{len(kills)}.json").read_text())
        ref = example_reference(EXAMPLE, "--events", str(a.events))
        table = pq.read_table(d / "table")
        dups, equal = duplicate_rows(table), ref.same_output(table)
        t = Table(title=f"netmon {a.events:,} events at {a.rate:,.0f}/s, --ha flux, "
                        f"{a.sites} sites, a checkpoint every {a.interval:g} s")
        for col in ("incarnation", "ended", "went on from", "ran s"):
            t.add_column(col)
        for r in rows:
            t.add_row(*(str(x) for x in r))
        console.print(t)
        console.print(f"last run: process start to its first output row "
                      f"{m.get('first_output_after_start_s')} s (Spark Structured Streaming, "
                      f"measured the same way here: 13.4-14.1 s); restored "
                      f"{m.get('restored')}; its input {m['input_tuples']:,} records")
        console.print(f"table: {table.num_rows:,} rows, reference {ref.rows:,}; duplicates "
                      f"{dups}; {'EQUAL to' if equal else 'DIFFERENT from'} the reference")
        if not equal or dups:
            raise SystemExit(1)
    finally:
        if a.keep:
            console.print(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
