"""A spark-submit job under the supervisor on a standalone cluster, its driver killed: ``sparkflux
supervise -- spark-submit --master URL examples/netmon_job.py --checkpoint DIR --table PATH``,
the job's Python driver process SIGKILLed at each ``--kill-at`` (seconds after the job's
current driver started); the supervisor starts the job again and it goes on from its newest
checkpoint. At the end the table must equal the Spark SQL reference with no duplicate row.

    bash scripts/cluster.sh start
    .venv/bin/python bench/supervised_submit.py --master spark://127.0.0.1:7077 \\
        --kill-at 15 --kill-at 15
    bash scripts/cluster.sh stop
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.model.compare import duplicate_rows  # noqa: E402
from sparkflux.runner import example_reference  # noqa: E402
from sparkflux.runtime import proctree  # noqa: E402


def drivers(root: int) -> list[int]:
    """The job's Python driver processes under ``root`` (the supervisor)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and root in proctree.ancestors(int(d.name)):
            cmd = proctree.cmdline(int(d.name))
            if any(c.endswith("netmon_job.py") for c in cmd) and "python" in cmd[0]:
                out.append(int(d.name))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--master", required=True)
    p.add_argument("--events", type=int, default=3_000_000)
    p.add_argument("--rate", type=float, default=50_000.0)
    p.add_argument("--kill-at", type=float, action="append", default=[])
    a = p.parse_args()
    console = Console()
    d = Path(tempfile.mkdtemp(prefix="sparkflux-supervised-"))
    bin_ = Path(sys.executable).parent
    cmd = [str(bin_ / "sparkflux"), "supervise", "--restarts", str(len(a.kill_at) + 1), "--",
           str(bin_ / "spark-submit"), "--master", a.master, str(ROOT / "examples" /
                                                                  "netmon_job.py"),
           "--events", str(a.events), "--rate", str(a.rate), "--checkpoint", str(d / "ckpt"),
           "--checkpoint-interval", "2", "--table", str(d / "table")]
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if x)}
    log = d / "supervise.log"
    with open(log, "w") as out:
        sup = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=d, env=env)
        for k, at in enumerate(a.kill_at):
            deadline = time.monotonic() + 180
            while not (now := drivers(sup.pid)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert now, f"no driver process appeared:\n{log.read_text()[-3000:]}"
            time.sleep(at)
            for pid in drivers(sup.pid):
                os.kill(pid, signal.SIGKILL)
                console.log(f"kill {k + 1}: SIGKILL to the driver (pid {pid}) {at:g} s after "
                            f"it started")
            while drivers(sup.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
        code = sup.wait(timeout=1200)
    text = log.read_text()
    said = [ln for ln in text.splitlines() if "restart" in ln or "restored" in ln]
    console.print("\n".join(said) or "(no restart line)")
    console.print(f"supervisor exit code {code}")
    ref = example_reference(ROOT / "examples" / "netmon.py", "--events", str(a.events))
    table = pq.read_table(d / "table")
    dups, equal = duplicate_rows(table), ref.same_output(table)
    console.print(f"table: {table.num_rows:,} rows, reference {ref.rows:,}; duplicates {dups}; "
                  f"{'EQUAL to' if equal else 'DIFFERENT from'} the reference")
    if not equal or dups or code != 0:
        console.print(f"kept {d} (supervise.log)")
        raise SystemExit(1)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
