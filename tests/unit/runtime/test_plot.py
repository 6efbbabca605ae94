"""The run's timeline picture (``runtime/plot.py``): its events by label, and a PNG drawn from
them, squeezes and memory moves among them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

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


def test_consistency_states_become_shaded_spans_and_tentative_output_a_line(
        tmp_path: Path) -> None:
    """The input's state changes: each upstream failure and stabilization a (start, end)
    pair, the last one open until the run's end; drawn with the tentative output."""
    states = [(1.0, "upstream-failure"), (4.0, "stabilization"), (4.5, "stable"),
              (6.0, "upstream-failure")]
    events = timeline_events([], [], states=states, end=9.0)
    assert events["upstream failure"] == [1.0, 4.0, 6.0, 9.0]
    assert events["stabilization"] == [4.0, 4.5]
    m = EgressMetrics()
    m.start = 0.0
    m.tentative(pa.RecordBatch.from_pydict({"_t0": [0.5, 0.6]}), 1.5)
    assert m.tentative_counts == [2] and m.max_processing_delay == 1.0
    png = tmp_path / "e.png"
    plot_timeline(png, m, ([0.5, 1.0], [10, 20]), events, "a cut source")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
