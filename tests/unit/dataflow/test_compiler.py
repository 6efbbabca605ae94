"""The compiler: bad plans fail with a message that says what to change."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.model.errors import PlanError
from sparkflux.operators.base import Operator
from sparkflux.operators.stateless import Filter


class Src(Source):
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())])

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from ()


class Timed(Src):
    event_time = "a"


class Other(Source):
    schema = pa.schema([pa.field("a", pa.int32()), pa.field("c", pa.float64())])
    event_time = "a"

    def batches(self) -> Iterator[pa.RecordBatch]:
        yield from ()


class Stateful(Operator):
    stateful = True

    def _bind(self, s: pa.Schema) -> pa.Schema:
        return s

    def process(self, b: pa.RecordBatch) -> pa.RecordBatch:
        return b


def test_a_valid_plan_has_one_stage_per_exchange() -> None:
    df = Dataflow("ok")
    (df.source(Src()).apply(Filter(pa.compute.field("a") > 0), name="f")
     .exchange(by=["a"]).apply(Stateful(), name="s1")
     .exchange(by=["b"]).apply(Stateful(), name="s2").sink())
    plan = compile_plan(df, partitions=8, sites=4)
    assert [s.key for s in plan.stages] == [("a",), ("b",)]
    assert [(st.name, st.kind) for st in plan.ingress.steps] == [("source0", "head"),
                                                                ("f", "apply")]
    assert [p for p in range(plan.partitions) if plan.site_of(p) == 1] == [1, 5]
    assert "stage 1: exchange(by=['b']), Stateful" in plan.describe()
    assert [len(s.program.in_ports) for s in plan.stages] == [1, 1]


def test_exchange_on_unknown_column() -> None:
    df = Dataflow("x")
    df.source(Src()).exchange(by=["nope"]).apply(Stateful()).sink()
    with pytest.raises(PlanError, match="unknown column.*'nope'.*the input has: a, b"):
        compile_plan(df, 8, 4)


def test_stateful_operator_without_exchange() -> None:
    df = Dataflow("x")
    df.source(Src()).apply(Stateful(), name="agg").exchange(by=["a"]).sink()
    with pytest.raises(PlanError, match="'agg'.*keeps state.*exchange"):
        compile_plan(df, 8, 4)


def test_fewer_partitions_than_sites() -> None:
    df = Dataflow("x")
    df.source(Src()).exchange(by=["a"]).apply(Stateful()).sink()
    with pytest.raises(PlanError, match=r"--partitions \(2\) must be at least --sites \(4\)"):
        compile_plan(df, 2, 4)


def test_duplicate_step_names_and_missing_sink() -> None:
    df = Dataflow("x")
    s = df.source(Src(), name="in")
    with pytest.raises(PlanError, match="duplicate step name 'in'"):
        df.source(Src(), name="in")
    s.exchange(by=["a"])
    with pytest.raises(PlanError, match="has no sink"):
        compile_plan(df, 8, 4)


def test_no_exchange_at_all() -> None:
    df = Dataflow("x")
    df.source(Src()).sink()
    with pytest.raises(PlanError, match="no exchange"):
        compile_plan(df, 8, 4)


def test_union_after_exchange_is_refused_and_before_is_fine() -> None:
    df = Dataflow("x")
    a = df.source(Src(), name="a").exchange(by=["a"])
    b = df.source(Src(), name="b").exchange(by=["a"], name="ex_b")
    a.union(b).apply(Stateful()).sink()
    with pytest.raises(PlanError, match="only sources can be unioned"):
        compile_plan(df, 8, 4)
    df2 = Dataflow("y")
    df2.source(Timed(), name="a").union(df2.source(Timed(), name="b")).exchange(
        by=["a"]).apply(Stateful()).sink()
    plan = compile_plan(df2, 8, 4)
    assert len(plan.sources) == 2


def test_a_union_of_sources_pads_their_columns_and_needs_event_times() -> None:
    df = Dataflow("u")
    df.source(Timed(), name="a", lateness=5).union(df.source(Other(), name="o")).exchange(
        by=["a"]).apply(Stateful()).sink()
    plan = compile_plan(df, 8, 4)
    union = plan.ingress.steps[-1]
    assert union.kind == "union" and union.schema is not None
    assert union.schema.names[:3] == ["a", "b", "c"]
    assert union.schema.field("a").type == pa.int64()
    assert [(s.name, s.event_time, s.lateness) for s in plan.streams] == [
        ("a", "a", 5), ("o", "a", 0)]
    untimed = Dataflow("v")
    untimed.source(Timed(), name="a").union(untimed.source(Src(), name="s")).exchange(
        by=["a"]).sink()
    with pytest.raises(PlanError, match="source 's' has no event_time"):
        compile_plan(untimed, 8, 4)
    with pytest.raises(PlanError, match="lateness must be an integer >= 0"):
        Dataflow("w").source(Timed(), lateness=-1)
    with pytest.raises(PlanError, match="lateness needs an event_time"):
        Dataflow("w").source(Src(), lateness=3)


class OldAdvance(Stateful):
    """Written against contract 1: ``advance`` took one progress marker."""

    def advance(self, progress):  # type: ignore[no-untyped-def,override]
        return progress


class OldHolds(Stateful):
    holds_progress = True


class Future(Stateful):
    contract = 3


@pytest.mark.parametrize("op,says", [
    (OldAdvance(), r"OldAdvance.advance\(progress\) takes one progress marker, as in operator "
                   r"contract 1: contract 2 tracks progress per mini-partition"),
    (OldHolds(), r"OldHolds defines holds_progress, which contract 1 read and contract 2 "
                 r"ignores: .*; remove the attribute"),
    (Future(), r"Future is written against operator contract 3; this sparkflux runs "
               r"contract 2"),
])
def test_an_operator_of_another_contract_is_refused_saying_what_changed(op: Operator,
                                                                      says: str) -> None:
    df = Dataflow("old")
    df.source(Src()).exchange(by=["a"]).apply(op, name="mine").sink()
    with pytest.raises(PlanError, match=says):
        compile_plan(df, partitions=4, sites=2)


def test_an_empty_exchange_key_sends_every_row_to_one_partition() -> None:
    df = Dataflow("global")
    df.source(Src()).exchange(by=[]).apply(Stateful(), name="s").sink()
    plan = compile_plan(df, partitions=8, sites=4)
    assert [s.key for s in plan.stages] == [()]
    assert "stage 0: exchange(by=[]), Stateful" in plan.describe()
    batch = pa.RecordBatch.from_pydict({"a": list(range(50)), "b": ["x"] * 50})
    assert plan.ingress._route(plan.ingress.out_ports[0], batch).tolist() == [0] * 50
    for bad in ("a", [""], None):
        with pytest.raises(PlanError, match=r"exchange\(by=...\) takes a list of column names"):
            Dataflow("bad").source(Src()).exchange(by=bad)  # type: ignore[arg-type]
