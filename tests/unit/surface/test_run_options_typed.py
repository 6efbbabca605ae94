"""One typed option set: ``RunOptions`` is what the command's parser, ``sparkflux.start`` and
the runtime's ``RunConfig`` are built from; the fault specs are typed records that print back
as the spec they came from; a bad spec says what to write."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import sparkflux
from sparkflux import cli, query
from sparkflux.model.errors import PlanError
from sparkflux.options import flag_of, options_of, run_config
from sparkflux.runtime.fault_specs import (
    Admitted,
    Cut,
    Hang,
    KillAdopted,
    KillAfterRecovery,
    KillAt,
    KillInMove,
    KillProcess,
    Slow,
    parse_cut,
    parse_hang,
    parse_kill,
    parse_slow,
)
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.run_options import RunOptions
from sparkflux.spark import launcher
from sparkflux.spark.site_task import SiteSettings
from tests.conftest import ROOT

CLUSTER = "spark://127.0.0.1:7077"


@pytest.mark.parametrize("spec,record", [
    ("1@3", KillAt(1, 3.0)),
    ("0@0.25", KillAt(0, 0.25)),
    ("2@recovered+0.3", KillAfterRecovery(2, 0.3)),
    ("1@adopted+0.2", KillAdopted(1, 0.2)),
    ("3@input+100000", KillAt(3, Admitted(100_000))),
    ("from@move+0.5", KillInMove("from", 0.5)),
    ("bystander@move+0", KillInMove("bystander", 0.0)),
    ("2@move+1", KillInMove(2, 1.0)),
    ("worker:most@20", KillProcess("worker", None, 20.0)),
    ("executor:2@1.5", KillProcess("executor", 2, 1.5)),
    ("python:0@0", KillProcess("python", 0, 0.0)),
    ("worker:1@input+5000", KillProcess("worker", 1, Admitted(5000))),
])
def test_each_kill_form_is_a_record_that_prints_back_as_its_spec(spec: str, record: Any
                                                                 ) -> None:
    assert parse_kill(spec, 4, CLUSTER) == record
    assert str(record) == spec
    assert parse_kill(str(record), 4, CLUSTER) == record


def test_a_record_prints_every_digit_it_holds() -> None:
    kill = KillAt(1, 0.1234567891)
    assert parse_kill(str(kill), 4) == kill


@pytest.mark.parametrize("parse,spec,record", [
    (parse_hang, "1@3=8", Hang(1, 3.0, 8.0)),
    (parse_cut, "1@3=45", Cut(1, 3.0, 45.0)),
    (lambda spec, sites: parse_cut(spec, sites, isolate=True), "2@0.5=4",
     Cut(2, 0.5, 4.0, isolate=True)),
    (parse_slow, "2@2=0.5", Slow(2, 2.0, 0.5)),
    (parse_hang, "1@input+20000=3", Hang(1, Admitted(20_000), 3.0)),
    (parse_cut, "3@input+1=45", Cut(3, Admitted(1), 45.0)),
    (parse_slow, "0@input+0=0.25", Slow(0, Admitted(0), 0.25)),
])
def test_hangs_cuts_and_slows_are_records_that_print_back(parse: Any, spec: str, record: Any
                                                          ) -> None:
    assert parse(spec, 4) == record
    assert str(record) == spec


@pytest.mark.parametrize("kill,message", [
    ("1", r"write SITE@SECONDS \(e\.g\. --kill 1@3\), SITE@recovered\+SECONDS, "
          r"SITE@adopted\+SECONDS or SITE@input\+RECORDS"),
    ("x@3", "write SITE@SECONDS"),
    ("1@soon", "write SITE@SECONDS"),
    ("1@recovered+soon", "write SITE@SECONDS"),
    ("7@3", r"site must be in 0\.\.3, seconds >= 0"),
    ("1@-2", r"site must be in 0\.\.3, seconds >= 0"),
    ("7@recovered+1", r"site must be in 0\.\.3, seconds >= 0"),
    ("1@adopted+x", r"write SITE@adopted\+SECONDS, e\.g\. --kill 1@adopted\+0\.2"),
    ("9@adopted+1", r"site must be in 0\.\.3, seconds >= 0"),
    ("1@input+lots", r"write SITE@input\+RECORDS, e\.g\. --kill 1@input\+100000"),
    ("1@input+-5", r"site must be in 0\.\.3, records >= 0"),
    ("donor@move+1", r"write ROLE@move\+SECONDS, ROLE one of source, destination, from, "
                     r"bystander or a site in 0\.\.3"),
    ("source@move+-1", r"seconds >= 0"),
    ("jvm:1@2", "not one of python, executor, worker"),
    ("worker:1", "write LEVEL:SITE@WHEN"),
    ("worker:1@input+x", "write LEVEL:SITE@WHEN"),
    ("worker:4@2", r"site must be in 0\.\.3 or 'most'"),
])
def test_a_bad_kill_says_what_to_write(kill: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        RunOptions(kill=(kill,), master=CLUSTER)


@pytest.mark.parametrize("option,spec,message", [
    ("hang", "1@3", r"--hang '1@3': write SITE@WHEN=DURATION \(WHEN: SECONDS or "
                    r"input\+RECORDS\), e\.g\. --hang 1@3=8"),
    ("hang", "1@3=0", r"--hang '1@3=0': site in 0\.\.3, duration > 0"),
    ("hang", "1@-3=2", r"write SITE@WHEN=DURATION"),
    ("hang", "1@input+-3=2", r"write SITE@WHEN=DURATION"),
    ("cut", "1=3", r"--cut '1=3': write SITE@WHEN=DURATION .*, e\.g\. --cut 1@3=45"),
    ("isolate", "5@1=2", r"--isolate '5@1=2': site in 0\.\.3"),
    ("slow", "2@2", r"--slow '2@2': write SITE@WHEN=FACTOR .*, e\.g\. --slow 2@2=0\.5"),
    ("slow", "2@2=-1", r"factor > 0"),
])
def test_a_bad_hang_cut_or_slow_says_what_to_write(option: str, spec: str, message: str
                                                   ) -> None:
    with pytest.raises(PlanError, match=message):
        RunOptions(**{option: [spec]})


def test_a_process_kill_in_local_mode_says_it_needs_a_cluster() -> None:
    with pytest.raises(PlanError, match="needs a Spark standalone cluster here"):
        RunOptions(kill=["worker:most@20"], master="local[4]")


def test_records_given_in_python_are_checked_as_specs_are() -> None:
    opts = RunOptions(kill=[KillAt(1, 3.0), "2@input+5"], hang=[Hang(0, 1.0, 2.0)])
    assert opts.kill == (KillAt(1, 3.0), KillAt(2, Admitted(5))) and opts.hang == (Hang(0, 1, 2),)
    with pytest.raises(PlanError, match=r"--kill '9@3': site must be in 0\.\.3"):
        RunOptions(kill=[KillAt(9, 3.0)])


def test_the_options_are_frozen_and_normalised() -> None:
    opts = RunOptions(heartbeat_timeout=3, kill=["1@3"])
    assert opts.heartbeat_timeout == 3.0 and isinstance(opts.heartbeat_timeout, float)
    assert isinstance(opts.kill, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.sites = 8  # type: ignore[misc]


def test_the_replica_count_is_one_int() -> None:
    assert RunOptions().replica_count == 1 and RunOptions(ha="flux").replica_count == 2
    assert RunOptions(ha="flux", replicas=3).replica_count == 3
    assert run_config().replicas == 1 and run_config(ha="flux").replicas == 2
    assert RunConfig(ha="flux").replicas == 2 and RunConfig().replicas == 1


def test_the_runtime_view_takes_its_defaults_from_the_options() -> None:
    assert RunConfig.of(RunOptions()) == RunConfig()
    assert RunConfig.of(RunOptions(ha="flux")) == RunConfig(ha="flux")
    cfg = run_config(spare_sites=2, balance_delta_min=0.5, balance_window=0, kill=["1@3"],
                     cut=["1@2=3"], isolate=["2@2=3"])
    assert (cfg.spares, cfg.delta_min, cfg.window_s) == (2, 0.5, 0)
    assert cfg.kills == (KillAt(1, 3.0),)
    assert cfg.cuts == (Cut(1, 2.0, 3.0), Cut(2, 2.0, 3.0, isolate=True))
    assert cfg.kills_of(KillAt) == (KillAt(1, 3.0),) and cfg.kills_of(KillProcess) == ()


def test_the_command_has_a_flag_for_every_option_with_its_default() -> None:
    parser, _ = cli._run_parser(None)
    actions = {a.dest: a for a in parser._actions}
    for f in dataclasses.fields(RunOptions):
        action = actions[f.name]
        assert flag_of(f) in action.option_strings
        assert action.help == f.metadata["help"]
        if f.default == ():
            assert action.default == []  # repeatable: --kill 1@3 --kill 2@5
        else:
            assert action.default == f.default, f.name
        if f.metadata["choices"]:
            assert list(action.choices) == list(f.metadata["choices"])


def test_parsed_arguments_become_typed_options() -> None:
    parser, _ = cli._run_parser(None)
    args = parser.parse_args(["x.py", "--sites", "3", "--ha", "flux", "--kill", "1@3",
                              "--kill", "2@recovered+0.5", "--no-balance", "--isolate",
                              "0@1=2", "--heartbeat-timeout", "4"])
    opts = RunOptions.of(**options_of(args))
    assert opts.sites == 3 and opts.replica_count == 2 and opts.balance is False
    assert opts.kill == (KillAt(1, 3.0), KillAfterRecovery(2, 0.5))
    assert opts.isolate == (Cut(0, 1.0, 2.0, isolate=True),)
    assert opts.heartbeat_timeout == 4.0
    assert RunOptions.of(**options_of(parser.parse_args(["x.py"]))) == RunOptions()


def test_a_hand_made_namespace_may_still_say_no_balance() -> None:
    import argparse

    assert options_of(argparse.Namespace(no_balance=True, sites=2)) == {
        "sites": 2, "balance": False}


def test_an_unknown_option_fails_listing_the_options(monkeypatch: pytest.MonkeyPatch,
                                                     netmon: Any) -> None:
    def started(*a: Any, **kw: Any) -> None:
        raise AssertionError("the run started before its options were checked")

    monkeypatch.setattr(launcher, "spark_session", started)
    monkeypatch.setattr(query, "launch", started)
    flow = netmon.build(netmon.NetmonOptions())
    names = ", ".join(sorted(f.name for f in dataclasses.fields(RunOptions)))
    with pytest.raises(PlanError, match=rf"unknown option\(s\) heartbeat; the options are: "
                                        rf"{names}$"):
        sparkflux.start(flow, spark=object(), heartbeat=1)


def test_the_sites_get_the_replica_count_and_timeouts_from_the_run() -> None:
    cfg = dataclasses.replace(run_config(ha="flux", replicas=3, sites=4, link_timeout=2.5,
                                         site_cpu=0.4), security=object())
    s = SiteSettings.of(cfg, ("10.0.0.1", 7000), "")
    assert (s.replicas, s.link_timeout, s.cpu_cap) == (3, 2.5, 0.4)
    assert (s.controller_host, s.controller_port, s.bind_host) == ("10.0.0.1", 7000, "")
    none = dataclasses.replace(run_config(), security=object())
    assert SiteSettings.of(none, ("h", 1), "127.0.0.1").replicas == 1


def test_race_keeps_k_copies_balances_and_tells_the_sites() -> None:
    assert RunOptions(ha="race").replica_count == 2
    assert RunOptions(ha="race", replicas=3).replica_count == 3
    cfg = dataclasses.replace(run_config(ha="race", replicas=3), security=object())
    assert cfg.replicas == 3 and cfg.balance is True
    assert run_config(ha="race", balance=False).balance is False
    assert run_config(ha="flux").balance is True
    s = SiteSettings.of(cfg, ("h", 1), "")
    assert s.race and s.replicas == 3
    assert not SiteSettings.of(dataclasses.replace(run_config(ha="flux"), security=object()),
                               ("h", 1), "").race


@pytest.mark.parametrize(("options", "message"), [
    ({"consistency": "eventual"}, r"--ha race does not combine with --consistency eventual "
                                  r"yet: drop it, or use --ha flux"),
    ({"checkpoint": "/tmp/ck", "arrival_order": True},
     r"--arrival-order does not combine with --checkpoint yet \(a stage run in arrival order "
     r"neither spills nor cuts for a checkpoint\)"),
    ({"rescale": ["6@10"]}, r"--rescale moves partitions .* add --ha flux"),
    ({"squeeze": ["1@5=32"], "site_memory": 64, "arrival_order": True},
     r"--arrival-order does not combine with --site-memory and --squeeze yet \(a stage run "
     r"in arrival order neither spills nor cuts for a checkpoint\): drop one of them"),
    ({"replicas": 1}, r"--replicas 1: Racing replicas keeps at least 2 copies"),
    ({"replicas": 5}, r"--replicas 5 keeps 5 copies of every partition on different sites: "
                      r"use --sites >= 5"),
])
def test_race_refuses_what_it_does_not_combine_with(options: dict[str, Any], message: str
                                                    ) -> None:
    with pytest.raises(PlanError, match=message):
        RunOptions(ha="race", **options)


def test_a_wan_model_is_checked_with_the_options_and_reaches_the_sites(tmp_path: Any
                                                                     ) -> None:
    from sparkflux.runtime.wan import WanModel

    wan = ROOT / "examples" / "wan" / "three_regions.json"
    cfg = dataclasses.replace(run_config(ha="race", wan=str(wan)), security=object())
    assert cfg.wan == WanModel.load(wan, 4) and cfg.wan.latency_s(-1, 3) == 0.06
    assert SiteSettings.of(cfg, ("h", 1), "").wan == cfg.wan
    with pytest.raises(PlanError, match=r"latency_ms must be 3 rows of 3 numbers"):
        RunOptions(sites=2, wan=str(wan))
    bad = tmp_path / "x.json"
    bad.write_text("{")
    with pytest.raises(PlanError, match=r"--wan .*x.json: cannot read it as JSON"):
        RunOptions(wan=str(bad))
    with pytest.raises(PlanError, match="--wan does not combine with --rescale"):
        RunOptions(ha="flux", wan=str(wan), rescale=["6@10"])


def test_placement_by_latency_takes_its_matrix_from_latencies_or_wan(tmp_path: Any
                                                                     ) -> None:
    wan = ROOT / "examples" / "wan" / "three_regions.json"
    matrix = tuple(tuple(float(x) for x in row)
                   for row in json.loads(wan.read_text())["latency_ms"])
    cfg = run_config(ha="race", wan=str(wan), placement="latency")
    assert cfg.placement == "latency" and cfg.latencies == matrix
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps({"latency_ms": [[0, 5, 5, 5, 5], [5, 0, 1, 1, 1],
                                                   [5, 1, 0, 1, 1], [5, 1, 1, 0, 1],
                                                   [5, 1, 1, 1, 0]]}))
    cfg = run_config(ha="flux", placement="latency", latencies=str(measured))
    assert cfg.latencies is not None and cfg.latencies[0][1] == 5.0 and cfg.wan is None
    assert run_config().placement == "chained" and run_config().latencies is None
    with pytest.raises(PlanError, match="--placement latency places the copies by a latency "
                                        "matrix: give --latencies FILE"):
        RunOptions(ha="race", placement="latency")
    with pytest.raises(PlanError, match="--latencies places the copies with --placement "
                                        "latency: add it"):
        RunOptions(latencies=str(measured))
    with pytest.raises(PlanError, match=r"--latencies .*: latency_ms must be 3 rows"):
        RunOptions(sites=2, ha="flux", placement="latency", latencies=str(measured))
    with pytest.raises(PlanError, match="--placement latency does not combine with --rescale"):
        RunOptions(ha="flux", placement="latency", latencies=str(measured),
                   rescale=["6@10"])


def test_unordered_output_reaches_the_egress_and_refuses_what_counts_on_order() -> None:
    assert run_config(ha="race", unordered_output=True).unordered_output
    assert not run_config().unordered_output
    with pytest.raises(PlanError, match="--unordered-output does not combine with "
                                        "--checkpoint"):
        RunOptions(ha="flux", unordered_output=True, checkpoint="file:///tmp/x")
    with pytest.raises(PlanError, match="--unordered-output does not combine with "
                                        "--consistency eventual"):
        RunOptions(ha="flux", unordered_output=True, consistency="eventual", max_delay=1.0)


def test_the_cli_reference_page_is_the_parsers() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == cli.reference_page(), "run scripts/cli_reference.py"


def test_run_args_has_every_default_and_refuses_an_unknown_name() -> None:
    netmon = ROOT / "examples" / "netmon.py"
    args = cli.run_args(netmon, events=100, kill=["1@3"], ha="flux")
    assert (args.events, args.seed, args.batch_size) == (100, 7, 8192)
    cfg = run_config(**options_of(args))
    assert cfg.kills == (KillAt(1, 3.0),) and cfg.replicas == 2
    assert RunOptions.of(**options_of(cli.run_args(netmon))) == RunOptions()
    with pytest.raises(PlanError, match="no option.s. spares for"):
        cli.run_args(netmon, spares=1)


@pytest.mark.parametrize("prefix", ["--part", "--site", "--ha-mode", "--even"])
def test_an_option_prefix_is_refused_not_guessed(prefix: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--partition 8`` is not taken as ``--partitions 8``: a typo must not run a query other
    than the one the user meant."""
    with pytest.raises(SystemExit) as e:
        cli.main(["run", str(ROOT / "examples" / "netmon.py"), prefix, "8"])
    assert e.value.code == 2
    assert f"unrecognized arguments: {prefix} 8" in capsys.readouterr().err


