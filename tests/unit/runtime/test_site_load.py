"""A site's load in the metrics (``runtime/site_load.py``): the rows it holds with their
maxima, its memory, and spills, loads, input spilled and the longest spill pause counted over
every process its slot has had."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sparkflux.protocol import control_messages as cm
from sparkflux.runtime.site_load import site_load


def beat(pid: int, spills: int, loads: int, state: bool = True, buffered: int = 0
         ) -> cm.Heartbeat:
    return cm.Heartbeat(site=2, attempt=0, pid=pid, busy_s=1.0, slept_s=0.0, passes=3,
                        cpu_s=1.0, buffered=buffered, capacity_s=1.0, at=0.0,
                        has_state=state, memory=1000, budget=500, spilled=200,
                        spills=spills, loads=loads)


def test_spills_and_loads_carry_over_a_new_process_of_the_slot() -> None:
    a = site_load(beat(10, 5, 3), {})
    assert (a["spills"], a["loads"], a["memory_bytes"], a["budget_bytes"]) == (5, 3, 1000, 500)
    b = site_load(beat(10, 7, 4, state=False, buffered=9), a)  # no state: memory kept
    assert (b["spills"], b["loads"], b["memory_bytes"], b["buffered_rows_max"]) == (5, 3,
                                                                                    1000, 9)
    c = site_load(beat(11, 0, 0, state=False), b)  # the slot's next process, no state yet
    assert (c["spills"], c["loads"]) == (5, 3)
    d = site_load(beat(11, 2, 1), c)
    assert (d["spills"], d["loads"], d["pid"]) == (7, 4, 11)


def test_the_longest_spill_pause_and_the_input_spilled_span_the_slots_processes() -> None:
    a = site_load(replace(beat(10, 5, 3), memory_pause_s=0.04, input_spills=6,
                          state_bytes=np.array([300, 100], dtype=np.int64)), {})
    assert (a["memory_pause_max_s"], a["input_spills"], a["state_bytes"]) == (0.04, 6, 600)
    b = site_load(replace(beat(11, 1, 1), memory_pause_s=0.01, input_spills=2,
                          state_bytes=np.array([50], dtype=np.int64)), a)
    assert (b["memory_pause_max_s"], b["input_spills"]) == (0.04, 8)
    assert (b["state_bytes"], b["state_bytes_max"]) == (250, 600)  # 50 in memory, 200 on disk
