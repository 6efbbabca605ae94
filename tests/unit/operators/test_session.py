"""SessionReconstruction against a row-by-row model, across batch splits and state moves."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.keyed as keyed
import sparkflux.operators.session as session_mod
from sparkflux.model.errors import PlanError
from sparkflux.operators.keyed import KeyCollision
from sparkflux.operators.session import SessionReconstruction
from tests.support.op_helpers import (
    assert_sn_increasing,
    make_batch,
    run,
    run_with_move,
    split,
    user_rows,
)

START, END = 0, 1


def make_op(key: tuple[str, ...] = ("a", "b")) -> SessionReconstruction:
    return SessionReconstruction(
        key=list(key), kind="kind", start=START, end=END, time="ts", carry=["x", "a"]
    )


def random_input(seed: int, n: int = 600, string_key: bool = False,
                 random_part: bool = False) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, n)
    b = rng.integers(0, 4, n)
    kind = rng.choice([START, END, 2], n, p=[0.45, 0.45, 0.1])
    ts = np.cumsum(rng.integers(0, 5, n))
    part = rng.integers(0, 3, n) if random_part else (a + b) % 3
    cols = {"a": [f"k{v}" for v in a] if string_key else a, "b": b, "kind": kind, "ts": ts,
            "x": rng.integers(0, 1000, n)}
    types = {"b": pa.int32(), "kind": pa.int8()}
    if not string_key:
        types["a"] = pa.int16()
    return make_batch(cols, part=part, types=types)


def model(batch: pa.RecordBatch, key: tuple[str, ...] = ("a", "b")) -> list[tuple]:
    """The semantics, one row at a time: state per (mini-partition, key)."""
    open_at: dict[tuple, int] = {}
    out = []
    for r in batch.to_pylist():
        k = (r["_part"], *(r[c] for c in key))
        if r["kind"] == START:
            open_at[k] = r["ts"]
        elif r["kind"] == END and k in open_at:
            out.append((r["x"], r["a"], r["ts"] - open_at.pop(k), r["_sn"], r["_snm"]))
    return out


@pytest.mark.parametrize("string_key", [False, True])
@pytest.mark.parametrize("random_part", [False, True])
def test_matches_row_by_row_model(string_key: bool, random_part: bool) -> None:
    batch = random_input(1, string_key=string_key, random_part=random_part)
    out = run(make_op, [batch])
    assert user_rows(out) == model(batch)
    assert len(model(batch)) > 50
    assert_sn_increasing(out)
    assert out.schema.names == ["x", "a", "dur", "_sn", "_snm", "_t0", "_part"]
    assert out.schema.field("dur").type == pa.int64()


def test_two_int64_keys_use_hashed_codes() -> None:
    rng = np.random.default_rng(5)
    n = 300
    batch = make_batch(
        {"a": rng.integers(0, 5, n) * (1 << 40), "b": rng.integers(0, 3, n),
         "kind": rng.integers(0, 2, n), "ts": np.arange(n), "x": np.arange(n)},
        part=rng.integers(0, 2, n),
    )
    op = make_op()
    op.bind(batch.schema)
    assert not op.coder.exact
    out = run(make_op, split(batch, rng, 7))
    assert user_rows(out) == model(batch)


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    batch = random_input(seed, string_key=seed == 3)
    whole = run(make_op, [batch])
    rng = np.random.default_rng(seed)
    for pieces in (2, 9, 40):
        parts = run(make_op, split(batch, rng, pieces))
        assert parts.equals(whole)


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    batch = random_input(6, string_key=string_key, random_part=True)
    rng = np.random.default_rng(6)
    batches = split(batch, rng, 8)
    whole = run(make_op, batches)
    for cut in (1, 4, 7):
        assert run_with_move(make_op, batches, cut).equals(whole)


def test_partition_info_counts_open_sessions() -> None:
    batch = make_batch({"a": [1, 2, 3, 1], "b": [0, 0, 0, 0], "kind": [0, 0, 0, 1],
                        "ts": [1, 2, 3, 4], "x": [0, 0, 0, 0]}, part=[0, 1, 1, 0])
    op = make_op()
    op.bind(batch.schema)
    op.process(batch)
    info = {i.part: i for i in op.partition_info()}
    assert set(info) == {1} and info[1].keys == 2 and info[1].nbytes > 0
    op.drop_partition(1)
    assert op.partition_info() == []


def test_restart_end_without_start_and_other_kinds() -> None:
    batch = make_batch({"a": [1, 1, 1, 1, 1, 1], "b": [0] * 6, "kind": [1, 0, 0, 2, 1, 1],
                        "ts": [0, 10, 20, 25, 30, 40], "x": [9, 8, 7, 6, 5, 4]})
    out = run(make_op, [batch])
    # The first END has no session; the second START restarts it; the last END finds none.
    assert user_rows(out) == [(5, 1, 10, 4, 0)]


def test_unknown_column_is_a_plan_error() -> None:
    batch = random_input(0, n=5)
    for op in (
        SessionReconstruction(key=["nope"], kind="kind", start=0, end=1, time="ts", carry=["x"]),
        SessionReconstruction(key=["a"], kind="kind", start=0, end=1, time="ts", carry=["zz"]),
        SessionReconstruction(key=["a"], kind="k2", start=0, end=1, time="ts", carry=["x"]),
    ):
        with pytest.raises(PlanError, match="nope|zz|k2"):
            op.bind(batch.schema)


def test_bad_plans() -> None:
    batch = random_input(0, n=5)
    with pytest.raises(PlanError, match="dur"):
        SessionReconstruction(key=["a"], kind="kind", start=0, end=1, time="ts",
                              carry=["x", "dur"]).bind(
            make_batch({"a": [1], "kind": [0], "ts": [1], "x": [1], "dur": [1]}).schema)
    with pytest.raises(PlanError, match="time column"):
        SessionReconstruction(key=["a"], kind="kind", start=0, end=1, time="x",
                              carry=["x"]).bind(make_batch({"a": [1], "kind": [0],
                                                            "x": [1.5]}).schema)
    with pytest.raises(PlanError, match="kind value"):
        SessionReconstruction(key=["a"], kind="kind", start="s", end="e", time="ts",
                              carry=["x"]).bind(batch.schema)


def test_hash_collisions_are_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyed, "key_codes", lambda b, cols: np.zeros(len(b), np.uint64))
    op = make_op(("a",))
    b1 = make_batch({"a": ["p"], "b": [0], "kind": [0], "ts": [1], "x": [1]})
    b2 = make_batch({"a": ["q"], "b": [0], "kind": [1], "ts": [2], "x": [1]}, sn=[1])
    op.bind(b1.schema)
    op.process(b1)
    with pytest.raises(KeyCollision, match="'q'"):
        op.process(b2)
    both = make_batch({"a": ["p", "q"], "b": [0, 0], "kind": [0, 0], "ts": [1, 2], "x": [1, 1]})
    with pytest.raises(KeyCollision):
        run(lambda: make_op(("a",)), [both])


def test_timestamps_and_empty_batches() -> None:
    batch = make_batch({"a": [1, 1], "b": [0, 0], "kind": [0, 1], "ts": [1_000, 4_000],
                        "x": [0, 1]}, types={"ts": pa.timestamp("us")})
    out = run(make_op, [batch.slice(0, 0), batch, batch.slice(2, 0)])
    assert out.column("dur").to_pylist() == [3_000]


def test_doctests() -> None:
    assert doctest.testmod(session_mod).failed == 0