def test_rescale_specs_are_typed_checked_and_let_faults_name_the_new_slots() -> None:
    from sparkflux.runtime.fault_specs import RescaleAt, parse_rescale

    assert parse_rescale("6@10") == RescaleAt(6, 10.0) and str(RescaleAt(6, 10.0)) == "6@10"
    assert parse_rescale("3@input+500") == RescaleAt(3, Admitted(500))
    for bad in ("6", "x@3", "0@3", "6@soon"):
        with pytest.raises(PlanError, match="write SITES@WHEN"):
            parse_rescale(bad)
    o = RunOptions.of(sites=4, ha="flux", partitions=16, rescale=["6@2", "3@5"],
                      kill=["5@3"])  # slot 5 exists once the query has grown
    assert o.rescale == (RescaleAt(6, 2.0), RescaleAt(3, 5.0))
    assert RunConfig.of(o).rescales == o.rescale
    with pytest.raises(PlanError, match="--ha flux"):
        RunOptions.of(sites=4, rescale=["6@2"])
    with pytest.raises(PlanError, match=r"between 2 sites .* and 16"):
        RunOptions.of(sites=4, ha="flux", partitions=16, rescale=["17@2"])
    with pytest.raises(PlanError):
        RunOptions.of(sites=4, ha="flux", kill=["5@3"])  # no rescale: no slot 5


