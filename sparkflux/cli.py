"""The ``sparkflux`` command: ``run``, ``reference`` and ``demo``.

    sparkflux run examples/netmon.py --events 1000000 --sites 4 --partitions 32 --ha none \\
        --output out/netmon.parquet --metrics out/metrics.json
    sparkflux reference examples/netmon.py --events 1000000
    sparkflux run examples/clicks.py --events 200000 --sites 2 --partitions 8 --check
    sparkflux demo
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkflux.dataflow.examples import load_example
from sparkflux.display import live_progress
from sparkflux.operators.base import PlanError
from sparkflux.options import (
    MIN_HEARTBEAT_TIMEOUT_S,
    MIN_LINK_TIMEOUT_S,
    options_of,
    run_config,
)
from sparkflux.runner import reference_result, run_example
from sparkflux.runtime.run_config import RunFailed, write_metrics
from sparkflux.runtime.site import LINK_TIMEOUT_S

console = Console(stderr=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0
    command, rest = argv[0], argv[1:]
    try:
        if command == "run":
            return cmd_run(rest)
        if command == "reference":
            return cmd_reference(rest)
        if command == "demo":
            return cmd_demo(rest)
    except (PlanError, RunFailed) as e:
        console.print(f"[bold red]error:[/] {e}")
        return 2
    console.print(f"[red]unknown command {command!r}[/]; use run, reference or demo")
    return 2


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparkflux", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["run", "reference", "demo"])
    return p


def _example_parser(prog: str, example_path: str | None) -> tuple[argparse.ArgumentParser, Any]:
    p = argparse.ArgumentParser(prog=f"sparkflux {prog}")
    p.add_argument("example", help="path of the example dataflow (e.g. examples/netmon.py)")
    p.add_argument("--events", type=int, default=1_000_000, help="input events to generate")
    p.add_argument("--batch-size", type=int, default=8192, help="records per source batch")
    module = None
    if example_path and not example_path.startswith("-"):
        module = load_example(example_path)
        module.add_options(p)
    return p, module


def _run_parser(example_path: str | None) -> tuple[argparse.ArgumentParser, Any]:
    p, module = _example_parser("run", example_path)
    p.add_argument("--sites", type=int, default=4, help="number of sites (Spark tasks)")
    p.add_argument("--partitions", type=int, default=32, help="mini-partitions per stage")
    p.add_argument("--ha", choices=["none", "flux"], default="none", help="availability mode")
    p.add_argument("--replicas", type=int, default=None,
                   help="with --ha flux: copies of every partition, on different sites "
                        "(default 2; K copies survive any K-1 sites failing at once)")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: embedded local mode local[SITES,400])")
    p.add_argument("--rate", type=float, default=None,
                   help="pace the source at R events/s as a push source (drops when full)")
    p.add_argument("--ingress-buffer", type=int, default=200_000,
                   help="records the ingress buffers in --rate mode before it drops")
    p.add_argument("--window", type=int, default=300_000,
                   help="admission: input records admitted and not yet acknowledged by every "
                        "first-stage replica (consumers acknowledge on receipt, so this never "
                        "waits for a window to close)")
    p.add_argument("--stall-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="the watchdog: warn, naming the stage and partition that hold the "
                        "run, when neither output nor input has moved for this long; stop the "
                        "run after 4 times as long unless the source is idle (0: off)")
    p.add_argument("--output", default=None, help="write the ordered output to this Parquet file")
    p.add_argument("--dead-letter", default=None,
                   help="JSON-lines file for rejected input (default: next to --output)")
    p.add_argument("--metrics", default=None, help="write the run's metrics JSON here")
    p.add_argument("--spare-sites", type=int, default=0,
                   help="standby sites launched up front (with --ha flux they replace failed "
                        "sites at once; Spark's retry of a crashed site is a standby too)")
    p.add_argument("--site-cpu", type=float, default=None, metavar="FRACTION",
                   help="emulate site capacity: each site's event loop is busy at most this "
                        "fraction of wall time (all sites share this machine's cores)")
    p.add_argument("--slow", action="append", default=[], metavar="SITE@SECONDS=FACTOR",
                   help="from that moment the site gets FACTOR times its capacity")
    p.add_argument("--kill", action="append", default=[], metavar="SITE@SECONDS",
                   help="SIGKILL a site's process this many seconds after the input starts "
                        "(a slot with no live process then: its next one, when it adopts the "
                        "slot); SITE@recovered+SECONDS: that long after the first recovery "
                        "completes; SITE@adopted+SECONDS: that long after the slot's next "
                        "process adopts it; SITE@input+RECORDS: once that many input records "
                        "are admitted; ROLE@move+SECONDS: that long after the first move "
                        "starts, ROLE source, destination, from or a site. On a standalone "
                        "cluster on this machine (a test tool): python:SITE@SECONDS, "
                        "executor:SITE@SECONDS or worker:SITE@SECONDS SIGKILL the site's "
                        "Python worker, its executor JVM or the Worker daemon that launched "
                        "it (SITE 'most': the one hosting the most sites)")
    p.add_argument("--cut", action="append", default=[], metavar="SITE@SECONDS=DURATION",
                   help="drop the packets of a site's links to its peers for DURATION seconds "
                        "(iptables on the loopback interface, a same-machine test tool; the "
                        "processes and their driver links live): a partial partition")
    p.add_argument("--isolate", action="append", default=[], metavar="SITE@SECONDS=DURATION",
                   help="as --cut, and the site's links to the driver too")
    p.add_argument("--hang", action="append", default=[], metavar="SITE@SECONDS=DURATION",
                   help="freeze a site's process (SIGSTOP) at SECONDS for DURATION seconds, "
                        "then let it go on (SIGCONT): a hung site, found by its heartbeat")
    p.add_argument("--tls", action="store_true",
                   help="TLS on every connection of the run (a certificate made for the run); "
                        "connections are authenticated with the run's secret either way")
    p.add_argument("--max-frame-mb", type=float, default=None, metavar="MB",
                   help="the largest frame a data or control connection accepts (default 256; "
                        "a larger frame closes the connection as a protocol error)")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="draw output rate and latency over time, kills marked (Fig. 3.16)")
    p.add_argument("--heartbeat-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat before a site counts as failed (hung); "
                        f"at least {MIN_HEARTBEAT_TIMEOUT_S:.1f} (a busy site's heartbeats can "
                        "be a second apart)")
    p.add_argument("--link-timeout", type=float, default=LINK_TIMEOUT_S,
                   help="seconds a site may wait on a link to a peer and hear nothing before "
                        "it reports the peer unreachable (a site cut off from its peers, or "
                        f"hung, is excluded); at least {MIN_LINK_TIMEOUT_S:.1f}")
    p.add_argument("--recovery", choices=["standby", "survivors"], default="standby",
                   help="with --ha flux: rebuild a failed site's replicas on a standby (Spark's "
                        "restarted task or a spare) or at once on the surviving sites")
    p.add_argument("--standby-wait", type=float, default=None, metavar="SECONDS",
                   help="with --recovery standby: recover onto the surviving sites if no "
                        "standby has adopted a failed site's slot after this long (default: "
                        "measured: at least 5 s, twice the sites' start, 1.5 times the "
                        "slowest adoption so far, at most 60 s)")
    p.add_argument("--no-balance", action="store_true",
                   help="with --ha flux: turn the load-balancing policy off")
    p.add_argument("--balance-delta-min", type=float, default=0.25, metavar="SECONDS",
                   help="the shortest collection phase of the load-balancing policy")
    p.add_argument("--balance-window", type=float, default=2.0, metavar="SECONDS",
                   help="how far back the load-balancing policy's statistics reach while "
                        "the placement is unchanged (0: each collection phase alone)")
    p.add_argument("--max-dead-letters", type=float, default=0.01, metavar="FRACTION",
                   help="exit with code 3 and say so when more than this fraction of the "
                        "input goes to the dead letters (default 0.01)")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.add_argument("--check", action="store_true",
                   help="then compute the example's reference in the same Spark session and "
                        "compare: match or mismatch, with the differing rows (exit code 1 on a "
                        "mismatch)")
    return p, module


def _first_positional(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def cmd_run(argv: list[str]) -> int:
    parser, module = _run_parser(_first_positional(argv))
    args = parser.parse_args(argv)
    if module is None:
        parser.error("give the example dataflow's path")
    run_config(**options_of(args))  # a bad option fails here, before Spark starts (--check)
    display = None if args.no_progress else live_progress
    check = None
    if args.check:
        from sparkflux.check import check_example

        result, check = check_example(module, args, display=display, announce=console.print)
    else:
        result = run_example(module, args, display=display, announce=console.print)
    _print_summary(result.metrics)
    if args.plot:
        from sparkflux.runtime.plot import plot_timeline

        plot_timeline(args.plot, result.timeline, result.ingress_timeline, result.events,
                      f"{Path(args.example).stem}: --ha {args.ha}, {args.sites} sites, "
                      f"{args.partitions} partitions")
        console.print(f"timeline drawn to {args.plot}")
    if args.metrics:
        write_metrics(args.metrics, result.metrics)
        console.print(f"metrics written to {args.metrics}")
    if check is not None:
        print("check: " + ("match" if check.match else "MISMATCH"))
        for line in check.lines:
            print(f"  {line}")
        if not check.match:
            return 1
    return 3 if _too_many_dead_letters(result.metrics, args.max_dead_letters) else 0


def _too_many_dead_letters(metrics: dict[str, Any], fraction: float) -> bool:
    """Say loudly when more than ``fraction`` of the input went to the dead letters."""
    dead = metrics.get("dead_letters", 0)
    seen = dead + metrics.get("input_tuples", 0)
    if not seen or dead <= fraction * seen:
        return False
    console.print(f"[bold red]{dead:,} of {seen:,} input records ({dead / seen:.1%}) went to "
                  f"the dead letters, more than --max-dead-letters {fraction:g}:[/]")
    for kind, r in metrics.get("dead_letter_reasons", {}).items():
        console.print(f"[red]  {r['count']:,} {kind}, e.g. {r['first']}[/]")
    if "late" in metrics.get("dead_letter_reasons", {}):
        console.print("[red]  (records behind their source's watermark are late: give the "
                      "source an allowed lateness, Source.lateness or source(..., "
                      "lateness=), or --lateness where the example has one)[/]")
    return True


def _print_summary(metrics: dict[str, Any]) -> None:
    t = Table(title="run summary", show_header=False)
    for k, v in metrics.items():
        t.add_row(k, f"{v:,}" if isinstance(v, int) else str(v))
    Console().print(t)


def cmd_reference(argv: list[str]) -> int:
    parser, module = _example_parser("reference", _first_positional(argv))
    parser.add_argument("--master", default="local[2]", help="Spark master for the reference")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if module is None:
        parser.error("give the example dataflow's path")
    expected, seconds = reference_result(module, args)
    out: dict[str, Any] = {}
    if expected.output_digest is not None:  # only a reference that numbers its rows
        out["output_digest"] = expected.output_digest
    out |= {"rows_digest": expected.rows_digest, "output_tuples": expected.rows,
            "duration_s": round(seconds, 3)}
    if args.json:
        print(json.dumps(out))
    else:
        print("\n".join(f"{k} {v}" for k, v in out.items()))
    return 0


def cmd_demo(argv: list[str]) -> int:
    from sparkflux.demo import demo

    return demo(argv)


if __name__ == "__main__":
    sys.exit(main())
