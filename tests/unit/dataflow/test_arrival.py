"""Which stages racing copies may run in arrival order (``PhysicalPlan.arrival``): those whose
every operator is order-insensitive, stateless and holds no progress back, or a time-window
aggregate (Algorithm 3), and only with ``arrival_order`` and racing replicas; and which of
them send out of SN order (``PhysicalPlan.unordered``)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.dataflow.api import Dataflow
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.model.progress import Frontier
from sparkflux.operators.session_window import SessionWindowAggregate
from sparkflux.operators.stateless import Filter, Map
from sparkflux.operators.time_window import TimeWindowAggregate
from sparkflux.sim.workload import TinySessions


class RunningMap(Map):
    """A subclass of ``Map`` that keeps state: it is not taken for order-insensitive."""

    stateful = True


class HoldingMap(Map):
    """A subclass of ``Map`` that holds its progress back."""

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        return super().advance(frontier)


def plan(second: Map) -> object:
    df = Dataflow("arrival")
    (df.source(TinySessions(40, 10, 1), name="events")
       .exchange(by=["src"])
       .apply(Filter(pc.field("dst") != 3), name="keep")
       .exchange(by=["dst"])
       .apply(second, name="second")
       .sink())
    return replace(compile_plan(df, 4, 2), arrival_order=True)


def same() -> dict[str, object]:
    return {"fn": lambda b: {"app": b.column("app")}, "fields": [pa.field("app", pa.int32())]}


def test_stateless_order_insensitive_stages_run_in_arrival_order_when_racing() -> None:
    p = plan(Map(**same()))
    assert p.arrival(race=True) == (True, True)
    assert p.arrival(race=False) == (False, False)
    assert replace(p, arrival_order=False).arrival(race=True) == (False, False)


def test_a_subclass_that_keeps_state_or_holds_progress_merges() -> None:
    assert plan(RunningMap(**same())).arrival(race=True) == (True, False)
    assert plan(HoldingMap(**same())).arrival(race=True) == (True, False)


def windowed(first: object, second: object, by: str = "app") -> object:
    df = Dataflow("arrival_windows")
    (df.source(TinySessions(40, 10, 1), name="events")
       .exchange(by=["src"])
       .apply(first, name="first")
       .exchange(by=[by])
       .apply(second, name="second")
       .sink())
    return replace(compile_plan(df, 4, 2), arrival_order=True)


def test_a_time_window_stage_takes_arrival_order_and_sends_in_sn_order() -> None:
    """Algorithm 3: a time-window aggregate folds any order and emits at its claim, so its
    stage runs as rows arrive (``arrival``) but its output stays ordered (``unordered``)."""
    window = TimeWindowAggregate(by=["app"], time="ts", size=50, aggs={"n": "count"})
    p = windowed(Map(**same()), window)
    assert p.arrival(race=True) == (True, True)
    assert p.unordered(race=True) == (True, False)
    assert p.arrival(race=False) == p.unordered(race=False) == (False, False)


def test_a_session_window_stage_still_merges() -> None:
    """Sessions are order-sensitive (a row decides which session the next joins): their
    stage merges; a filter after them runs in arrival order."""
    sessions = SessionWindowAggregate(by=["src"], time="ts", gap=20, aggs={"n": "count"})
    p = windowed(sessions, Filter(pc.field("n") >= 1), by="src")
    assert p.arrival(race=True) == (False, True)
    assert p.unordered(race=True) == (False, True)
