"""The ``sparkflux`` command: ``run``, ``reference`` and ``demo``.

    sparkflux run examples/netmon.py --events 1000000 --sites 4 --partitions 32 --ha none \\
        --output out/netmon.parquet --metrics out/metrics.json
    sparkflux reference examples/netmon.py --events 1000000
    sparkflux demo
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.dataflow.examples import load_example
from sparkflux.operators.base import PlanError
from sparkflux.runtime.driver import LiveStats, RunConfig, RunFailed, run, write_metrics
from sparkflux.runtime.sinks import DeadLetters, NullSink, ParquetSink

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
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: embedded local mode local[SITES,400])")
    p.add_argument("--rate", type=float, default=None,
                   help="pace the source at R events/s as a push source (drops when full)")
    p.add_argument("--ingress-buffer", type=int, default=200_000,
                   help="records the ingress buffers in --rate mode before it drops")
    p.add_argument("--window", type=int, default=400_000,
                   help="input records in flight (not yet complete at the egress)")
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
                        "process adopts it")
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
                   help="seconds without a heartbeat before a site counts as failed (hung)")
    p.add_argument("--recovery", choices=["standby", "survivors"], default="standby",
                   help="with --ha flux: rebuild a failed site's replicas on a standby (Spark's "
                        "restarted task or a spare) or at once on the surviving sites")
    p.add_argument("--standby-wait", type=float, default=5.0, metavar="SECONDS",
                   help="with --recovery standby: recover onto the surviving sites if no "
                        "standby has adopted a failed site's slot after this long")
    p.add_argument("--no-balance", action="store_true",
                   help="with --ha flux: turn the load-balancing policy off")
    p.add_argument("--balance-delta-min", type=float, default=0.25, metavar="SECONDS",
                   help="the shortest collection phase of the load-balancing policy")
    p.add_argument("--balance-window", type=float, default=2.0, metavar="SECONDS",
                   help="how far back the load-balancing policy's statistics reach while "
                        "the placement is unchanged (0: each collection phase alone)")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    return p, module


def _first_positional(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def cmd_run(argv: list[str]) -> int:
    parser, module = _run_parser(_first_positional(argv))
    args = parser.parse_args(argv)
    if module is None:
        parser.error("give the example dataflow's path")
    result = run_example(module, args, show_progress=not args.no_progress)
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
    return 0


def run_example(module: Any, args: argparse.Namespace, show_progress: bool = True,
                sink: Any = None, dead: DeadLetters | None = None, spark: Any = None) -> Any:
    """Build, compile and run an example with parsed ``args`` (the CLI and tests share it)."""
    opts = module.options(args)
    if hasattr(opts, "batch") and getattr(args, "batch_size", None):
        from dataclasses import replace

        opts = replace(opts, batch=args.batch_size)
    plan = compile_plan(module.build(opts), args.partitions, args.sites)
    if args.rate is not None and args.rate <= 0:
        raise PlanError("--rate must be positive")
    if sink is None:
        sink = ParquetSink(args.output) if args.output else NullSink()
    if dead is None:
        path = args.dead_letter or (str(Path(args.output).with_suffix(".dead-letter.jsonl"))
                                    if args.output else None)
        dead = DeadLetters(path)
    cfg = RunConfig(sites=args.sites, partitions=args.partitions, master=args.master,
                    ha=args.ha, rate=args.rate, ingress_buffer=args.ingress_buffer,
                    window=args.window, kills=parse_kills(getattr(args, "kill", []), args.sites),
                    adopted_kills=parse_adopted_kills(getattr(args, "kill", []), args.sites),
                    hangs=parse_hangs(getattr(args, "hang", []), args.sites),
                    tls=getattr(args, "tls", False),
                    max_frame_mb=getattr(args, "max_frame_mb", None),
                    heartbeat_timeout=getattr(args, "heartbeat_timeout", 10.0),
                    spares=getattr(args, "spare_sites", 0),
                    site_cpu=_site_cpu(getattr(args, "site_cpu", None)),
                    slows=parse_slows(getattr(args, "slow", []), args.sites),
                    recovery=getattr(args, "recovery", "standby"),
                    balance=not getattr(args, "no_balance", False),
                    delta_min=_seconds("--balance-delta-min",
                                       getattr(args, "balance_delta_min", 0.25)),
                    window_s=_window(getattr(args, "balance_window", 2.0)),
                    standby_wait=_seconds("--standby-wait", getattr(args, "standby_wait", 5.0)))
    console.print(plan.describe())
    return run(plan, cfg, sink, dead, spark=spark,
               display=_display if show_progress else None)


def parse_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@SECONDS`` options, checked (a bad one fails fast with what to change).

    ``SITE@recovered+SECONDS`` kills the site that long after the first recovery completes;
    it comes back with a negative time: -(1 + SECONDS)."""
    out = []
    for spec in specs:
        if "@adopted+" in spec:
            continue  # parse_adopted_kills
        try:
            site_s, at_s = spec.split("@")
            site = int(site_s)
            if at_s.startswith("recovered+"):
                out.append((site, -1.0 - float(at_s.removeprefix("recovered+"))))
                if not 0 <= site < sites:
                    raise ValueError
                continue
            at = float(at_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE@SECONDS (e.g. --kill 1@3), "
                            f"SITE@recovered+SECONDS or SITE@adopted+SECONDS") from None
        if not 0 <= site < sites or at < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
        out.append((site, at))
    return tuple(out)


