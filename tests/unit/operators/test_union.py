"""union_batches and unify_schemas: SN-ordered merge, alignment, and plan errors."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.union as union_mod
from sparkflux.model.batch import concat
from sparkflux.model.errors import PlanError
from sparkflux.operators.union import unify_schemas, union_batches
from tests.support.op_helpers import assert_sn_increasing, make_batch, split, user_rows

TARGET = pa.schema([("a", pa.int64()), ("b", pa.large_string()), ("c", pa.float64())])


def random_inputs(seed: int, n: int = 300, inputs: int = 3) -> list[pa.RecordBatch]:
    """``inputs`` SN-ordered streams over disjoint SNs, in differing column orders and types."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, inputs, n)
    sn = np.cumsum(rng.integers(1, 4, n))
    out = []
    for i in range(inputs):
        mine = owner == i
        cols = {"a": sn[mine] * 7, "b": [f"s{v}" for v in sn[mine]], "c": sn[mine] / 4}
        types = {"a": [pa.int64(), pa.int32(), pa.uint16()][i],
                 "b": [pa.string(), pa.large_string(), pa.string()][i],
                 "c": [pa.float64(), pa.float32(), pa.float64()][i]}
        names = [["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"]][i]
        out.append(make_batch({k: cols[k] for k in names}, part=np.full(mine.sum(), i),
                              sn=sn[mine], types=types))
    return out


def model(inputs: list[pa.RecordBatch]) -> list[tuple]:
    rows = [r for b in inputs for r in b.to_pylist()]
    rows.sort(key=lambda r: (r["_sn"], r["_snm"]))
    return [(r["a"], r["b"], float(r["c"]), r["_sn"], r["_snm"]) for r in rows]


def test_merges_in_sn_order_and_aligns_columns() -> None:
    inputs = random_inputs(1)
    out = union_batches([[b] for b in inputs], TARGET)
    assert user_rows(out) == model(inputs)
    assert_sn_increasing(out)
    assert out.schema.names == ["a", "b", "c", "_sn", "_snm", "_t0", "_part"]
    assert [f.type for f in out.schema][:3] == list(TARGET.types)
    assert sorted(set(out.column("_part").to_pylist())) == [0, 1, 2]


@pytest.mark.parametrize("seed", [2, 3])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    inputs = random_inputs(seed)
    whole = union_batches([[b] for b in inputs], TARGET)
    rng = np.random.default_rng(seed)
    for pieces in (2, 7, 30):
        assert union_batches([split(b, rng, pieces) for b in inputs], TARGET).equals(whole)


def test_merging_a_prefix_then_the_rest_is_the_whole() -> None:
    # The union has no state: merging everything up to an SN, then the rest, changes nothing.
    inputs = random_inputs(4)
    whole = union_batches([[b] for b in inputs], TARGET)
    cut = 250
    head = [[b.filter(pa.array(b.column("_sn").to_numpy() <= cut))] for b in inputs]
    tail = [[b.filter(pa.array(b.column("_sn").to_numpy() > cut))] for b in inputs]
    both = concat([union_batches(head, TARGET), union_batches(tail, TARGET)])
    assert both.equals(whole)


def test_unify_widens_and_follows_the_first_order() -> None:
    schemas = [b.schema for b in random_inputs(0, n=10)]
    unified = unify_schemas(schemas)
    assert unified == pa.schema([("a", pa.int64()), ("b", pa.large_string()),
                                 ("c", pa.float64())])
    assert unify_schemas([pa.schema([("u", pa.uint32())]), pa.schema([("u", pa.int8())])]
                         ) == pa.schema([("u", pa.int64())])


@pytest.mark.parametrize(("second", "match"), [
    (pa.schema([("a", pa.int64())]), "'b'"),
    (pa.schema([("a", pa.int64()), ("b", pa.string()), ("x", pa.int8())]), "'x'"),
    (pa.schema([("a", pa.string()), ("b", pa.string())]), "'a'.*int64.*string"),
    (pa.schema([("a", pa.float64()), ("b", pa.string())]), "'a'"),
])
def test_unify_names_the_mismatching_column(second: pa.Schema, match: str) -> None:
    first = pa.schema([("a", pa.int64()), ("b", pa.string())])
    with pytest.raises(PlanError, match=match):
        unify_schemas([first, second])


def test_unknown_column_and_unsafe_casts_are_plan_errors() -> None:
    good = make_batch({"a": [1], "b": ["x"], "c": [0.5]})
    with pytest.raises(PlanError, match="'c'"):
        union_batches([[good], [make_batch({"a": [1], "b": ["x"]}, sn=[1])]], TARGET)
    with pytest.raises(PlanError, match="'d'"):
        union_batches([[make_batch({"a": [1], "b": ["x"], "c": [0.5], "d": [1]})]], TARGET)
    narrow = pa.schema([("a", pa.int32()), ("b", pa.string()), ("c", pa.float64())])
    with pytest.raises(PlanError, match="'a'.*int64.*int32"):
        union_batches([[good]], narrow)
    with pytest.raises(PlanError, match="'c'"):
        union_batches([[make_batch({"a": [1], "b": ["x"], "c": ["no"]})]], TARGET)


def test_empty_inputs() -> None:
    out = union_batches([[], [make_batch({"a": [1], "b": ["x"], "c": [0.5]}).slice(0, 0)]],
                        TARGET)
    assert out.num_rows == 0 and out.schema.names[:3] == ["a", "b", "c"]
    with pytest.raises(PlanError):
        unify_schemas([])


def test_doctests() -> None:
    assert doctest.testmod(union_mod).failed == 0