def test_memory_options_are_checked_and_reach_the_sites() -> None:
    from sparkflux.runtime.fault_specs import Squeeze, parse_squeeze
    from sparkflux.spark.job import derived_site_memory

    assert parse_squeeze("2@input+40000=0.5", 4) == Squeeze(2, Admitted(40000), 0.5)
    assert str(Squeeze(2, 3.0, 64.0)) == "2@3=64"
    for bad in ("2@3", "9@3=64", "2@3=0"):
        with pytest.raises(PlanError, match="--squeeze"):
            parse_squeeze(bad, 4)
    o = RunOptions.of(sites=4, ha="flux", site_memory=256, squeeze=["1@5=32"])
    cfg = RunConfig.of(o)
    assert cfg.site_memory == 256 and cfg.squeezes == (Squeeze(1, 5.0, 32.0),)
    with pytest.raises(PlanError, match="--site-memory"):
        RunOptions.of(sites=4, site_memory=0)

    class Conf(dict):  # what SparkConf.get answers
        def get(self, key: str, default: Any = None) -> Any:
            return super().get(key, default)

    assert derived_site_memory(Conf(), 4) is None
    assert derived_site_memory(Conf({"spark.sparkflux.siteMemory": "512m"}), 4) == 512
    assert derived_site_memory(Conf({"spark.executor.pyspark.memory": "2g",
                                     "spark.executor.cores": "4"}), 8) == 512
    assert derived_site_memory(Conf({"spark.executor.pyspark.memory": "1g"}), 4) == 256
    with pytest.raises(PlanError, match="spark.sparkflux.siteMemory"):
        derived_site_memory(Conf({"spark.sparkflux.siteMemory": "lots"}), 4)