def parse_adopted_kills(specs: list[str], sites: int) -> tuple[tuple[int, float], ...]:
    """``SITE@adopted+SECONDS`` options: kill the slot's next process that long after it
    adopts the slot (a standby killed right after its adoption)."""
    out = []
    for spec in specs:
        if "@adopted+" not in spec:
            continue
        try:
            site_s, delay_s = spec.split("@adopted+")
            site, delay = int(site_s), float(delay_s)
        except ValueError:
            raise PlanError(f"--kill {spec!r}: write SITE@adopted+SECONDS, e.g. "
                            f"--kill 1@adopted+0.2") from None
        if not 0 <= site < sites or delay < 0:
            raise PlanError(f"--kill {spec!r}: site must be in 0..{sites - 1}, seconds >= 0")
        out.append((site, delay))
    return tuple(out)


def parse_hangs(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``SITE@SECONDS=DURATION`` options, checked."""
    out = []
    for spec in specs:
        try:
            where, dur_s = spec.split("=")
            site_s, at_s = where.split("@")
            site, at, duration = int(site_s), float(at_s), float(dur_s)
        except ValueError:
            raise PlanError(f"--hang {spec!r}: write SITE@SECONDS=DURATION, e.g. "
                            f"--hang 1@3=8") from None
        if not 0 <= site < sites or at < 0 or duration <= 0:
            raise PlanError(f"--hang {spec!r}: site in 0..{sites - 1}, seconds >= 0, "
                            f"duration > 0")
        out.append((site, at, duration))
    return tuple(out)


def _seconds(option: str, value: float) -> float:
    if not value > 0:
        raise PlanError(f"{option} {value}: give a positive number of seconds")
    return value


def _window(value: float) -> float:
    if not value >= 0:
        raise PlanError(f"--balance-window {value}: give seconds, 0 or more (0: each "
                        "collection phase alone)")
    return value


def _site_cpu(value: float | None) -> float | None:
    if value is not None and not 0.0 < value <= 1.0:
        raise PlanError(f"--site-cpu {value}: give a fraction of wall time in (0, 1], e.g. 0.4")
    return value


def parse_slows(specs: list[str], sites: int) -> tuple[tuple[int, float, float], ...]:
    """``SITE@SECONDS=FACTOR`` options, checked."""
    out = []
    for spec in specs:
        try:
            where, factor_s = spec.split("=")
            site_s, at_s = where.split("@")
            site, at, factor = int(site_s), float(at_s), float(factor_s)
        except ValueError:
            raise PlanError(f"--slow {spec!r}: write SITE@SECONDS=FACTOR, e.g. --slow 2@2=0.5"
                            ) from None
        if not 0 <= site < sites or at < 0 or factor <= 0:
            raise PlanError(f"--slow {spec!r}: site in 0..{sites - 1}, seconds >= 0, "
                            f"factor > 0")
        out.append((site, at, factor))
    return tuple(out)


def _display(stats: LiveStats, done: threading.Event) -> None:
    def table() -> Table:
        t = Table.grid(padding=(0, 2))
        elapsed = time.time() - stats.started_at if stats.started_at else 0.0
        rate = stats.events_in / elapsed if elapsed > 0 else 0.0
        total = f"/{stats.total:,}" if stats.total else ""
        t.add_row("[bold]phase[/]", stats.phase)
        t.add_row("events in", f"{stats.events_in:,}{total}")
        t.add_row("results out", f"{stats.results_out:,}")
        t.add_row("rate", f"{rate:,.0f} events/s")
        t.add_row("dead letters", f"{stats.dead_letters:,}")
        t.add_row("dropped at ingress", f"{stats.dropped:,}")
        return t

    with Live(table(), console=console, refresh_per_second=4, transient=False) as live:
        while not done.wait(0.25):
            live.update(table())
        live.update(table())
    console.print()


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
    digest, rows, seconds = reference_digest(module, args)
    if args.json:
        print(json.dumps({"output_digest": digest, "output_tuples": rows,
                          "duration_s": round(seconds, 3)}))
    else:
        print(f"output_digest {digest}\noutput_tuples {rows}\nduration_s {seconds:.1f}")
    return 0


def reference_digest(module: Any, args: argparse.Namespace, spark: Any = None
                     ) -> tuple[str, int, float]:
    from sparkflux.spark.launcher import spark_session
    from sparkflux.spark.reference import reference_digest as digest_of_df

    if not hasattr(module, "reference"):
        raise PlanError(f"{module.__file__} has no reference(spark, options)")
    opts = module.options(args)
    t = time.time()
    spark = spark or spark_session(getattr(args, "master", None) or "local[2]",
                                   "sparkflux-reference")
    digest, rows = digest_of_df(module.reference(spark, opts))
    return digest, rows, time.time() - t


def cmd_demo(argv: list[str]) -> int:
    from sparkflux.demo import demo

    return demo(argv)


if __name__ == "__main__":
    sys.exit(main())
