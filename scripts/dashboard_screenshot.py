"""Draw the dashboard of a run with a failure into a PNG (the README's picture).

    .venv/bin/python scripts/dashboard_screenshot.py [--out docs/img/dashboard.png]

Runs netmon under ``--ha flux`` on 4 sites at 60,000 events/s, kills site 1 once 200,000
records are in, and once the site is caught up again (and some seconds more of the run are
drawn) takes the page in headless Chromium (Debian's ``chromium``, which ``scripts/dev.sh``
installs), then stops the run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "dashboard.png"))
    parser.add_argument("--after", type=float, default=6.0,
                        help="seconds of the run drawn after the catch-up")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium: apt-get install chromium (scripts/dev.sh setup does)",
              file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import sparkflux

    spec = importlib.util.spec_from_file_location("netmon", ROOT / "examples" / "netmon.py")
    assert spec is not None and spec.loader is not None
    netmon = importlib.util.module_from_spec(spec)
    sys.modules["netmon"] = netmon
    spec.loader.exec_module(netmon)
    query = sparkflux.start(netmon.build(netmon.NetmonOptions(events=3_000_000)),
                            sites=4, partitions=16, ha="flux", rate=60_000,
                            kill=["1@input+200000"], ui_port=0, announce=print,
                            dataflow_file=ROOT / "examples" / "netmon.py")
    board = query._run.host.dashboard
    assert board is not None
    try:
        deadline = time.monotonic() + 120
        while not any(e.kind == "caught-up" for e in query.events):
            if query.await_termination(0.2) or time.monotonic() > deadline:
                print("the run ended before its catch-up", file=sys.stderr)
                return 1
        time.sleep(args.after)  # more of the run in the charts (a picture, not a protocol)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",  # noqa: S603 - our own command line
                        "--disable-dev-shm-usage", "--hide-scrollbars",
                        "--window-size=1400,900", "--virtual-time-budget=3000",
                        f"--screenshot={args.out}", board.url],
                       check=True, capture_output=True, timeout=120)
    finally:
        query.stop(120)
    print(f"dashboard drawn to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
