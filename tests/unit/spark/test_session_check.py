"""``check_session`` on sessions a user might pass in: every setting that would break a run
is named with what to change, before anything starts; what only weakens it is a warning."""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.model.errors import PlanError
from sparkflux.spark import session_check
from sparkflux.spark.session_check import check_session, task_retries


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class FakeContext:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.master = master
        self.conf = FakeConf(conf)

    def getConf(self) -> FakeConf:  # noqa: N802 - Spark's name
        return self.conf


class FakeSession:
    def __init__(self, master: str, **conf: str) -> None:
        self.sparkContext = FakeContext(master, {k.replace("_", "."): v for k, v in
                                                 conf.items()})


@pytest.fixture(autouse=True)
def no_probe(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    probed: list[Any] = []
    monkeypatch.setattr(session_check, "probe_python", probed.append)
    return probed


def slots(monkeypatch: pytest.MonkeyPatch, n: int | None) -> None:
    monkeypatch.setattr(session_check, "_concurrent_tasks", lambda spark: n)


@pytest.mark.parametrize("master,conf,retries", [
    ("local[4]", {}, 1), ("local", {}, 1), ("local[*]", {}, 1), ("local[6,400]", {}, 400),
    ("local[4, 7]", {}, 7), ("spark://h:7077", {}, 4),
    ("spark://h:7077", {"spark.task.maxFailures": "400"}, 400),
])
def test_task_retries_as_spark_counts_them(master: str, conf: dict, retries: int) -> None:
    assert task_retries(master, FakeConf(conf)) == retries


def test_a_good_local_session_passes_without_a_probe(no_probe: list[Any]) -> None:
    assert check_session(FakeSession("local[6,400]"), 4, ha=True, user_session=False) == []
    assert no_probe == []


def test_local_n_without_retries_names_the_master_to_use() -> None:
    with pytest.raises(PlanError, match=r"local\[N,400\]"):
        check_session(FakeSession("local[6]"), 4, ha=True)
    # with --ha none a failure ends the run anyway: no retry needed
    assert check_session(FakeSession("local[6]"), 4, ha=False) == []


def test_speculation_dynamic_allocation_and_retries_are_all_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slots(monkeypatch, 8)
    bad = FakeSession("spark://h:7077", spark_speculation="true",
                      spark_dynamicAllocation_enabled="true", spark_task_maxFailures="1")
    with pytest.raises(PlanError) as e:
        check_session(bad, 4, ha=True)
    text = str(e.value)
    assert "spark.speculation=false" in text
    assert "spark.dynamicAllocation.enabled=false" in text
    assert "spark.task.maxFailures=400" in text


def test_too_few_slots_fails_and_one_short_of_a_spare_warns(
        monkeypatch: pytest.MonkeyPatch, no_probe: list[Any]) -> None:
    slots(monkeypatch, 3)
    with pytest.raises(PlanError, match="offers 3 task slots"):
        check_session(FakeSession("spark://h:7077", spark_task_maxFailures="400"), 4, True,
                      slots_wait=0)
    slots(monkeypatch, 4)
    warnings = check_session(FakeSession("spark://h:7077", spark_task_maxFailures="400"), 4,
                             True, slots_wait=0)
    assert len(warnings) == 1 and "1 more core" in warnings[0]
    assert len(no_probe) == 1  # a cluster's executors are always probed


def test_slots_counted_with_task_cpus_in_local_mode() -> None:
    with pytest.raises(PlanError, match=r"offers 3 task slots \(spark.task.cpus=2\)"):
        check_session(FakeSession("local[6,400]", spark_task_cpus="2"), 4, ha=True)


def test_few_retries_only_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    slots(monkeypatch, 5)
    warnings = check_session(FakeSession("spark://h:7077"), 4, ha=True, slots_wait=0)
    assert any("spark.task.maxFailures=400" in w for w in warnings)


def test_a_source_that_runs_spark_jobs_needs_its_slots_beside_the_sites() -> None:
    # four sites hold local[4]'s four slots for the whole run: a DataFrameSource's fetch job
    # would wait forever, so the start is refused with the master that works
    with pytest.raises(PlanError, match=r"need 1 more \(DataFrameSource 1\).*local\[5,400\]"):
        check_session(FakeSession("local[4,400]"), 4, ha=True, user_session=False,
                      source_slots={"DataFrameSource": 1})
    assert check_session(FakeSession("local[5,400]"), 4, ha=True, user_session=False,
                         source_slots={"DataFrameSource": 1}) == []


def test_more_than_two_sites_per_core_in_local_mode_warns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_check.os, "cpu_count", lambda: 2)
    assert check_session(FakeSession("local[10,400]"), 4, ha=True) == []  # two per core
    (warning,) = check_session(FakeSession("local[10,400]"), 8, ha=True)
    assert warning.startswith("8 site tasks on a machine with 2 cores (local mode): each "
                              "site gets about 0.25 of a core")
    assert "--sites 4 or less" in warning
