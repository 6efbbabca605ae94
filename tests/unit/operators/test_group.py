"""GroupAggregate against a row-by-row model, across batch splits and state moves."""

from __future__ import annotations

import doctest
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.group as group_mod
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Progress
from sparkflux.operators.base import Operator
from sparkflux.operators.group import GroupAggregate, running
from tests.support.op_helpers import (
    assert_sn_increasing,
    everywhere,
    make_batch,
    run,
    run_with_move,
    split,
)

AGGS = {"n": ("count", None), "total": ("sum", "v"), "lo": ("min", "v"), "hi": ("max", "v"),
        "mean": ("avg", "v"), "first_name": ("first", "name"), "last_name": ("last", "name"),
        "top": ("argmax", "price", "name"), "cheap": ("argmin", "price", "bidder")}


def factory(aggs: dict = AGGS, carry: tuple[str, ...] = ("bidder",),
            by: tuple[str, ...] = ("g", "h")) -> Callable[[], Operator]:
    return lambda: GroupAggregate(by=list(by), aggs=aggs, carry=list(carry))


def random_input(seed: int, n: int = 600, floats: bool = False,
                 string_key: bool = False) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 6, n)
    v = rng.normal(0, 10, n) if floats else rng.integers(-50, 50, n)
    # Some keys are hot: long runs of one key within a batch.
    g[rng.random(n) < 0.4] = 0
    return make_batch({"g": [f"g{x}" for x in g] if string_key else g,
                       "h": rng.integers(0, 2, n), "v": v,
                       "name": [f"n{x}" for x in rng.integers(0, 50, n)],
                       "price": rng.integers(0, 8, n),
                       "bidder": rng.integers(100, 200, n)},
                      part=rng.integers(0, 3, n),
                      types={"h": pa.int8(), "v": pa.float32() if floats else pa.int32()})


def model(batch: pa.RecordBatch) -> list[tuple]:
    """The semantics, one row at a time: state per (mini-partition, key); sums left folds."""
    state: dict[tuple, dict] = {}
    out = []
    for r in batch.to_pylist():
        s = state.setdefault((r["_part"], r["g"], r["h"]), {
            "n": 0, "total": 0, "lo": None, "hi": None, "first": r["name"],
            "top": (r["price"], r["name"]), "cheap": (r["price"], r["bidder"])})
        v = r["v"]
        s["n"] += 1
        s["total"] += v
        s["lo"] = v if s["lo"] is None else min(s["lo"], v)
        s["hi"] = v if s["hi"] is None else max(s["hi"], v)
        if r["price"] > s["top"][0]:
            s["top"] = (r["price"], r["name"])
        if r["price"] < s["cheap"][0]:
            s["cheap"] = (r["price"], r["bidder"])
        out.append((r["g"], r["h"], s["n"], s["total"], s["lo"], s["hi"], s["total"] / s["n"],
                    s["first"], r["name"], s["top"][1], s["cheap"][1], r["bidder"], r["_sn"],
                    r["_snm"]))
    return out


