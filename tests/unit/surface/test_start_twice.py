"""``sparkflux.start`` on a dataflow that is already running (or still starting) is refused
with what to do; once that run has ended, or for another Dataflow, it starts."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

import sparkflux
from sparkflux import query
from sparkflux.dataflow.api import Dataflow
from sparkflux.model.errors import PlanError


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``start`` with the launch replaced by a query that ends when the test says."""
    queries: list[Any] = []

    def fake_start(dataflow: Dataflow, *args: Any) -> Any:
        q = SimpleNamespace(id=f"q{len(queries)}", done=threading.Event())
        queries.append(q)
        return q

    monkeypatch.setattr(query, "_start", fake_start)
    return queries


def test_a_running_dataflow_is_not_started_again(started: list[Any]) -> None:
    flow = Dataflow("clicks")
    first = sparkflux.start(flow)
    with pytest.raises(PlanError, match=r"dataflow 'clicks' is already running \(query q0\): "
                                        r".*Stop it first .*or build a new Dataflow"):
        sparkflux.start(flow)
    sparkflux.start(Dataflow("clicks"))  # another object, even of the same name, may run
    first.done.set()
    for _ in range(100):  # the run's end is noticed by a thread of its own
        with query._LOCK:
            if id(flow) not in query._RUNNING:
                break
        threading.Event().wait(0.01)
    assert sparkflux.start(flow).id == "q2"  # ended: it may run again


def test_a_start_that_fails_leaves_the_dataflow_free(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any) -> Any:
        raise PlanError("bad option")

    monkeypatch.setattr(query, "_start", failing)
    flow = Dataflow("clicks")
    for _ in range(2):  # the second is refused for its option, not as "already running"
        with pytest.raises(PlanError, match="bad option"):
            sparkflux.start(flow)
