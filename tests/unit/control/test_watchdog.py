"""The watchdog (``control/watchdog.py``), sans-I/O: it warns once per stall, stops after
``STOP_AFTER`` times as long unless the input is idle, and its report names what holds the run
(exact texts). Where the progress stands (``Boundary.standing``, from the heartbeats) is
tested with flow control (``test_flow_control.py``)."""

from __future__ import annotations

from typing import Any

from sparkflux.control.watchdog import (
    STOP_AFTER,
    Resumed,
    StageLow,
    Stall,
    Standing,
    Watchdog,
    describe,
    pool_reason,
    window_reason,
)
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS


def test_the_watchdog_warns_once_per_stall_then_stops_unless_the_input_is_idle() -> None:
    w = Watchdog(timeout=10.0)
    assert w.observe(0.0, (5, 1, 0), "blocked") is None
    assert w.observe(9.9, (5, 1, 0), "blocked") is None
    assert w.observe(10.0, (5, 1, 0), "blocked") == Stall(10.0, stop=False)
    assert w.observe(20.0, (5, 1, 0), "blocked") is None  # once per stall
    assert w.observe(40.5, (5, 1, 0), "blocked") == Stall(40.5, stop=True)
    assert w.observe(50.0, (5, 1, 0), "blocked") is None
    # progress ends the stall, and starts the clock of the next
    assert w.observe(51.0, (6, 1, 0), "admitting") == Resumed(51.0)
    assert w.observe(52.0, (7, 1, 0), "admitting") is None  # reported once
    assert w.observe(53.0, (6, 1, 0), "admitting") is None
    assert w.observe(63.0, (6, 1, 0), "idle") == Stall(10.0, stop=False)
    assert w.observe(200.0, (6, 1, 0), "idle") is None  # an idle source never stops the run
    assert w.observe(203.0, (6, 1, 0), "ended") == Stall(150.0, stop=True)
    # nothing owed (an idle source, everything out) is no stall
    assert w.observe(300.0, (7, 6, 3), "idle", owed=False) == Resumed(247.0)
    assert w.observe(400.0, (7, 6, 3), "idle", owed=False) is None
    assert Watchdog(timeout=0.0).observe(1e9, (0,), "ended") is None  # off
    assert STOP_AFTER == 4


def standing(**kw: Any) -> Standing:
    hot = StageLow(0, "TimeWindowAggregate", 59_999, 1, 0, 35_121, 5, 1)
    top = StageLow(1, "TimeWindowAggregate", 35_121, 2, 1, 35_121, 3, 0)
    base = dict(admitted=60_000, output_sn=35_121, egress_sn=35_121, egress_part=3,
                stages=(hot, top), input="blocked",
                admission=window_reason(20_001, 20_000, 39_998, 3, 1, 0))
    return Standing(**{**base, **kw})


def test_the_report_names_the_operator_that_holds_the_output() -> None:
    text = describe(Stall(30.2, stop=False), standing(), 30.0)
    assert text == (
        "no progress for 30 s: the output is at SN 35,121, 60,000 records admitted; the "
        "ingress is blocked by admission: 20,001 records admitted are not yet acknowledged by "
        "every first-stage replica (--window 20,000); the slowest is stage 0 partition 3 "
        "replica 1 on site 0, at SN 39,998. It waits for stage 0 (TimeWindowAggregate) "
        "partition 5 on site 1, which holds its output at SN 35,121 while its input is at "
        "SN 59,999 or more: its operator keeps an open window, or other state that waits for "
        "more input. (--stall-timeout 30: the run stops if this lasts 120 s)")
    stop = describe(Stall(120.0, stop=True), standing(input="ended", admission=""), 30.0)
    assert stop == (
        "no progress for 120 s: the output is at SN 35,121, 60,000 records admitted; all "
        "input is admitted. It waits for stage 0 (TimeWindowAggregate) partition 5 on site 1, "
        "which holds its output at SN 35,121 while its input is at SN 59,999 or more: its "
        "operator keeps an open window, or other state that waits for more input. The run "
        "stops rather than hang; if the stall is expected, raise --stall-timeout (0 turns "
        "the watchdog off).")


