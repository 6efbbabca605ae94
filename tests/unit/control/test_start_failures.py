"""Site tasks that fail before they register: the sans-I/O judge (``StartWatch``), what a
site reports (``start_failed``, ``StartGuard``), and the report's way to a real driver host
(no Spark): repeated failures stop the run with the error and a hint."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from typing import Any

import pytest

from sparkflux.control.start_failures import (
    PER_SLOT,
    REPEATS,
    StartWatch,
    hint,
    signature,
)
from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import handshake
from sparkflux.runtime.driver import Host
from sparkflux.runtime.handshake import Claim
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.start_report import StartGuard, send_report, start_failed
from sparkflux.runtime.transport import ConnectionLost, connect
from tests.support.fake_driver import DRIVER, SEC, small_plan

MISSING = cm.StartFailed(site=0, attempt=0, error_type="ModuleNotFoundError",
                         message="No module named 'helpers'",
                         file="/opt/spark/work/app-1/sparkflux/spark/site_task.py", line=48,
                         function="site_task", source="plan = cloudpickle.loads(blob)",
                         traceback="Traceback (most recent call last): ...")


def report(site: int, attempt: int, base: cm.StartFailed = MISSING, **kw: Any
           ) -> cm.StartFailed:
    return replace(base, site=site, attempt=attempt, **kw)


# -- the judge -------------------------------------------------------------------------------
def test_the_same_failure_from_several_sites_stops_the_run_at_the_third() -> None:
    watch = StartWatch(tasks=4, shipped=("flow", "util"), dataflow="flow.py")
    assert watch.reported(report(0, 0)) is None
    assert watch.reported(report(1, 0)) is None
    stop = watch.reported(report(0, 1))
    assert stop is not None and REPEATS == 3
    assert "the same error 3 times (site 0 attempt 0, site 1 attempt 0, site 0 attempt 1)" in stop
    assert "ModuleNotFoundError: No module named 'helpers'" in stop
    assert ("at /opt/spark/work/app-1/sparkflux/spark/site_task.py:48 in site_task: "
            "plan = cloudpickle.loads(blob)") in stop
    assert "beside flow.py are shipped with it" in stop and "(here: flow, util)" in stop
    assert watch.reported(report(1, 1)) is None  # decided once


def test_one_site_failing_the_same_way_three_times_stops_it_too() -> None:
    watch = StartWatch(tasks=1)
    assert [watch.reported(report(0, a)) is None for a in range(3)] == [True, True, False]


def test_what_makes_two_failures_the_same() -> None:
    a = report(0, 0, error_type="TypeError", message="<Op object at 0x7f3a1c2b> is not callable",
               file="/tmp/spark-1/userFiles-a/flow-123.zip/helpers.py", line=7, function="f")
    moved = replace(a, message="<Op object at 0x55e0aa01> is not callable",
                    file="/var/spark/userFiles-b/flow-123.zip/helpers.py")
    assert signature(a) == signature(moved)  # another address, another executor's folder
    for other in (replace(a, line=8), replace(a, function="g"), replace(a, error_type="KeyError"),
                  replace(a, message="<Op object at 0x7f3a1c2b> is not iterable"),
                  replace(a, file="/tmp/spark-1/userFiles-a/flow-123.zip/other.py")):
        assert signature(other) != signature(a)


def test_different_errors_do_not_stop_the_run_until_one_slot_has_failed_often() -> None:
    watch = StartWatch(tasks=2)
    for attempt in range(PER_SLOT - 1):
        assert watch.reported(report(1, attempt, message=f"temp file /tmp/x{attempt}")) is None
    assert watch.reported(report(0, 0, error_type="OSError", message="other")) is None
    stop = watch.reported(report(1, PER_SLOT - 1, message="temp file /tmp/last"))
    assert stop is not None
    assert f"site 1 {PER_SLOT} times" in stop and "No module named" not in stop
    assert "temp file /tmp/last" in stop


def test_failed_attempts_without_a_report_stop_the_run_before_it_starts() -> None:
    watch = StartWatch(tasks=4)
    assert watch.unreported_limit == 8
    assert watch.reported(report(0, 0)) is None
    assert watch.tasks_failed(0) is None
    assert watch.tasks_failed(8) is None  # one of the eight is the reported one
    stop = watch.tasks_failed(9)
    assert stop is not None and "failed 9 times" in stop and "8 of them without a report" in stop
    assert "executors' logs" in stop
    assert watch.reported(report(1, 0)) is None and watch.reported(report(2, 0)) is None


def test_the_hint_fits_the_error() -> None:
    assert "install sparkflux" in hint(report(0, 0, message="No module named 'pyarrow.lib'"))
    assert "put it beside flow.py" in hint(MISSING, (), "flow.py")
    assert "there are none beside it" in hint(MISSING, (), "flow.py")
    given_as_object = hint(MISSING)  # sparkflux.start(dataflow) without dataflow_file=
    assert "the dataflow was given as an object" in given_as_object
    assert "pass dataflow_file=" in given_as_object and "dataflow file" not in given_as_object
    assert "'helpers' is beside flow.py and was shipped" in hint(
        report(0, 0, message="No module named 'helpers.extra'"), ("helpers",), "flow.py")
    assert "must match the driver's" in hint(report(0, 0, error_type="ImportError",
                                                    message="cannot import name 'x'"))
    generic = hint(report(0, 0, error_type="RuntimeError", message="no licence"))
    assert "rebuilt the dataflow's plan" in generic and "retries cannot help" in generic


# -- what a site reports ----------------------------------------------------------------------
def _user_code(payload: str) -> Any:
    return json.loads(payload)  # raises in the standard library


def test_the_report_names_the_innermost_frame_of_the_dataflows_own_code() -> None:
    try:
        _user_code("{")
    except ValueError as e:
        f = start_failed(e, site=2, attempt=1)
    assert (f.site, f.attempt, f.error_type) == (2, 1, "JSONDecodeError")
    assert f.file == __file__ and f.function == "_user_code"
    assert f.source == "return json.loads(payload)  # raises in the standard library"
    assert "json/decoder.py" in f.traceback and f.message.startswith("Expecting property name")
    bare = start_failed(KeyError("k"), 0, 0)  # never raised: no traceback at all
    assert (bare.file, bare.line, bare.message) == ("?", 0, "'k'")


def test_the_guard_reports_what_is_raised_before_registration_only() -> None:
    sent: list[tuple[Any, ...]] = []

    def fake_report(exc: BaseException, *args: Any) -> bool:
        sent.append((type(exc).__name__, *args))
        return True

    def guarded(exc: BaseException, registered: bool) -> StartGuard:
        guard = StartGuard("h", 1, SEC, 3, 2, report=fake_report)
        with pytest.raises(type(exc)), guard:
            if registered:
                guard.registered()
            raise exc
        return guard

    assert guarded(RuntimeError("boom"), registered=False).reported is True
    assert sent == [("RuntimeError", "h", 1, SEC, 3, 2)]
    assert guarded(RuntimeError("later"), registered=True).reported is None
    assert guarded(ConnectionLost("no driver"), registered=False).reported is None
    assert guarded(KeyboardInterrupt(), registered=False).reported is None
    assert len(sent) == 1


# -- the report's way to a real driver host -------------------------------------------------
@pytest.fixture
def host(netmon: Any) -> Any:
    plan = small_plan(netmon)
    h = Host(plan, RunConfig(sites=2, partitions=4, security=SEC, dataflow="flow.py",
                             shipped=("flow",)), NullSink(), DeadLetters())
    thread = threading.Thread(target=h.serve_forever, daemon=True)
    thread.start()
    assert h.ready.wait(10) and h.port is not None
    yield h
    h.stop("test over")
    thread.join(10)


def test_reports_reach_the_driver_and_the_third_same_one_stops_the_run(host: Host) -> None:
    assert host.port is not None

    async def sites() -> None:
        # A report must match its handshake's claim: this one is refused, never counted.
        conn = await connect("127.0.0.1", host.port, "driver", SEC,
                             Claim(handshake.REPORT, 1, 0, 1), DRIVER)
        conn.send(report(0, 0))
        assert await asyncio.wait_for(conn.reader.read(), 5) == b""  # closed by the driver
        for site, attempt in ((0, 0), (1, 0)):
            await send_report("127.0.0.1", host.port, SEC, report(site, attempt))
        assert not host.done.is_set()
        await send_report("127.0.0.1", host.port, SEC, report(1, 1))

    asyncio.run(sites())
    assert host.done.wait(5)
    assert host.failure is not None
    assert "the same error 3 times (site 0 attempt 0, site 1 attempt 0, site 1 attempt 1)" \
        in host.failure
    assert "No module named 'helpers'" in host.failure and "put it beside flow.py" in host.failure
    assert host.gate.refused["report does not match the handshake"] == 1
