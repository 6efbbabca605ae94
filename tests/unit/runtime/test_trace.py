"""runtime/trace.py: the ages of rows at each point of a process's data path, written per
process and added up across processes in the order a row passes the points."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.schema import T0
from sparkflux.runtime import trace

NOW = 1_800_000_000.0


def batch_aged(*ages: float) -> pa.RecordBatch:
    return pa.record_batch({"x": list(range(len(ages))), T0: [NOW - a for a in ages]})


def test_off_unless_the_environment_names_a_directory(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(trace.ENV, raising=False)
    assert trace._from_env() is None
    monkeypatch.setenv(trace.ENV, str(tmp_path / "ages"))
    t = trace._from_env()
    assert t is not None and t.path.parent == tmp_path / "ages" and t.path.parent.is_dir()


def test_ages_are_added_up_per_point_and_stage_across_processes(tmp_path: Path) -> None:
    a = trace.AgeTrace(tmp_path / "1.json")
    b = trace.AgeTrace(tmp_path / "2.json")
    a.note("sent", 0, batch_aged(0.001, 0.003), NOW)
    a.note("delivered", 1, batch_aged(0.020), NOW)
    b.note("received", 0, batch_aged(0.004, 0.004), NOW)
    b.note("pass", 0, batch_aged(0.010, 0.012), NOW)
    b.note("sent", 1, batch_aged(0.015), NOW)
    b.note("received", 1, None, NOW)  # an acknowledgement's frame: no rows
    b.note("received", 1, pa.record_batch({"x": [1]}), NOW)  # no admission times: not counted
    a.write()
    b.write()
    points = trace.read(tmp_path)
    assert trace.path_order(points) == [("sent", 0), ("received", 0), ("pass", 0),
                                        ("sent", 1), ("delivered", 1)]
    assert points[("sent", 0)]["rows"] == 2
    assert points[("sent", 0)]["age_sum"] == pytest.approx(0.004, abs=1e-3)
    assert points[("pass", 0)]["age_sum"] / 2 == pytest.approx(0.011, abs=1e-3)
    assert 0.009 <= trace.percentile(points[("pass", 0)]["hist"], 50) <= 0.013
    assert 0.018 <= trace.percentile(points[("delivered", 1)]["hist"], 99) <= 0.023


def test_a_process_rewrites_its_file_whole(tmp_path: Path) -> None:
    t = trace.AgeTrace(tmp_path / "7.json")
    t.note("sent", 0, batch_aged(0.002), NOW)
    t.write()
    t.note("sent", 0, batch_aged(0.002), NOW)
    t.write()
    assert [p.name for p in tmp_path.iterdir()] == ["7.json"]
    assert trace.read(tmp_path)[("sent", 0)]["rows"] == 2


def test_percentile_of_an_empty_histogram_is_zero() -> None:
    assert trace.percentile(np.zeros(trace.EDGES.size - 1, np.int64), 99) == 0.0
