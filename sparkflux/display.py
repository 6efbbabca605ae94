"""The live view of a run in the terminal (``sparkflux run``, ``sparkflux demo``), drawn with
rich while the driver's host thread runs the dataflow: the phase and input state, rows in
and out with their rates, latency, each stage's event-time watermark and every site with
its role and copies, from the run's progress (``runtime/progress.py``). Each failure, its
take-over, an adoption, a catch-up, a move or a stall is printed above the block as it
happens, so the story of the run stays on screen after it ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sparkflux.runtime.progress import QueryProgress, RunEvent, SiteState

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

console = Console()
Display = Callable[["Host"], None]  # what ``run`` and ``run_example`` call with the host

_MARK = {"failure": "[bold red]✗[/]", "take-over": "[yellow]→[/]", "adoption": "[cyan]+[/]",
         "catch-up": "[cyan]↻[/]", "caught-up": "[green]✓[/]", "move": "[magenta]⇄[/]",
         "moved": "[magenta]⇄[/]", "stall": "[bold yellow]![/]", "input-ended": "[dim]■[/]",
         "checkpoint": "[dim]◆[/]", "restored": "[green]◆[/]", "rescale": "[bold magenta]⤢[/]",
         "retired": "[dim]−[/]", "tentative": "[yellow]~[/]", "corrected": "[green]~[/]"}
_ROLE = {"live": "green", "catching up": "cyan", "failed": "bold red", "standby": "dim",
         "starting": "cyan"}


def event_line(e: RunEvent) -> str:
    """One event as the live view prints it."""
    return f"{_MARK.get(e.kind, '·')} [dim]{e.at_s:7.2f} s[/]  {e.detail}"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.0f} ms"


def _site(s: SiteState) -> str:
    if s.role == "standby":
        return f"[dim]standby {s.pid or ''}[/]"
    busy = f" {s.busy:.0%}" if s.busy is not None else ""
    building = f" +{s.building}" if s.building else ""
    memory = ""
    if s.budget_bytes is not None and s.memory_bytes is not None:  # only under a budget
        over = s.memory_bytes > s.budget_bytes
        memory = (f" {'[red]' if over else ''}{s.memory_bytes / 1e6:.1f}/"
                  f"{s.budget_bytes / 1e6:.1f} MB{'[/]' if over else ''}")
        if s.spilled_bytes:
            memory += f" [magenta]{s.spilled_bytes / 1e6:.1f} MB on disk[/]"
    return (f"[{_ROLE[s.role]}]{s.site}[/] {s.role} {s.copies}{building} copies{busy}{memory}"
            if s.role != "failed" else f"[{_ROLE[s.role]}]{s.site} failed[/]")


def block(host: Host, p: QueryProgress | None) -> Group:
    """The block redrawn under the events."""
    stats = host.stats
    elapsed = time.time() - stats.started_at if stats.started_at else 0.0
    total = f"/{stats.total:,}" if stats.total else ""
    t = Table.grid(padding=(0, 2))
    t.add_row("[bold]phase[/]", f"{stats.phase}  [dim]{elapsed:.1f} s, input "
                                f"{host.input_state}[/]")
    rate_in = f"{p.input_rows_per_s:,.0f}/s" if p else ""
    rate_out = f"{p.output_rows_per_s:,.0f}/s" if p else ""
    t.add_row("in", f"{stats.events_in:,}{total}  [dim]{rate_in}[/]")
    t.add_row("out", f"{stats.results_out:,}  [dim]{rate_out}[/]")
    if p is not None:
        t.add_row("latency", f"p50 {_ms(p.latency_p50_s)}  p99 {_ms(p.latency_p99_s)}")
        marks = [f"{s.stage}: " + ("ended" if s.ended else "-" if s.watermark is None
                                   else f"{s.watermark:,}") for s in p.stages]
        t.add_row("watermark", "  ".join(marks))
        t.add_row("sites", "  ".join(_site(s) for s in p.sites))
    if stats.dead_letters or stats.dropped:
        t.add_row("rejected", f"{stats.dead_letters:,} dead letters, {stats.dropped:,} "
                              f"dropped at the ingress")
    return Group(t)


def live_progress(host: Host) -> None:
    """Redraw the run's block four times a second until the run ends, printing each new
    event above it."""
    log = host.progress
    shown = 0
    with Live(block(host, None), console=console, refresh_per_second=4,
              transient=False) as live:
        while True:
            ended = host.done.wait(0.25)
            with log.lock:
                new = log.events[shown:]
            shown += len(new)
            for e in new:
                if e.kind != "checkpoint":  # routine: the block and the dashboard show them
                    live.console.print(Text.from_markup(event_line(e)))
            live.update(block(host, log.last))
            if ended:
                break
    console.print()


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} KB"


SHOWN = 4  # failures, moves and stalls listed one a line; more are counted


def summary(metrics: dict[str, Any], title: str = "run summary") -> Table:
    """The end of a run on one screen: input, output and digests, latency, each failure
    (detection, output gap, back to fault tolerance), catch-ups, adoptions, moves, stalls,
    the sites' utilisation. Everything else is in the metrics JSON (``--metrics``)."""
    m = metrics
    t = Table(title=title, show_header=False, title_justify="left", box=None, padding=(0, 2))
    dur = m.get("duration_s", 0.0)
    t.add_row("input", f"{m['input_tuples']:,} rows in {dur:,.2f} s "
                       f"({m.get('throughput_tps', 0):,.0f} rows/s)")
    rejected = f"{m.get('dead_letters', 0):,} dead letters, {m.get('ingress_dropped', 0):,} "\
               f"dropped at the ingress"
    t.add_row("", rejected)
    t.add_row("output", f"{m['output_tuples']:,} rows")
    t.add_row("digest", f"{m['output_digest']}")
    t.add_row("rows digest", f"{m['rows_digest']}")
    for name, sink in m.get("sinks", {}).items():
        t.add_row(f"  {name}", f"{sink['rows']:,} rows, digest {sink['output_digest'][:16]}")
    t.add_row("latency", f"p50 {_ms(m.get('latency_p50_s'))}, p99 {_ms(m.get('latency_p99_s'))};"
                         f" longest output gap {m.get('max_output_gap_s', 0):.3f} s")
    failures = m.get("failures", [])
    t.add_row("failures", f"{len(failures)}" + (f" ({m.get('kills', 0)} killed)"
                                                 if m.get("kills") else ""))
    for f in failures[:SHOWN]:
        ft = f.get("fault_tolerant_after_s")
        t.add_row("", f"site {f['site']} at {f['killed_at_s']:.2f} s: detected after "
                      f"{_ms(f['detected_after_s'])}, output gap {f['max_output_gap_s']:.3f} s, "
                      + (f"all copies again after {ft:.2f} s" if ft is not None
                         else "not all copies again by the end"))
    if len(failures) > SHOWN:
        t.add_row("", f"... {len(failures) - SHOWN} more failures in the metrics")
    cus = m.get("recoveries", [])
    if cus:
        t.add_row("catch-ups", f"{len(cus)} copies, {_mb(sum(c['state_bytes'] for c in cus))} "
                               f"of state, the longest {max(c['duration_s'] for c in cus):.2f} "
                               f"s")
    adoptions = m.get("adoptions", [])
    if adoptions:
        t.add_row("adoptions", ", ".join(f"site {a['slot']} after {a['after_s']:.2f} s"
                                         for a in adoptions[:SHOWN]))
    moves = m.get("moves", [])
    if moves:
        short = max(mv.get("short_of_copies_s", 0.0) for mv in moves)
        t.add_row("moves", f"{len(moves)} ({m.get('balance_rounds', 0)} balancing rounds); "
                           f"longest short of copies {short:.3f} s")
    gc = m.get("stream_replicas") or {}
    if gc.get("keep"):  # --stream-replicas
        t.add_row("streams", f"each copy keeps {gc['keep']} sender per input stream; "
                             f"{gc['collected']:,} collected, {gc['revived']:,} revived")
    stalls = m.get("stalls", [])
    for stall in stalls[:SHOWN]:
        t.add_row("stall", f"at {stall['at_s']:.1f} s: {stall['message']}")
    if len(stalls) > SHOWN:
        t.add_row("", f"... {len(stalls) - SHOWN} more stalls in the metrics")
    util = m.get("utilisation", {})
    if util:
        t.add_row("sites busy", "  ".join(f"{k}: {v:.0%}" for k, v in util.items()))
    t.add_row("", "[dim]everything else: the metrics JSON (--metrics FILE)[/]")
    return t
