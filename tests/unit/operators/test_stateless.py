"""Filter, Map and Project against row-by-row models, across batch splits and moves."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sparkflux.operators.stateless as stateless_mod
from sparkflux.model.errors import PlanError
from sparkflux.operators.stateless import Filter, Map, Project
from tests.support.op_helpers import (
    assert_sn_increasing,
    make_batch,
    run,
    run_with_move,
    split,
    user_rows,
)


def random_input(seed: int, n: int = 300) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, n).astype(object)
    x[rng.random(n) < 0.05] = None
    return make_batch({"x": x.tolist(), "y": rng.normal(size=n), "z": rng.integers(0, 5, n)},
                      part=rng.integers(0, 4, n), sn=np.arange(n) * 2 + 3,
                      snm=rng.integers(0, 3, n), types={"x": pa.int64(), "z": pa.int16()})


def sys_rows(batch: pa.RecordBatch) -> list[tuple]:
    return list(zip(*(batch.column(c).to_pylist() for c in ("_sn", "_snm", "_t0", "_part")),
                    strict=True))


OPS = {
    "filter_expr": lambda: Filter((pc.field("x") > 0) & (pc.field("z") != 2)),
    "filter_fn": lambda: Filter(lambda b: pc.greater(b.column("y"), 0.0)),
    "filter_numpy": lambda: Filter(lambda b: b.column("z").to_numpy() % 2 == 0),
    "map": lambda: Map(lambda b: {"x": pc.cast(b.column("z"), pa.string()),
                                  "w": b.column("y").to_numpy() * 2},
                       [pa.field("x", pa.string()), pa.field("w", pa.float64())]),
    "map_batch": lambda: Map(lambda b: pa.record_batch({"v": pc.add(b.column("z"), 1)}),
                             [pa.field("v", pa.int64())]),
    "project_list": lambda: Project(["z", "x"]),
    "project_dict": lambda: Project({"zz": "z", "yy": "y"}),
}


def model(name: str, batch: pa.RecordBatch) -> list[tuple]:
    """Each operator's rows (user columns, then _sn, _snm), computed one row at a time."""
    out = []
    for r in batch.to_pylist():
        sn = (r["_sn"], r["_snm"])
        if ((name == "filter_expr" and r["x"] is not None and r["x"] > 0 and r["z"] != 2)
                or (name == "filter_fn" and r["y"] > 0)
                or (name == "filter_numpy" and r["z"] % 2 == 0)):
            out.append((r["x"], r["y"], r["z"], *sn))
        elif name == "map":
            out.append((str(r["z"]), r["y"], r["z"], r["y"] * 2, *sn))
        elif name == "map_batch":
            out.append((r["x"], r["y"], r["z"], r["z"] + 1, *sn))
        elif name == "project_list":
            out.append((r["z"], r["x"], *sn))
        elif name == "project_dict":
            out.append((r["z"], r["y"], *sn))
    return out


@pytest.mark.parametrize("name", sorted(OPS))
def test_matches_row_by_row_model(name: str) -> None:
    batch = random_input(1)
    out = run(OPS[name], [batch])
    assert user_rows(out) == model(name, batch)
    assert out.num_rows > 50
    assert_sn_increasing(out)
    # Each output row keeps the system columns of its input row.
    kept = {r[0]: r for r in sys_rows(batch)}
    assert all(kept[r[0]] == r for r in sys_rows(out))
    assert out.schema.names[-4:] == ["_sn", "_snm", "_t0", "_part"]


@pytest.mark.parametrize("name", sorted(OPS))
def test_batch_boundaries_do_not_matter(name: str) -> None:
    batch = random_input(2)
    whole = run(OPS[name], [batch])
    rng = np.random.default_rng(2)
    for pieces in (2, 9, 50):
        assert run(OPS[name], split(batch, rng, pieces)).equals(whole)


@pytest.mark.parametrize("name", sorted(OPS))
def test_state_moves_to_a_fresh_operator(name: str) -> None:
    batches = split(random_input(3), np.random.default_rng(3), 6)
    whole = run(OPS[name], batches)
    assert run_with_move(OPS[name], batches, 3).equals(whole)
    op = OPS[name]()
    op.bind(batches[0].schema)
    assert op.get_partition_state(0) is None and op.partition_info() == []
    op.install_partition_state(0, None)
    with pytest.raises(ValueError, match="stateless"):
        op.install_partition_state(0, {"x": 1})


def test_map_output_schema_replaces_in_place_and_appends() -> None:
    op = OPS["map"]()
    schema = op.bind(random_input(0, 3).schema)
    assert schema.names == ["x", "y", "z", "w", "_sn", "_snm", "_t0", "_part"]
    assert schema.field("x").type == pa.string()


def test_map_checks_what_the_function_returns() -> None:
    batch = random_input(0, 5)
    cases = [
        (lambda b: {}, "missing"),
        (lambda b: {"v": [1] * 5, "extra": [1] * 5}, "undeclared"),
        (lambda b: {"v": [1, 2]}, "2 values for 5 rows"),
    ]
    for fn, match in cases:
        op = Map(fn, [pa.field("v", pa.int64())])
        op.bind(batch.schema)
        with pytest.raises(ValueError, match=match):
            op.process(batch)


def test_unknown_column_is_a_plan_error() -> None:
    schema = random_input(0, 3).schema
    with pytest.raises(PlanError, match="nope"):
        Filter(pc.field("nope") > 1).bind(schema)
    with pytest.raises(PlanError, match="'nope'"):
        Project(["x", "nope"]).bind(schema)
    with pytest.raises(PlanError, match="'old'"):
        Project({"new": "old"}).bind(schema)


def test_bad_names_are_plan_errors() -> None:
    schema = random_input(0, 3).schema
    with pytest.raises(PlanError, match="_hidden"):
        Map(lambda b: {}, [pa.field("_hidden", pa.int64())])
    with pytest.raises(PlanError, match="twice"):
        Map(lambda b: {}, [pa.field("v", pa.int64()), pa.field("v", pa.int32())])
    with pytest.raises(PlanError, match="system column"):
        Project(["x", "_sn"])
    assert Project({"x": "y", "y": "x"}).bind(schema).names[:2] == ["x", "y"]  # a swap
    with pytest.raises(PlanError, match="twice"):
        Project(["x", "x"]).bind(schema)
    with pytest.raises(PlanError):
        Filter("x > 1")  # type: ignore[arg-type]


def test_empty_batches() -> None:
    batch = random_input(0, 4).slice(0, 0)
    for make in OPS.values():
        op = make()
        op.bind(batch.schema)
        assert op.process(batch).num_rows == 0


def test_doctests() -> None:
    assert doctest.testmod(stateless_mod).failed == 0