def test_partitions_and_source_cuts_are_records_that_print_back() -> None:
    from sparkflux.runtime.fault_specs import (
        CutSource,
        Partition,
        parse_cut_source,
        parse_partition,
    )

    p = parse_partition("0,1/2,3,driver@10+15", 4)
    assert p == Partition(((0, 1), (2, 3)), 1, 10.0, 15.0)
    assert str(p) == "0,1/2,3,driver@10+15"
    assert parse_partition("driver,2/0@input+500+2.5", 4) == Partition(
        ((2,), (0,)), 0, Admitted(500), 2.5)
    assert parse_cut_source("bids@input+1000+15") == CutSource("bids", Admitted(1000), 15.0)
    assert str(parse_cut_source("bids@3+1.5")) == "bids@3+1.5"
    for bad, says in (("0,1/2,3@10", "write A,B/C,D@WHEN"), ("0,1@10+5", "two groups"),
                      ("0,1/1,2@1+5", "each site in one group"), ("0/9@1+5", "0..3"),
                      ("0,driver/1,driver@1+5", "'driver' in one of them"),
                      ("0/1@1+0", "above 0 seconds"), ("/1@1+3", "each group needs sites")):
        with pytest.raises(PlanError, match=says):
            parse_partition(bad, 4)
    with pytest.raises(PlanError, match=r"write NAME@WHEN\+DURATION"):
        parse_cut_source("bids+15")
    cfg = RunConfig.of(RunOptions.of(sites=4, ha="flux", partition=["0,1/2,3@5+10"],
                                     cut_source=["bids@1+2"]))
    assert cfg.partitions_cut == (Partition(((0, 1), (2, 3)), None, 5.0, 10.0),)
    assert cfg.source_cuts == (CutSource("bids", 1.0, 2.0),)


