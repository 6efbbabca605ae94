"""A dataflow whose reference does not number its rows (``examples/clicks.py``): the run and
``sparkflux reference`` agree on ``rows_digest``, and ``sparkflux run --check`` says so; netmon's
reference, which numbers its rows, prints ``output_digest`` too."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkflux.cli import main
from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.model.rows_digest import rows_digest_of
from sparkflux.runner import reference_result, run_example
from tests.conftest import ROOT

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark

CLICKS = str(ROOT / "examples" / "clicks.py")
EVENTS = 30_000


@pytest.fixture(scope="module")
def clicks() -> Any:
    from sparkflux.dataflow.examples import load_example

    return load_example(CLICKS)


def test_run_and_reference_agree_on_the_rows_digest(clicks: Any, spark: Any,
                                                    capsys: Any) -> None:
    args = netmon_args(events=EVENTS, seed=11, sites=2, partitions=8)
    sink = CollectSink()
    m = run_example(clicks, args, sink=sink, dead=DeadLetters(), spark=spark).metrics
    expected, _ = reference_result(clicks, args, spark)
    assert not expected.numbered and expected.output_digest is None
    assert expected.rows > 1_000 and m["output_tuples"] == expected.rows
    assert m["rows_digest"] == expected.rows_digest == rows_digest_of(sink.table())
    assert set(expected.table.column("page").to_pylist()) >= {"/", "/päge"}
    # the command prints the rows digest only: the reference does not number its rows
    assert main(["reference", CLICKS, "--events", str(EVENTS), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "output_digest" not in out
    assert (out["rows_digest"], out["output_tuples"]) == (m["rows_digest"], m["output_tuples"])


def test_run_check_reports_a_match(spark: Any, capsys: Any, tmp_path: Any) -> None:
    out = tmp_path / "clicks.parquet"
    code = main(["run", CLICKS, "--events", str(EVENTS), "--sites", "2", "--partitions", "8",
                 "--no-progress", "--check", "--output", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "check: match" in text and "the same " in text
    assert pq.read_table(out).num_rows > 1_000


def test_a_numbered_reference_prints_both_digests(spark: Any, capsys: Any) -> None:
    netmon = str(ROOT / "examples" / "netmon.py")
    assert main(["reference", netmon, "--events", "20000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(out)[:3] == ["output_digest", "rows_digest", "output_tuples"]
    assert out["output_digest"] != out["rows_digest"] and out["output_tuples"] > 1_000
