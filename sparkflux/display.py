"""The live progress display of a run (events in, results out, rate, phase), drawn with rich
in the terminal while the driver's host thread runs the dataflow."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sparkflux.runtime.run_config import LiveStats

console = Console()

def live_progress(stats: LiveStats, done: threading.Event) -> None:
    """Redraw the run's counters four times a second until ``done``."""
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
