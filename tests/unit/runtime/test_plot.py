"""The run's timeline picture (``runtime/plot.py``): its events by label, and a PNG drawn from
them, squeezes and memory moves among them."""

from __future__ import annotations

from pathlib import Path

from sparkflux.runtime.metrics import EgressMetrics
from sparkflux.runtime.plot import plot_timeline, timeline_events


def test_events_by_label_with_squeezes_and_memory_moves() -> None:
    events = timeline_events([{"time": 2.0}], [{"time": 2.1}], [{"time": 3.0}],
                             moves=[4.0], slows=[{"time": 1.0}],
                             squeezes=[{"time": 5.0}], memory_moves=[5.5, 6.0])
    assert events == {"kill": [2.0], "take-over": [2.1], "squeeze": [5.0],
                      "memory move": [5.5, 6.0], "recovery": [3.0], "slow-down": [1.0],
                      "move": [4.0]}
    assert timeline_events([], []) == {"kill": [], "take-over": []}


def test_the_picture_is_drawn(tmp_path: Path) -> None:
    m = EgressMetrics()
    m.start = 100.0
    png = tmp_path / "t.png"
    plot_timeline(png, m, ([100.5, 101.0], [10, 20]),
                  timeline_events([], [], squeezes=[{"time": 100.7}], memory_moves=[100.8]),
                  "a squeeze")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
