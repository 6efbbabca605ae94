"""The push source's drops (``sparkflux/runtime/pacing.py``, ``PacedBuffer``): what the
ingress buffer cannot hold is dropped, counted, and logged, a warning when a run of drops
begins and one when it ends, with its count; every record is either admitted or counted as
dropped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pyarrow as pa
import pytest

from sparkflux.dataflow.api import Source
from sparkflux.runtime import pacing
from sparkflux.runtime.pacing import WAIT, PacedBuffer
from sparkflux.runtime.run_config import LiveStats

from .test_source_wait import SCHEMA, feed

TOTAL = 6_000


class Counting(Source):
    """``TOTAL`` records numbered from 0, in batches of 100."""

    schema = SCHEMA

    def batches(self) -> Iterator[pa.RecordBatch]:
        for start in range(0, TOTAL, 100):
            yield pa.RecordBatch.from_pydict({"x": list(range(start, start + 100))},
                                             schema=SCHEMA)


def run(stall_s: float, capacity: int) -> tuple[list[int], LiveStats, PacedBuffer]:
    """Pace ``Counting`` at 20K/s into a buffer of ``capacity``; nothing is taken for the
    first ``stall_s`` (the admission held back, as by a cut-off site), then everything."""
    stats = LiveStats(total=None)
    buf = PacedBuffer(feed(Counting()), rate=20_000.0, capacity=capacity, stats=stats,
                      flush_rows=1, flush_s=0.0)

    async def go() -> list[int]:
        task = asyncio.create_task(buf.produce())
        await asyncio.sleep(stall_s)
        taken: list[int] = []
        while True:
            await asyncio.sleep(0.002)
            got = buf.take()
            if got is None:
                break
            if got is not WAIT:
                taken.extend(x for _, b in got if b is not None for x in b.column("x").to_pylist())
        await task
        return taken

    return asyncio.run(go()), stats, buf


def test_drops_are_logged_when_they_begin_and_when_they_end_with_counts(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "DROPS_QUIET_S", 0.05)
    with caplog.at_level(logging.WARNING, logger="sparkflux.runtime.pacing"):
        taken, stats, buf = run(stall_s=0.15, capacity=1_000)
    assert 0 < stats.dropped < TOTAL - 1_000
    assert len(taken) + stats.dropped == TOTAL and taken == sorted(set(taken))
    warned = [r.getMessage() for r in caplog.records]
    assert buf.drop_runs == 1 and len(warned) == 2, warned
    assert warned[0].startswith("input dropped: the ingress buffer is full (1,000 records, "
                                "--ingress-buffer) and the push source sends 20,000 records/s")
    assert warned[1].startswith(f"input no longer dropped (none for 0.05 s): "
                                f"{stats.dropped:,} records dropped over ")
    assert warned[1].endswith(f"; {stats.dropped:,} dropped in all so far")


def test_drops_until_the_input_ends_are_logged_at_its_end(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkflux.runtime.pacing"):
        taken, stats, _ = run(stall_s=0.5, capacity=200)  # the whole input is due by then
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and warned[1].startswith(
        f"input no longer dropped (the input ended): {stats.dropped:,} records dropped")
    assert len(taken) + stats.dropped == TOTAL and len(taken) <= 200


def test_no_drop_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkflux.runtime.pacing"):
        taken, stats, _ = run(stall_s=0.0, capacity=TOTAL)
    assert taken == list(range(TOTAL)) and stats.dropped == 0 and caplog.records == []