def rows(batch: pa.RecordBatch) -> list[tuple]:
    names = [n for n in batch.schema.names if not n.startswith("_")] + ["_sn", "_snm"]
    return list(zip(*(batch.column(n).to_pylist() for n in names), strict=True))


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("string_key", [False, True])
def test_matches_row_by_row_model(floats: bool, string_key: bool) -> None:
    batch = random_input(1 + floats + 2 * string_key, floats=floats, string_key=string_key)
    out = run(factory(), split(batch, np.random.default_rng(3), 7))
    assert rows(out) == model(batch)  # floats too: the sums are left folds in SN order
    assert_sn_increasing(out)
    t = pa.float64() if floats else pa.int64()
    assert [f.type for f in out.schema][:12] == [
        pa.string() if string_key else pa.int64(), pa.int8(), pa.int64(), t, t, t,
        pa.float64(), pa.string(), pa.string(), pa.string(), pa.int64(), pa.int64()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    batch = random_input(seed, floats=seed != 2, string_key=seed == 3)
    whole = run(factory(), [batch])
    rng = np.random.default_rng(seed)
    for pieces in (2, 11, 60, 300):
        assert run(factory(), split(batch, rng, pieces)).equals(whole)


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    batch = random_input(4, floats=True, string_key=string_key)
    batches = split(batch, np.random.default_rng(4), 6)
    whole = run(factory(), batches)
    for cut in (1, 3, 5):
        for wire in (False, True):
            assert run_with_move(factory(), batches, cut, wire=wire).equals(whole)


def test_progress_passes_through_and_nothing_is_held() -> None:
    batch = random_input(5, n=20)
    op = factory()()
    op.bind(batch.schema)
    assert op.process(batch).num_rows == 20
    out, frontier = op.advance(everywhere(Progress(30, 7)))
    assert out.num_rows == 0 and frontier.of(2) == Progress(30, 7)


def test_argmax_ties_go_to_the_earliest_row_and_nan_never_wins() -> None:
    batch = make_batch({"k": [1] * 5, "p": [np.nan, 2.0, 2.0, np.nan, 3.0],
                        "who": ["a", "b", "c", "d", "e"]})
    op = GroupAggregate(by=["k"], aggs={"best": ("argmax", "p", "who"),
                                        "worst": ("argmin", "p", "who")})
    out = run(lambda: op, [batch]).to_pydict()
    assert out["best"] == ["a", "b", "b", "b", "e"]
    assert out["worst"] == ["a", "b", "b", "b", "b"]


def test_running_folds_every_group_sequentially() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, 50)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    values = rng.normal(0, 1e6, int(sizes.sum()))
    init = rng.normal(0, 1, sizes.size)
    got = running(np.add, init, values, starts, sizes)
    for g in range(sizes.size):
        acc = init[g]
        for i in range(starts[g], starts[g] + sizes[g]):
            acc = acc + values[i]
            assert got[i] == acc


def test_partition_info_counts_keys() -> None:
    batch = make_batch({"g": [1, 2, 1, 3], "h": [0, 0, 0, 0], "v": [1, 2, 3, 4],
                        "name": ["a"] * 4, "price": [1] * 4, "bidder": [1] * 4},
                       part=[0, 1, 0, 1])
    op = factory()()
    op.bind(batch.schema)
    op.process(batch)
    info = {i.part: (i.keys, i.nbytes > 0) for i in op.partition_info()}
    assert info == {0: (1, True), 1: (2, True)}


def test_plan_errors_say_what_to_change() -> None:
    schema = random_input(0, n=3).schema
    for aggs, carry, match in (
        ({"m": ("max", "nope")}, (), "'nope'"),
        ({"m": ("max", "v")}, ("gone",), "'gone'"),
        ({"m": ("sum", "name")}, (), "must be numeric"),
        ({"g": ("max", "v")}, (), "twice"),
        ({"m": ("max", "v")}, ("v", "v"), "twice"),
    ):
        with pytest.raises(PlanError, match=match):
            GroupAggregate(by=["g"], aggs=aggs, carry=list(carry)).bind(schema)
    with pytest.raises(PlanError, match="'nope'"):
        GroupAggregate(by=["nope"], aggs={"n": ("count", None)}).bind(schema)
    for aggs, match in (({}, "non-empty dict"),
                        ({"m": "max"}, r"""reads a column: write 'm': \("max", "<column>"\)"""),
                        ({"m": ("median", "v")}, "unknown function 'median'; use one of"),
                        ({"m": ("argmax", "price")}, "value_column, carried_column"),
                        ({"m": ("max", None)}, r"\(func, column\)")):
        with pytest.raises(PlanError, match=match):
            GroupAggregate(by=["g"], aggs=aggs)
    with pytest.raises(PlanError, match="list of column names"):
        GroupAggregate(by=["g"], aggs={"n": ("count", None)}, carry="v")  # type: ignore[arg-type]


def test_doctests() -> None:
    assert doctest.testmod(group_mod).failed == 0
