"""Racing replicas (``--ha race``) on Spark local mode with real faults, checked against the
reference: a killed site, a hung one (SIGSTOP), two sites killed at once with three copies,
collected streams (``--stream-replicas 1``) revived through kills, and Nexmark Q5 and Q8
through a kill (``rows_digest`` against their Spark SQL reference)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.runner import reference_digest, run_example

from .test_netmon_spark import netmon_args
from .test_nexmark_spark import SHARE
from .test_nexmark_spark import args as nexmark_args

pytestmark = pytest.mark.spark

EVENTS = 300_000
RATE = 100_000.0  # the input is held at this rate through every fault


@pytest.fixture(scope="module")
def expected(netmon: Any, spark: Any) -> tuple[str, int]:
    digest, rows, _ = reference_digest(netmon, netmon_args(events=EVENTS), spark=spark)
    return digest, rows


def run_race(netmon: Any, spark: Any, **kw: Any) -> dict[str, Any]:
    args = netmon_args(**{"events": EVENTS, "rate": RATE, "ha": "race", "sites": 4,
                          "partitions": 16, "batch_size": 8192, "window": 400_000, **kw})
    return run_example(netmon, args, sink=NullSink(), dead=DeadLetters(),
                       spark=spark).metrics


def test_a_killed_copy_is_raced_past_and_rebuilt(netmon: Any, spark: Any,
                                                  expected: tuple[str, int]) -> None:
    # at half the rate, the input runs on 5 s after the kill: time for the catch-up to end
    # (a run ends with its output, and a recovery is recorded when it ends)
    m = run_race(netmon, spark, kill=["1@input+50000"], rate=RATE / 2)
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]
    assert m["ingress_dropped"] == 0
    assert (m["output_digest"], m["output_tuples"]) == expected
    assert m["recoveries"], "the killed site's copies were not caught up again"
    # both copies of the last stage reached the egress: about one row in two was a duplicate
    assert m["raced_rows"] > expected[1] // 4


def test_a_hung_site_does_not_stall_the_output(netmon: Any, spark: Any,
                                               expected: tuple[str, int]) -> None:
    """SIGSTOP for 4 s: the heartbeat timeout (2 s here) passes before the controller
    excludes the site, and the other copies carry the output all along: no gap anywhere
    near the timeout."""
    m = run_race(netmon, spark, hang=["2@input+100000=4"], heartbeat_timeout=2.0)
    assert [f["site"] for f in m["failures"]] == [2]
    assert m["failures"][0]["detected_after_s"] >= 1.0
    assert (m["output_digest"], m["output_tuples"]) == expected
    assert m["max_output_gap_s"] < 0.6, m["max_output_gap_s"]


def test_three_copies_survive_two_sites_killed_at_once(netmon: Any, spark: Any,
                                                       expected: tuple[str, int]) -> None:
    m = run_race(netmon, spark, replicas=3, kill=["1@input+100000", "2@input+100000"])
    assert sorted(f["site"] for f in m["failures"]) == [1, 2]
    assert m["ingress_dropped"] == 0
    assert (m["output_digest"], m["output_tuples"]) == expected


@pytest.mark.parametrize("k", [2, 3], ids=["two-copies", "three-copies"])
def test_collected_streams_are_revived_through_kills(netmon: Any, spark: Any,
                                                     expected: tuple[str, int], k: int) -> None:
    """``--stream-replicas 1``: every copy takes each input stream from one producer copy,
    the one whose data came first; the kills take some of those, and the streams they sent
    are revived from the copies left (which held the rows all along).

    A stream is first collected after ``GC_CLAIMS`` claims of its copies, which took from
    1.3 s to more than 3 s into the input on a loaded machine; a kill before it finds
    nothing to revive. So the input runs at a quarter of the rate and the kills come 8 s
    into it, 4 s before its end. Sites 0 and 2 die: every partition loses one copy of two
    (or of three), whichever copies won the races."""
    m = run_race(netmon, spark, replicas=k, stream_replicas=1,
                 kill=["0@input+200000", "2@input+200000"], rate=RATE / 4)
    assert sorted(f["site"] for f in m["failures"]) == [0, 2]
    assert m["ingress_dropped"] == 0
    assert (m["output_digest"], m["output_tuples"]) == expected
    gc = m["stream_replicas"]
    assert gc["keep"] == 1 and gc["collected"] > 0 and gc["revived"] > 0, gc


def test_a_hung_only_sender_is_revived_around_before_the_timeout(
        netmon: Any, spark: Any, expected: tuple[str, int]) -> None:
    """``--stream-replicas 1`` and site 2 stopped (SIGSTOP) for 4 s, the heartbeat timeout
    2 s: the streams it alone sent stand still while the others move, and their consumers
    take the collected copies back after the stall (0.3 s), long before the controller
    excludes the site. The hang comes 8 s into an input at a quarter of the rate: a stream
    is first collected only after ``GC_CLAIMS`` claims, more than 3 s in on a loaded
    machine (a hang before it leaves nothing collected to revive)."""
    m = run_race(netmon, spark, stream_replicas=1, hang=["2@input+200000=4"],
                 heartbeat_timeout=2.0, rate=RATE / 4)
    assert [f["site"] for f in m["failures"]] == [2]
    assert (m["output_digest"], m["output_tuples"]) == expected
    assert m["stream_replicas"]["revived"] > 0
    assert m["max_output_gap_s"] < 1.0, m["max_output_gap_s"]


@pytest.fixture(scope="module")
def nexmark() -> Any:
    from sparkflux.dataflow.examples import load_example
    from tests.conftest import ROOT

    return load_example(ROOT / "examples" / "nexmark" / "nexmark.py")


@pytest.mark.parametrize("query", [5, 8])
def test_nexmark_races_through_a_kill(nexmark: Any, spark: Any, query: int) -> None:
    from sparkflux.runner import reference_result

    ref, _ = reference_result(nexmark, nexmark_args(query), spark=spark)
    records = nexmark_args(query).events * SHARE[query]
    m = run_example(nexmark, nexmark_args(query, ha="race", rate=records / 2,
                                          kill=[f"1@input+{int(records * 0.3)}"]),
                    sink=NullSink(), dead=DeadLetters(), spark=spark).metrics
    assert ref.rows > 0 and m["output_tuples"] == ref.rows
    assert m["rows_digest"] == ref.rows_digest
    assert m["kills"] == 1 and [f["site"] for f in m["failures"]] == [1]


@pytest.mark.parametrize("placement", ["chained", "latency"])
@pytest.mark.parametrize("ha", ["flux", "race"])
def test_a_run_over_wide_area_links_matches_through_a_kill(netmon: Any, spark: Any,
                                                            expected: tuple[str, int],
                                                            ha: str, placement: str) -> None:
    """``--wan``: the sites 0 to 60 ms apart (``examples/wan/three_regions.json``), every
    frame held for its link's latency and jitter, site 3 (the farthest) killed; the copies
    placed by chained declustering or by that matrix (``--placement latency``)."""
    from tests.conftest import ROOT

    wan = str(ROOT / "examples" / "wan" / "three_regions.json")
    m = run_race(netmon, spark, ha=ha, wan=wan, placement=placement, kill=["3@input+100000"])
    assert [f["site"] for f in m["failures"]] == [3]
    assert m["ingress_dropped"] == 0
    assert (m["output_digest"], m["output_tuples"]) == expected
    # the worst partition's round trip through its nearest copy: 60 ms (sites 2 and 3 only)
    # under chained declustering, 2 ms once every partition has a copy near the driver
    bound = m["placement"].get("latency_bound_ms", m["placement"]["chained_latency_bound_ms"])
    assert (m["placement"]["mode"], bound) == (placement, 60.0 if placement == "chained"
                                               else 2.0)


@pytest.mark.parametrize("kill", [[], ["3@input+100000"]], ids=["steady", "kill"])
def test_copies_are_redeployed_when_the_measured_latencies_change(netmon: Any, spark: Any,
                                                                  kill: list[str]) -> None:
    """``examples/wan/region_shift.json``: 12 s after the launch the driver's region moves
    next to sites 0 and 2, and the partitions whose copies are on sites 1 and 3 have none
    near it. The sites' latency probes show it, the balancing rounds find a better
    deployment over what they measured for their settle time, and copies move (``reason``
    latency). With a kill: site 3 is killed before the change, and the re-deployment comes
    once its standby is caught up (a slot down restarts the settle time; a crash during the
    moves is the simulator's, ``tests/sim/test_sim_redeploy.py``). The output is the
    reference's."""
    from tests.conftest import ROOT

    events = 1_000_000
    digest, rows, _ = reference_digest(netmon, netmon_args(events=events), spark=spark)
    wan = str(ROOT / "examples" / "wan" / "region_shift.json")
    m = run_race(netmon, spark, events=events, rate=50_000.0, partitions=32,
                 wan=wan, placement="latency", kill=kill, no_balance=False)
    assert (m["output_digest"], m["output_tuples"]) == (digest, rows)
    assert m["ingress_dropped"] == 0 and m["kills"] == len(kill)
    [re] = m["placement"]["redeploys"]
    # the bound under the measured matrix: the far partitions' 120 ms round trip, then the
    # near ones' 2 ms, each plus what the sites' loops and the jitter add to a probe
    assert re["bound_ms"] > 100 and re["new_bound_ms"] < 30, re
    # (the moves go in groups of 8; the input may end, or a site die, before the last)
    assert 0 < len([mv for mv in m["moves"] if mv["reason"] == "latency"]) <= re["moves"]


@pytest.mark.parametrize("ha", ["flux", "race"])
def test_unordered_output_is_the_reference_order_aside_through_a_kill(
        netmon: Any, spark: Any, ha: str) -> None:
    """``--unordered-output``: rows handed on as they pass the egress's filter; ``--check``
    compares the rows with their sequence numbers, order aside."""
    from sparkflux.check import check_example

    args = netmon_args(**{"events": EVENTS, "rate": RATE, "ha": ha, "sites": 4,
                          "partitions": 16, "batch_size": 8192, "window": 400_000,
                          "unordered_output": True, "kill": ["1@input+100000"]})
    result, verdict = check_example(netmon, args, spark=spark)
    assert verdict.match, verdict.lines
    assert "order aside (--unordered-output)" in "\n".join(verdict.lines)
    assert result.metrics["unordered_output"] and result.metrics["kills"] == 1


@pytest.fixture(scope="module")
def sensors() -> Any:
    from sparkflux.dataflow.examples import load_example
    from tests.conftest import ROOT

    return load_example(ROOT / "examples" / "sensors.py")


@pytest.mark.parametrize(("ha", "extra"), [
    ("none", {}),
    ("flux", {"kill": ["1@input+30000"]}),
    ("race", {"kill": ["1@input+30000"]}),
    ("race", {"kill": ["1@input+30000"], "arrival_order": True}),
    ("race", {"kill": ["2@input+30000"], "arrival_order": True, "unordered_output": True}),
], ids=["none", "flux-kill", "race-kill", "race-kill-arrival", "race-kill-arrival-unordered"])
def test_a_chain_of_maps_runs_in_arrival_order_and_matches(sensors: Any, spark: Any, ha: str,
                                                           extra: dict[str, Any]) -> None:
    """The sensors' chain of four map stages, each after an exchange: with
    ``--arrival-order`` racing copies run every one of them as rows arrive
    (``arrival_stages``), their streams out of SN order, and the output is the Spark SQL
    reference's through a kill; without it, and in the other modes, every stage merges."""
    from sparkflux.check import check_example
    from sparkflux.cli import run_args
    from tests.conftest import ROOT

    args = run_args(ROOT / "examples" / "sensors.py", events=40_000, stages=4, sites=4,
                    partitions=16, rate=40_000.0, ha=ha, **extra)
    result, verdict = check_example(sensors, args, spark=spark)
    assert verdict.match, verdict.lines
    m = result.metrics
    arrival = bool(extra.get("arrival_order"))
    assert m["arrival_stages"] == (["hop1", "hop2", "hop3", "hop4"] if arrival else [])
    assert m["kills"] == len(extra.get("kill", []))


@pytest.fixture(scope="module")
def hot_items() -> Any:
    from sparkflux.dataflow.examples import load_example
    from tests.conftest import ROOT

    return load_example(ROOT / "examples" / "hot_items.py")


@pytest.mark.parametrize(("ha", "extra"), [
    ("none", {}),
    ("race", {"kill": ["1@input+20000"]}),
    ("race", {"kill": ["1@input+20000"], "arrival_order": True}),
    ("race", {"kill": ["3@input+20000"], "arrival_order": True, "unordered_output": True}),
], ids=["none", "race-kill", "race-kill-arrival", "race-kill-arrival-unordered"])
def test_time_windows_fold_in_arrival_order_and_match(hot_items: Any, spark: Any, ha: str,
                                                      extra: dict[str, Any]) -> None:
    """Hot items' two window stages (sliding counts, then per category the largest): with
    ``--arrival-order`` racing copies fold rows as they arrive (the racing-replicas paper's
    Algorithm 3, both stages in ``arrival_stages``) and the output is the Spark SQL
    reference's through a kill."""
    from sparkflux.check import check_example
    from sparkflux.cli import run_args
    from tests.conftest import ROOT

    args = run_args(ROOT / "examples" / "hot_items.py", events=60_000, sites=4,
                    partitions=16, rate=40_000.0, ha=ha, **extra)
    result, verdict = check_example(hot_items, args, spark=spark)
    assert verdict.match, verdict.lines
    m = result.metrics
    assert len(m["arrival_stages"]) == (2 if extra.get("arrival_order") else 0)
    assert m["kills"] == len(extra.get("kill", []))
