"""CountWindowAggregate against a row-by-row model, across batch splits and state moves."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.count_window as count_window_mod
from sparkflux.model.errors import PlanError
from sparkflux.operators.count_window import CountWindowAggregate
from tests.support.op_helpers import (
    assert_sn_increasing,
    make_batch,
    run,
    run_with_move,
    split,
    user_rows,
)

AGGS = {"hi": "max", "lo": "min", "total": "sum", "n": "count", "mean": "avg"}


def factory(history: int, slide: int = 1, every: int = 1, by: tuple[str, ...] = ("g", "h"),
            aggs: dict[str, str] = AGGS):
    return lambda: CountWindowAggregate(by=list(by), value="v", history=history, slide=slide,
                                        every=every, aggs=aggs)


def random_input(seed: int, n: int = 500, floats: bool = False,
                 string_key: bool = False) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 5, n)
    h = rng.integers(0, 3, n)
    v = rng.normal(0, 10, n).round(2) if floats else rng.integers(-50, 50, n)
    part = rng.integers(0, 3, n)
    return make_batch({"g": [f"g{x}" for x in g] if string_key else g, "h": h, "v": v},
                      part=part, types={"h": pa.int8(), "v": pa.float32() if floats
                                        else pa.int32()})


def model(batch: pa.RecordBatch, history: int, slide: int, every: int,
          by: tuple[str, ...] = ("g", "h")) -> list[tuple]:
    """The semantics, one row at a time: state per (mini-partition, group)."""
    state: dict[tuple, tuple[int, list]] = {}
    out = []
    for r in batch.to_pylist():
        k = (r["_part"], *(r[c] for c in by))
        n, vals = state.get(k, (0, []))
        n, vals = n + 1, (vals + [r["v"]])[-history:]
        state[k] = (n, vals)
        if n % slide == 0 and (n // slide) % every == 0:
            aggs = (max(vals), min(vals), sum(vals), len(vals), sum(vals) / len(vals))
            out.append((*(r[c] for c in by), *aggs, r["_sn"], r["_snm"]))
    return out


def close(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        np.allclose(np.array(x, dtype=object)[2:].astype(float),
                    np.array(y, dtype=object)[2:].astype(float)) and x[:2] == y[:2]
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(("history", "slide", "every"),
                         [(1, 1, 1), (2, 1, 2), (3, 2, 1), (4, 3, 2), (5, 1, 1)])
@pytest.mark.parametrize("floats", [False, True])
def test_matches_row_by_row_model(history: int, slide: int, every: int, floats: bool) -> None:
    batch = random_input(history * 10 + slide, floats=floats)
    out = run(factory(history, slide, every), [batch])
    expected = model(batch, history, slide, every)
    assert len(expected) > 20
    if floats:
        assert close(user_rows(out), expected)
    else:
        assert user_rows(out) == expected
    assert_sn_increasing(out)
    t = pa.float64() if floats else pa.int64()
    assert [f.type for f in out.schema][2:7] == [t, t, t, pa.int64(), pa.float64()]


def test_string_keys_and_netmon_shape() -> None:
    batch = random_input(9, string_key=True)
    make = factory(2, 1, 2, aggs={"max_dur": "max", "avg_dur": "avg"})
    out = run(make, split(batch, np.random.default_rng(9), 5))
    expected = [(*r[:2], r[2], r[6], *r[7:]) for r in model(batch, 2, 1, 2)]
    assert user_rows(out) == expected
    assert out.schema.names[:4] == ["g", "h", "max_dur", "avg_dur"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    batch = random_input(seed, string_key=seed == 2)
    make = factory(3, 2, 2)
    whole = run(make, [batch])
    rng = np.random.default_rng(seed)
    for pieces in (2, 11, 60):
        assert run(make, split(batch, rng, pieces)).equals(whole)


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    batch = random_input(4, string_key=string_key)
    batches = split(batch, np.random.default_rng(4), 6)
    make = factory(3, 1, 2)
    whole = run(make, batches)
    for cut in (1, 3, 5):
        assert run_with_move(make, batches, cut).equals(whole)


def test_partition_info() -> None:
    batch = make_batch({"g": [1, 2, 1, 3], "h": [0, 0, 0, 0], "v": [1, 2, 3, 4]},
                       part=[0, 1, 0, 1])
    op = factory(2)()
    op.bind(batch.schema)
    op.process(batch)
    info = {i.part: (i.keys, i.nbytes > 0) for i in op.partition_info()}
    assert info == {0: (1, True), 1: (2, True)}


def test_unknown_column_is_a_plan_error() -> None:
    schema = random_input(0, n=3).schema
    with pytest.raises(PlanError, match="'nope'"):
        CountWindowAggregate(by=["nope"], value="v", history=2, aggs={"m": "max"}).bind(schema)
    with pytest.raises(PlanError, match="'w'"):
        CountWindowAggregate(by=["g"], value="w", history=2, aggs={"m": "max"}).bind(schema)


@pytest.mark.parametrize("kwargs", [
    {"history": 0}, {"history": 2, "slide": 0}, {"history": 2, "every": -1},
    {"history": 2, "aggs": {"m": "median"}}, {"history": 2, "aggs": {}},
])
def test_bad_parameters_are_plan_errors(kwargs: dict) -> None:
    kwargs = {"aggs": {"m": "max"}, **kwargs}
    with pytest.raises(PlanError):
        CountWindowAggregate(by=["g"], value="v", **kwargs)


def test_output_name_clash_is_a_plan_error() -> None:
    schema = random_input(0, n=3).schema
    with pytest.raises(PlanError, match="'g'"):
        CountWindowAggregate(by=["g"], value="v", history=2, aggs={"g": "max"}).bind(schema)


def test_doctests() -> None:
    assert doctest.testmod(count_window_mod).failed == 0
