"""How late the sites' heartbeats reach the controller on a loaded run: the figures behind
``MIN_HEARTBEAT_TIMEOUT_S`` (``sparkflux/options.py``).

    .venv/bin/python bench/heartbeat_gaps.py [--events 2000000] [--sites 4] [--repeat 1]

Runs ``sparkflux run examples/netmon.py --ha flux`` unpaced (saturation) and with
``--site-cpu 0.4``, each in a process of its own, and prints per run and site:

- ``gap``: the longest time between two consecutive heartbeats the driver received from the
  site (its receive time, ``Host.utilisation``), from the first to the run's end;
- ``silence``: the longest silence the controller itself saw at a ``Tick`` (now minus the
  site's last heartbeat, what it compares with ``--heartbeat-timeout``), and when it was
  (seconds after view 1: a silence at 0 is the view's start, whose members are timed from
  their registration).

The sites send one every ``SiteConfig.heartbeat_interval`` (0.1 s); a gap above it is a site
whose event loop was busy (a scheduler pass on a big batch, GC), starved of CPU by the other
processes on this machine, or a driver whose loop was. Nothing in the runtime is changed: the
bench wraps the driver's ``Host`` and the controller's ``_tick`` in its own process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS: dict[str, list[str]] = {"unpaced": [], "site-cpu 0.4": ["--site-cpu", "0.4"]}


def measure(argv: list[str]) -> dict[str, Any]:
    """Run ``sparkflux run`` with ``argv`` in this process and return the heartbeat figures."""
    from sparkflux import cli
    from sparkflux.control.controller import Controller
    from sparkflux.runtime.driver import Host

    hosts: list[Host] = []
    silence: dict[int, tuple[float, float]] = {}  # site -> (longest silence, its time)
    view_at: list[float] = []
    ticks: list[float] = []  # the driver's loop: a late tick is a driver that was busy
    init, tick = Host.__init__, Controller._tick

    def host_init(self: Host, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        hosts.append(self)

    def ticked(self: Controller, now: float) -> list:
        ticks.append(now)
        if self.view.number > 0:
            if not view_at:
                view_at.append(now)
            for m in self.view.members.values():
                if m.site in self.dead:
                    continue
                s = now - self._last_seen.get(m.site, now)
                if s > silence.get(m.site, (0.0, 0.0))[0]:
                    silence[m.site] = (s, now - view_at[0])
        return tick(self, now)

    Host.__init__ = host_init  # type: ignore[method-assign]
    Controller._tick = ticked  # type: ignore[method-assign]
    t0 = time.time()
    code = cli.main(["run", *argv, "--no-progress"])
    host = hosts[-1]
    start = host.metrics.start or t0
    gaps: dict[int, tuple[float, float]] = {}  # site -> (longest gap, its end after input start)
    for site, samples in host.utilisation.items():
        ts = [t for t, _, _ in samples]
        gaps[site] = max(((b - a, b - start) for a, b in pairwise(ts)), default=(0.0, 0.0))
    lag = max((b - a for a, b in pairwise(ticks)), default=0.0)
    return {"exit": code, "seconds": round(time.time() - t0, 1),
            "beats": {s: len(v) for s, v in host.utilisation.items()},
            "gap": {s: [round(g, 3), round(at, 1)] for s, (g, at) in sorted(gaps.items())},
            "tick_gap": round(lag, 3),
            "silence": {s: [round(v, 3), round(at, 1)] for s, (v, at) in sorted(silence.items())},
            "failures": len(host.failures)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(measure(args.one)), flush=True)
        return 0
    worst = 0.0
    for name, extra in CONFIGS.items():
        for i in range(args.repeat):
            argv = ["examples/netmon.py", "--events", str(args.events), "--sites",
                    str(args.sites), "--partitions", str(args.partitions), "--ha", "flux",
                    "--heartbeat-timeout", "1000", *extra]
            out = subprocess.run([sys.executable, __file__, "--one", *argv], cwd=ROOT,
                                 capture_output=True, text=True)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                print(f"{name} #{i + 1}: no result (exit {out.returncode})\n{out.stderr[-2000:]}")
                continue
            r = json.loads(lines[-1].removeprefix("RESULT "))
            run_worst = max(v for v, _ in [*r["gap"].values(), *r["silence"].values()])
            worst = max(worst, run_worst)
            print(f"{name} #{i + 1}: sparkflux run {' '.join(argv)}\n"
                  f"  exit {r['exit']}, {r['seconds']} s, failures {r['failures']}, "
                  f"heartbeats {r['beats']}\n"
                  f"  longest gap between received heartbeats, per site (s, at s after the "
                  f"input's start): {r['gap']}\n"
                  f"  longest time between two of the driver's ticks (every 0.05 s): "
                  f"{r['tick_gap']} s\n"
                  f"  longest silence at a tick, per site (s, at s after view 1): "
                  f"{r['silence']}\n  worst: {run_worst:.3f} s", flush=True)
    print(f"worst over all runs: {worst:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