def test_the_report_names_input_that_has_not_arrived() -> None:
    hot = StageLow(0, "Session", 59_999, 1, 0, 59_999, 5, 1)
    top = StageLow(1, "CountWindow", 40_000, 6, 2, 40_000, 6, 2)
    text = describe(Stall(31.0, stop=False),
                    standing(stages=(hot, top), output_sn=40_000, egress_sn=40_000,
                             input="idle", admission=""), 30.0)
    assert text == (
        "no progress for 31 s: the output is at SN 40,000, 60,000 records admitted; the "
        "source has nothing to admit. It waits for the input of stage 1 (CountWindow) "
        "partition 6 on site 2: it has SN 40,000 while stage 0 claims at least SN 59,999 "
        "(not read yet: a slow or stalled site, or connection between sites).")
    first = StageLow(0, "Session", 50_000, 7, 3, 50_000, 7, 3)
    end = StageLow(1, "CountWindow", 50_000, 6, 2, 50_000, 6, 2)
    text = describe(Stall(30.0, stop=False),
                    standing(stages=(first, end), output_sn=50_000, egress_sn=50_000,
                             input="admitting", admission=""), 30.0)
    assert text.endswith(
        "It waits for the input of stage 0 (Session) partition 7 on site 3: it has input up "
        "to SN 50,000 of the 60,000 records admitted. (--stall-timeout 30: the run stops if "
        "this lasts 120 s)")


def test_the_report_names_output_that_has_not_reached_the_driver_and_unknown_stages() -> None:
    end = StageLow(1, "CountWindow", 59_999, 6, 2, 59_999, 6, 2)
    first = StageLow(0, "Session", 59_999, 7, 3, 59_999, 7, 3)
    text = describe(Stall(30.0, stop=False),
                    standing(stages=(first, end), output_sn=NO_PROGRESS, egress_sn=NO_PROGRESS,
                             egress_part=4, input="ended", admission=""), 30.0)
    assert text.startswith(
        "no progress for 30 s: no output yet, 60,000 records admitted; all input is "
        "admitted. It waits for the output of stage 1 (CountWindow) partition 4 to reach the "
        "driver: the egress has it up to no SN yet while every copy of the stage claims at "
        "least SN 59,999 (a connection to the driver that is slow or stalled).")
    text = describe(Stall(30.0, stop=False), standing(stages=(first, None),
                                                     silent=((1, 30.25), (3, 2.0))), 30.0)
    assert "It waits for sites 1, 3, which have sent no heartbeat for 30.2 s and 2.0 s " \
           "(hung, or too busy to send one); by the sites' last heartbeats, for stage 1, which " \
           "no live site has reported on yet. (--stall-timeout" in text
    text = describe(Stall(30.0, stop=False), standing(silent=((1, 1.06),)), 30.0)
    assert "It waits for site 1, which has sent no heartbeat for 1.1 s (hung, or too busy to " \
           "send one); by the sites' last heartbeats, for stage 0 (TimeWindowAggregate) " \
           "partition 5 on site 1, which holds" in text
    done = StageLow(1, "CountWindow", END_OF_STREAM, 6, 2, END_OF_STREAM, 6, 2)
    text = describe(Stall(30.0, stop=False), standing(stages=(first, done), egress_sn=0,
                                                     input="ended", admission=""), 30.0)
    assert "the egress has it up to SN 0 while every copy of the stage claims at least " \
           "the end of the stream" in text


def test_the_skew_buffers_reason() -> None:
    assert pool_reason(100_000, [2]) == (
        "the ingress's skew buffer holds 100,000 rows for site 2, whose connection cannot "
        "take more")
    assert pool_reason(120_000, [1, 3]) == (
        "the ingress's skew buffer holds 120,000 rows for sites 1, 3, whose connections "
        "cannot take more")



def test_the_report_names_the_copy_the_egress_reads_a_stalled_partition_from() -> None:
    """Output that every copy claims but the egress lacks: the report says which copy the
    egress reads that partition from, so a stalled connection or a lost take-over is named."""
    top = StageLow(1, "stats", 50_000, 7, 2, 50_000, 7, 2)
    first = StageLow(0, "window", 50_000, 7, 2, 50_000, 7, 2)
    text = describe(Stall(30.0, stop=False), standing(
        stages=(first, top), output_sn=40_000, egress_sn=40_000, egress_part=7,
        input="ended", admission="",
        egress_from="it reads it from copy 1 on site 3 and acknowledges to copy 0 on site 0"),
        30.0)
    assert ("the output of stage 1 (stats) partition 7 to reach the driver: the egress has "
            "it up to SN 40,000 while every copy of the stage claims at least SN 50,000 (a "
            "connection to the driver that is slow or stalled; it reads it from copy 1 on "
            "site 3 and acknowledges to copy 0 on site 0)") in text
