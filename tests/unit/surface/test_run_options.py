"""The run's options are checked before anything starts: a bad one fails fast with a message
that says what to change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import sparkflux
from sparkflux import cli, query
from sparkflux.dataflow.placement import Layout
from sparkflux.model.errors import PlanError
from sparkflux.options import (
    HEARTBEAT_INTERVAL_S,
    MIN_HEARTBEAT_TIMEOUT_S,
    replicas_option,
    run_config,
)
from sparkflux.runtime.fault_specs import Admitted, KillAt, KillInMove
from sparkflux.runtime.security import Security
from sparkflux.runtime.site import SiteConfig
from sparkflux.spark import launcher
from tests.conftest import ROOT

TOO_CLOSE = (r"--heartbeat-timeout 0\.5 is too close to the sites' heartbeat interval "
             r"\(0\.1 s\): a site that is merely busy .* would be excluded as hung; use at "
             r"least 2\.0")


def test_replicas_default_to_two_with_flux_and_one_without() -> None:
    assert replicas_option("flux", None, 4) == 2
    assert replicas_option("none", None, 4) == 1
    assert replicas_option("flux", 3, 5) == 3


@pytest.mark.parametrize("ha,replicas,sites,message", [
    ("none", 2, 4, "--replicas needs --ha flux"),
    ("flux", 1, 4, "for one copy, use --ha none"),
    ("flux", 5, 4, "use --sites >= 5"),
])
def test_a_bad_replica_count_says_what_to_change(ha: str, replicas: int, sites: int,
                                                 message: str) -> None:
    with pytest.raises(PlanError, match=message):
        replicas_option(ha, replicas, sites)


def test_chained_declustering_with_three_replicas() -> None:
    lay = Layout(5, 10, 3)
    assert [lay.site_of(7, r) for r in range(3)] == [2, 3, 4]
    assert lay.others(7, 1) == [2, 4]
    with pytest.raises(PlanError, match="two replicas would be on site 4"):
        lay.move(7, 0, 4)
    lay.move(7, 0, 0)
    assert lay.hosted(0)[7] == 0
    with pytest.raises(PlanError, match="use --sites >= 3"):
        Layout(2, 4, 3)


def test_the_heartbeat_timeout_floor_is_well_above_the_sites_interval() -> None:
    assert HEARTBEAT_INTERVAL_S == SiteConfig.heartbeat_interval == 0.1
    assert MIN_HEARTBEAT_TIMEOUT_S == 2.0  # bench/heartbeat_gaps.py: gaps up to 0.94 s
    assert run_config(heartbeat_timeout=MIN_HEARTBEAT_TIMEOUT_S).heartbeat_timeout == 2.0
    assert run_config(heartbeat_timeout=2).heartbeat_timeout == 2.0
    assert run_config().heartbeat_timeout == 10.0


@pytest.mark.parametrize("timeout", [0.1, 0.5, 1.0, 1.99, 0, -3, float("nan")])
def test_a_heartbeat_timeout_below_the_floor_is_refused(timeout: float) -> None:
    with pytest.raises(PlanError, match=rf"--heartbeat-timeout {timeout} is too close to the "
                                        r"sites' heartbeat interval \(0\.1 s\).* use at least "
                                        r"2\.0$"):
        run_config(heartbeat_timeout=timeout)
    with pytest.raises(PlanError, match="give a number of seconds, at least 2.0"):
        run_config(heartbeat_timeout="3")


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if the run gets as far as a Spark session or a launch."""
    def started(*a: Any, **kw: Any) -> None:
        raise AssertionError("the run started before its options were checked")

    monkeypatch.setattr(launcher, "spark_session", started)
    monkeypatch.setattr(query, "launch", started)


def test_start_refuses_a_heartbeat_timeout_below_the_floor_before_spark(
        netmon: Any, no_spark: None) -> None:
    flow = netmon.build(netmon.NetmonOptions())
    with pytest.raises(PlanError, match=TOO_CLOSE):
        sparkflux.start(flow, spark=object(), heartbeat_timeout=0.5)