def test_arrival_order_is_an_option_of_racing_copies() -> None:
    assert RunOptions(ha="race", arrival_order=True).arrival_order
    with pytest.raises(PlanError, match=r"--arrival-order is an option of --ha race .* add "
                                        r"--ha race"):
        RunOptions(ha="flux", arrival_order=True)


def test_stream_replicas_are_an_option_of_racing_copies_below_their_count() -> None:
    cfg = RunConfig.of(RunOptions(ha="race", replicas=3, stream_replicas=2))
    assert cfg.stream_replicas == 2
    assert RunConfig.of(RunOptions(ha="race")).stream_replicas == 0
    with pytest.raises(PlanError, match=r"--stream-replicas is an option of --ha race"):
        RunOptions(ha="flux", stream_replicas=1)
    with pytest.raises(PlanError, match=r"--stream-replicas 2: each copy keeps 1 of the 2 "
                                        r"copies of each input stream \(--replicas 2\); give "
                                        r"that, or drop it"):
        RunOptions(ha="race", stream_replicas=2)
    with pytest.raises(PlanError, match=r"--stream-replicas 0: each copy keeps 1 to 3 of the "
                                        r"4 copies .* give one of those"):
        RunOptions(ha="race", replicas=4, sites=4, stream_replicas=0)


def test_racing_copies_spill_under_a_memory_budget() -> None:
    o = RunOptions(ha="race", site_memory=64, squeeze=["1@5=32"])
    assert o.site_memory == 64 and o.squeeze
