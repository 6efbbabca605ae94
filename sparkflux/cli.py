"""The ``sparkflux`` command: ``run``, ``reference``, ``demo`` and ``supervise``.

    sparkflux run examples/netmon.py --events 1000000 --sites 4 --partitions 32 --ha none \\
        --output out/netmon.parquet --metrics out/metrics.json
    sparkflux reference examples/netmon.py --events 1000000
    sparkflux run examples/clicks.py --events 200000 --sites 2 --partitions 8 --check
    sparkflux demo
    sparkflux supervise --restarts 5 -- spark-submit --master spark://host:7077 app.py
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from sparkflux.dataflow.examples import load_example
from sparkflux.display import live_progress, summary
from sparkflux.model.errors import PlanError
from sparkflux.options import add_run_options, options_of, run_config
from sparkflux.runner import reference_result, run_example
from sparkflux.runtime.run_config import RunFailed, write_metrics
from sparkflux.supervisor import Policy, supervise

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
        if command == "supervise":
            return cmd_supervise(rest)
    except (PlanError, RunFailed) as e:
        console.print(f"[bold red]error:[/] {e}")
        return 2
    console.print(f"[red]unknown command {command!r}[/]; use run, reference, demo or supervise")
    return 2


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparkflux", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["run", "reference", "demo", "supervise"])
    return p


def _example_parser(prog: str, example_path: str | None) -> tuple[argparse.ArgumentParser, Any]:
    p = argparse.ArgumentParser(prog=f"sparkflux {prog}", allow_abbrev=False)
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
    add_run_options(p)  # every RunOptions field (sparkflux/options.py)
    p.add_argument("--output", default=None,
                   help="write the ordered output to this directory of Parquet part files, "
                        "readable after any crash")
    p.add_argument("--output-table", default=None, metavar="PATH",
                   help="write the ordered output as a Parquet table that Spark reads while "
                        "the run goes on (files named by output sequence range); a run "
                        "restarted from --checkpoint continues it, no row twice")
    p.add_argument("--dead-letter", default=None,
                   help="JSON-lines file for rejected input (default: next to --output or "
                        "--output-table, its suffix replaced: out.parquet -> "
                        "out.dead-letter.jsonl)")
    p.add_argument("--metrics", default=None, help="write the run's metrics JSON here")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="draw output rate and latency over time, kills marked (Fig. 3.16)")
    p.add_argument("--max-dead-letters", type=float, default=0.01, metavar="FRACTION",
                   help="exit with code 3 and say so when more than this fraction of the "
                        "input goes to the dead letters (default 0.01)")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")
    p.add_argument("--check", action="store_true",
                   help="then compute the example's reference in the same Spark session and "
                        "compare: match or mismatch, with the differing rows (exit code 1 on a "
                        "mismatch)")
    return p, module


def run_args(example: str | Path, **overrides: Any) -> argparse.Namespace:
    """The arguments of ``sparkflux run EXAMPLE`` with every default (``RunOptions``' and the
    example's own), then ``overrides`` (names as parsed: ``spare_sites``, ``kill=["1@3"]``):
    what a bench or a test runs an example with, instead of listing every option by hand."""
    parser, _ = _run_parser(str(example))
    args = parser.parse_args([str(example)])
    unknown = sorted(set(overrides) - set(vars(args)))
    if unknown:
        raise PlanError(f"no option(s) {', '.join(unknown)} for {example}; the options are: "
                        f"{', '.join(sorted(vars(args)))}")
    for name, value in overrides.items():
        setattr(args, name, value)
    return args


def reference_page() -> str:
    """docs/cli.md: every option of ``sparkflux run`` as its parser has it (flag, default,
    help), for any example (an example's own options are listed in docs/usage.md). Written by
    ``scripts/cli_reference.py``; tests/unit/surface/test_run_options_typed.py checks that the
    page matches."""
    parser, _ = _run_parser(None)
    lines = ["# `sparkflux run` options", "",
             "Generated from the command's parser, which is generated from `RunOptions` "
             "(`sparkflux/runtime/run_options.py`): write `.venv/bin/python "
             "scripts/cli_reference.py` after changing an option. docs/usage.md says more "
             "about each.", "",
             "| option | default | what it does |", "|---|---|---|"]
    for action in parser._actions:  # argparse keeps its options there, in order
        if not action.option_strings or action.dest == "help":
            continue
        flag = ", ".join(action.option_strings)
        if action.nargs != 0:
            flag += f" {action.metavar or action.dest.upper()}"
        if action.choices:
            flag = f"{', '.join(action.option_strings)} {{{','.join(action.choices)}}}"
        default = action.default
        shown = ("(repeatable)" if default == [] else "" if default is None or action.nargs == 0
                 else f"`{default}`")
        lines.append(f"| `{flag}` | {shown} | {action.help} |")
    return "\n".join(lines) + "\n"


def _first_positional(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def cmd_run(argv: list[str]) -> int:
    parser, module = _run_parser(_first_positional(argv))
    args = parser.parse_args(argv)
    if module is None:
        parser.error("give the example dataflow's path")
    run_config(**options_of(args))  # a bad option fails here, before Spark starts (--check)
    if args.restart:  # this command again, as a child of the supervisor (docs/supervision.md)
        child = [sys.executable, "-m", "sparkflux.cli", "run", *_without(argv, "--restart")]
        return supervise(child, Policy(restarts=args.restart))
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

        assert result.timeline is not None  # a run's result has its egress timeline
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


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value (``--restart 2`` or ``--restart=2``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return out


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
    Console().print(summary(metrics))


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


def _supervise_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sparkflux supervise", allow_abbrev=False,
        usage="sparkflux supervise [options] -- CMD ARGS...",
        description="Run CMD (a driver: spark-submit app.py, python app.py, sparkflux run ...) "
                    "in a process group of its own and start it again when it dies (killed, "
                    "or a non-zero exit code other than 2, 3 and 130), after a back-off, at "
                    "most --restarts times. SIGINT and SIGTERM are forwarded, and then it is "
                    "not restarted. docs/supervision.md")
    p.add_argument("--restarts", type=int, default=Policy.restarts, metavar="N",
                   help="restarts at most, in the whole supervision (default 3)")
    p.add_argument("--backoff", type=float, default=Policy.backoff, metavar="SECONDS",
                   help="the first restart's delay, doubled with each consecutive restart "
                        "(default 1)")
    p.add_argument("--max-backoff", type=float, default=Policy.max_backoff, metavar="SECONDS",
                   help="the longest delay (default 30)")
    p.add_argument("--stable-after", type=float, default=Policy.stable_after,
                   metavar="SECONDS", help="a command that ran longer than this was working: "
                                           "the next delay is --backoff again (default 60)")
    return p


def cmd_supervise(argv: list[str]) -> int:
    parser = _supervise_parser()
    if "--" not in argv:
        if "-h" in argv or "--help" in argv:
            parser.print_help()
            return 0
        parser.error("give the command after --: sparkflux supervise [options] -- CMD ARGS...")
    at = argv.index("--")
    args, command = parser.parse_args(argv[:at]), argv[at + 1:]
    if not command:
        parser.error("give the command after --: sparkflux supervise [options] -- CMD ARGS...")
    return supervise(command, Policy(restarts=args.restarts, backoff=args.backoff,
                                     max_backoff=args.max_backoff,
                                     stable_after=args.stable_after))


def cmd_demo(argv: list[str]) -> int:
    from sparkflux.demo import demo

    return demo(argv)


if __name__ == "__main__":
    sys.exit(main())
