"""WindowJoin against a row-by-row model, across batch splits, watermarks and state moves."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.join as join_mod
from sparkflux.model.batch import child_minor
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Progress
from sparkflux.operators.join import WindowJoin
from tests.support.op_helpers import (
    assert_sn_increasing,
    everywhere,
    make_batch,
    run,
    run_with_move,
    split,
    user_rows,
)

LEFT, RIGHT = ["a", "b"], ["a", "t"]


def factory(window: int, on: tuple[str, ...] = ("k",)):
    return lambda: WindowJoin(on=list(on), side="s", time="t", window=window, left=LEFT,
                              right=RIGHT)


def random_input(seed: int, n: int = 400, monotone: bool = True, string_key: bool = False,
                 random_part: bool = False) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 6, n)
    step = rng.integers(0, 3, n)
    t = np.cumsum(step) if monotone else np.arange(n) + rng.integers(-6, 6, n)
    part = rng.integers(0, 3, n) if random_part else k % 3
    return make_batch(
        {"k": [f"key{x}" for x in k] if string_key else k,
         "s": rng.choice([0, 1, 2], n, p=[0.48, 0.48, 0.04]), "t": t,
         "a": rng.integers(0, 1000, n), "b": [f"b{x}" for x in rng.integers(0, 50, n)]},
        part=part, types={"s": pa.int8()},
    )


def model(batch: pa.RecordBatch, window: int) -> list[tuple]:
    """The semantics, one tuple at a time, with the purge horizon of the operator."""
    stored: dict[tuple, list[dict]] = {}
    horizon: dict[int, int] = {}
    out = []
    for x in batch.to_pylist():
        if x["s"] not in (0, 1):
            continue
        p = x["_part"]
        horizon[p] = max(horizon.get(p, x["t"]), x["t"])
        key = (p, x["k"])
        live = [y for y in stored.get(key, []) if y["t"] >= horizon[p] - window]
        k = 0
        for y in live:
            if y["s"] != x["s"] and abs(x["t"] - y["t"]) <= window:
                left, right = (x, y) if x["s"] == 0 else (y, x)
                minor = int(child_minor(np.array([x["_snm"]]), np.array([k]))[0])
                out.append((x["k"], left["a"], left["b"], right["a"], right["t"], x["_sn"],
                            minor))
                k += 1
        stored[key] = [*live, x]
    return out


@pytest.mark.parametrize("window", [0, 3, 10])
@pytest.mark.parametrize("string_key", [False, True])
def test_matches_row_by_row_model(window: int, string_key: bool) -> None:
    batch = random_input(window + 1, string_key=string_key)
    out = run(factory(window), [batch])
    expected = model(batch, window)
    assert len(expected) > (10 if window == 0 else 50)
    assert user_rows(out) == expected
    assert_sn_increasing(out)
    assert out.schema.names[:5] == ["k", "a", "b", "a_right", "t"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    batch = random_input(seed, monotone=seed != 3, random_part=seed == 2)
    whole = run(factory(4), [batch])
    assert user_rows(whole) == model(batch, 4)
    rng = np.random.default_rng(seed)
    for pieces in (2, 13, 70):
        assert run(factory(4), split(batch, rng, pieces)).equals(whole)


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    batch = random_input(7, string_key=string_key, random_part=True)
    batches = split(batch, np.random.default_rng(7), 8)
    whole = run(factory(5), batches)
    for cut in (1, 4, 7):
        assert run_with_move(factory(5), batches, cut).equals(whole)


def test_watermark_purges_state_without_changing_results() -> None:
    batch = random_input(11)
    t = batch.column("t").to_numpy()
    future = np.minimum.accumulate(np.r_[t, 1 << 40][::-1])[::-1]

    def progress(b: pa.RecordBatch) -> Progress | None:
        if b.num_rows == 0:
            return None
        last = int(b.column("_sn")[-1].as_py())
        return Progress(last, int(future[last + 1]))

    batches = split(batch, np.random.default_rng(11), 20)
    assert run(factory(3), batches, progress).equals(run(factory(3), batches))
    op = factory(3)()
    op.bind(batch.schema)
    op.process(batch)
    before = sum(i.nbytes for i in op.partition_info())
    op.advance(everywhere(Progress(batch.num_rows, int(t.max()) + 100)))
    after = op.partition_info()
    assert before > 0 and {i.nbytes for i in after} == {0} and len(after) == 3


def test_unknown_column_is_a_plan_error() -> None:
    schema = random_input(0, n=4).schema
    for kwargs, match in (({"on": ["nope"]}, "'nope'"), ({"side": "x"}, "'x'"),
                          ({"left": ["a", "zz"]}, "'zz'"), ({"right": ["q"]}, "'q'"),
                          ({"time": "when"}, "'when'")):
        args = {"on": ["k"], "side": "s", "time": "t", "window": 3, "left": LEFT,
                "right": RIGHT, **kwargs}
        with pytest.raises(PlanError, match=match):
            WindowJoin(**args).bind(schema)


def test_bad_plans() -> None:
    schema = random_input(0, n=4).schema
    with pytest.raises(PlanError, match="window"):
        WindowJoin(on=["k"], side="s", time="t", window=-1, left=LEFT, right=RIGHT)
    with pytest.raises(PlanError, match="join key"):
        WindowJoin(on=["k"], side="s", time="t", window=1, left=["k"], right=RIGHT).bind(schema)
    with pytest.raises(PlanError, match="side column"):
        WindowJoin(on=["k"], side="b", time="t", window=1, left=["a"], right=["t"]).bind(schema)


def test_doctests() -> None:
    assert doctest.testmod(join_mod).failed == 0