@pytest.mark.parametrize("extra", [[], ["--check"]])
def test_the_command_refuses_a_heartbeat_timeout_below_the_floor_before_spark(
        extra: list[str], no_spark: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", str(ROOT / "examples" / "netmon.py"), "--heartbeat-timeout", "0.5",
                     "--no-progress", *extra])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())  # as the console wrapped it
    assert "error: --heartbeat-timeout 0.5 is too close to the sites' heartbeat interval " \
           "(0.1 s)" in err and "use at least 2.0" in err


def test_the_link_timeout_defaults_to_its_floor_and_refuses_less() -> None:
    from sparkflux.options import MIN_LINK_TIMEOUT_S

    assert run_config().link_timeout == MIN_LINK_TIMEOUT_S == 1.0
    assert run_config(link_timeout=3).link_timeout == 3.0
    with pytest.raises(PlanError, match=r"--link-timeout 0\.2 is too short: a site that is "
                                        r"merely busy .* use at least 1\.0$"):
        run_config(link_timeout=0.2)


def test_the_max_batch_delay_caps_every_hop_and_refuses_too_little() -> None:
    """--max-batch-delay reaches the ingress's flush, the sites' gathering and the resend
    of held frames, in milliseconds; below half a millisecond it fails fast."""
    from sparkflux.runtime.pacing import FLUSH_S
    from sparkflux.runtime.scheduler import RESEND_S, batch_delay
    from sparkflux.spark.site_task import SiteSettings

    assert run_config().max_batch_delay is None
    cfg = run_config(max_batch_delay=2)
    assert cfg.max_batch_delay == 2.0
    assert batch_delay(FLUSH_S, cfg.max_batch_delay) == pytest.approx(0.002)
    assert batch_delay(RESEND_S, cfg.max_batch_delay) == pytest.approx(0.002)
    assert batch_delay(RESEND_S, 50.0) == RESEND_S  # a cap above a hop's own leaves it
    assert batch_delay(FLUSH_S, None) == FLUSH_S
    sec = replace(cfg, security=Security(secret=b"s" * 32))
    assert SiteSettings.of(sec, ("h", 1), "h").max_batch_delay == 2.0
    with pytest.raises(PlanError, match=r"--max-batch-delay 0\.1 is too short: .* use at "
                                        r"least 0\.5 ms$"):
        run_config(max_batch_delay=0.1)
    with pytest.raises(PlanError, match=r"--max-batch-delay 'soon': give milliseconds"):
        run_config(max_batch_delay="soon")


def test_a_kill_timed_by_the_input_admitted() -> None:
    cfg = run_config(kill=["2@input+20000", "1@3"], ha="flux")
    assert cfg.kills == (KillAt(2, Admitted(20000)), KillAt(1, 3.0))
    with pytest.raises(PlanError, match=r"write SITE@input\+RECORDS, e\.g\. --kill "
                                        r"1@input\+100000"):
        run_config(kill=["2@input+lots"], ha="flux")
    with pytest.raises(PlanError, match=r"site must be in 0\.\.3, records >= 0"):
        run_config(kill=["7@input+5"], ha="flux")


def test_a_kill_timed_inside_the_first_move() -> None:
    cfg = run_config(kill=["from@move+0.3", "2@move+0", "1@3"], ha="flux")
    assert cfg.kills == (KillInMove("from", 0.3), KillInMove(2, 0.0), KillAt(1, 3.0))
    for bad in ("donor@move+1", "9@move+1", "source@move+soon"):
        with pytest.raises(PlanError, match=r"write ROLE@move\+SECONDS, ROLE one of source, "
                                            r"destination, from, bystander or a site in 0\.\.3"):
            run_config(kill=[bad], ha="flux")
    with pytest.raises(PlanError, match=r"seconds >= 0"):
        run_config(kill=["source@move+-1"], ha="flux")
