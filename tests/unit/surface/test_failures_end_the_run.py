"""Every failure ends the run with its cause (the driver's side, no Spark needed): a sink that
cannot open fails the run before Spark starts, naming the sink and the cause, through the
command (exit code 2, one line) and through ``sparkflux.start`` (``RunFailed``); a task of
the driver's loop that fails, or an error its loop catches, ends the run with it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import sparkflux
from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.io.table_sink import TableSink
from sparkflux.runtime.driver import Host
from sparkflux.runtime.run_config import RunConfig, RunFailed
from tests.conftest import ROOT
from tests.support.fake_driver import SEC, small_plan


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    f = tmp_path / "plain-file"
    f.write_text("not a directory")
    return f


def test_an_output_that_cannot_open_stops_the_command_at_once(a_file: Path) -> None:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sparkflux.cli", "run",
                           str(ROOT / "examples" / "netmon.py"), "--events", "1000",
                           "--output", str(a_file / "out.parquet"), "--no-progress"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "400"})  # no wrapping in the path
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "sink 'out' (ParquetSink) could not open: FileExistsError" in out, out
    assert str(a_file) in out and "a directory on the sink's path is a file" in out
    assert "Traceback" not in out  # one clear message, not a stack
    assert "starting Spark" not in out and took < 30  # failed before Spark started


def test_a_table_sink_under_a_file_fails_start(a_file: Path, netmon: Any) -> None:
    flow = netmon.build(netmon.NetmonOptions(events=1000))
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match=r"could not open: (NotADirectoryError|"
                                        r"FileExistsError)"):
        sparkflux.start(flow, spark=None, sink=TableSink(a_file / "table"), sites=2,
                        partitions=4, announce=None)
    assert time.monotonic() - t0 < 5


def a_host(netmon: Any) -> Host:
    """A driver host that is not serving: its loop is the test's."""
    return Host(small_plan(netmon), RunConfig(sites=2, partitions=4, security=SEC),
                NullSink(), DeadLetters())


def test_a_failed_task_of_the_driver_ends_the_run_with_its_cause(netmon: Any) -> None:
    h = a_host(netmon)

    async def main() -> None:
        h._loop = asyncio.get_running_loop()
        h.finished = asyncio.Event()

        async def broken() -> None:
            raise KeyError("the bug")

        h._task(broken(), "the watchdog")
        await asyncio.wait_for(h.finished.wait(), 5)

    asyncio.run(main())
    assert h.failure is not None
    assert h.failure.startswith("the watchdog failed: KeyError: 'the bug' (at ")


def test_an_error_the_loop_catches_ends_the_run(netmon: Any) -> None:
    h = a_host(netmon)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        h._loop = loop
        h.finished = asyncio.Event()
        loop.set_exception_handler(h._loop_error)
        loop.call_soon(lambda: 1 / 0)  # a timer's callback that raises
        await asyncio.wait_for(h.finished.wait(), 5)

    asyncio.run(main())
    assert h.failure is not None and "ZeroDivisionError" in h.failure
