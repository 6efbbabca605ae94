"""The rows digest: order-independent, blind to the system columns, sensitive to every row."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.digest import digest_of
from sparkflux.model.rows_digest import FLOAT_RTOL, RowsDigest, round_floats, rows_digest_of

N = 2_000


def table(n: int = N, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    pages = np.array(["/home", "/cart", "", "/p/ü"])
    return pa.table({
        "app": pa.array(rng.integers(0, 10, n), pa.int32()),
        "page": pa.array(pages[rng.integers(0, len(pages), n)]),
        "max_dur": pa.array(rng.integers(-5, 5, n), pa.int64()),
        "avg_dur": pa.array(rng.random(n) * 100),
        "_sn": pa.array(np.arange(n), pa.int64()),
        "_snm": pa.array(np.zeros(n, np.int64)),
        "_t0": pa.array(rng.random(n)),
    })


def with_column(t: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, values)


def test_independent_of_order_batches_columns_and_system_columns() -> None:
    t = table()
    d = rows_digest_of(t)
    perm = pa.array(np.random.default_rng(0).permutation(N))
    shuffled = t.take(perm)
    assert rows_digest_of(shuffled) == d
    assert digest_of(shuffled) != digest_of(t)  # the ordered digest does see the order
    assert rows_digest_of(shuffled.to_batches(max_chunksize=97)) == d
    renumbered = with_column(t, "_sn", pa.array(np.arange(N) * 7 + 3, pa.int64()))
    assert rows_digest_of(renumbered.drop_columns(["_snm", "_t0"])) == d
    assert rows_digest_of(t.select(["avg_dur", "app", "max_dur", "page"])) == d
    # int32 and int64 of the same values agree: the reference is cast, but need not be
    assert rows_digest_of(with_column(t, "app", t.column("app").cast(pa.int64()))) == d
    inc = RowsDigest()
    for b in shuffled.to_batches(max_chunksize=500):
        inc.update(b)
    assert inc.hexdigest() == d and inc.rows == N


def test_one_changed_dropped_or_duplicated_row_changes_it() -> None:
    t = table()
    d = rows_digest_of(t)
    for name in ("app", "page", "max_dur", "avg_dur"):
        col = t.column(name).to_pylist()
        changed = {"app": 11, "page": "/homE", "max_dur": 6, "avg_dur": 100.5}
        col[N // 2] = changed[name]
        assert rows_digest_of(with_column(t, name, pa.array(col, t.schema.field(name).type))) \
            != d, name
    assert rows_digest_of(t.slice(1)) != d  # one row dropped
    dup = pa.concat_tables([t, t.slice(5, 1)])
    assert rows_digest_of(dup) != d  # one row twice
    # swapping two values between rows is a different multiset of rows
    app = t.column("app").to_pylist()
    i, j = next((i, j) for i in range(N) for j in range(i + 1, N) if app[i] != app[j])
    app[i], app[j] = app[j], app[i]
    assert rows_digest_of(with_column(t, "app", pa.array(app, pa.int32()))) != d
    # a dropped row and a duplicated one together keep the count, not the digest
    assert rows_digest_of(pa.concat_tables([t.slice(1), t.slice(5, 1)])) != d


def test_nulls_are_distinct_from_every_value() -> None:
    base = pa.table({"x": pa.array([0, 1], pa.int64()), "s": ["", "a"], "f": [0.0, 1.0]})
    d = rows_digest_of(base)
    for name in ("x", "s", "f"):
        nulled = with_column(base, name, pa.array([None, base.column(name)[1].as_py()],
                                                  base.schema.field(name).type))
        assert rows_digest_of(nulled) != d, name
    # but a null moves with its row
    nulled = with_column(base, "x", pa.array([None, 1], pa.int64()))
    assert rows_digest_of(nulled) == rows_digest_of(nulled.take(pa.array([1, 0])))


def test_float_normalisation_and_rounding() -> None:
    def d(values: list[float]) -> str:
        return rows_digest_of(pa.table({"f": pa.array(values, pa.float64())}))

    assert d([-0.0]) == d([0.0])
    assert d([float("nan")]) == d([-float("nan")])
    assert d([float("inf")]) != d([-float("inf")]) != d([float("nan")])
    x = 2.0 / 3.0
    # a few units in the last place, as a different order of additions gives
    assert d([x]) == d([np.nextafter(x, 1.0)]) == d([x * (1 + 4e-16)])
    assert d([x]) != d([x * (1 + 1e-8)]) and d([1.0]) != d([-1.0])
    assert d([0.1 + 0.2]) == d([0.3])
    # values that round together are within FLOAT_RTOL of each other
    vals = np.random.default_rng(1).random(10_000) * 1e6
    rounded = round_floats(vals).view(np.float64)
    assert np.all(np.abs(rounded - vals) <= FLOAT_RTOL / 2 * np.abs(vals))
    # an average computed in another order of additions
    rng = np.random.default_rng(2)
    groups = [rng.random(rng.integers(1, 2_000)) * 1e3 for _ in range(300)]
    forward = [float(np.sum(g) / len(g)) for g in groups]
    backward = [float(sum(reversed(g.tolist())) / len(g)) for g in groups]
    assert forward != backward  # they do differ in the last bits
    assert d(forward) == d(backward)


def test_empty_and_column_changes() -> None:
    empty = table().slice(0, 0)
    assert rows_digest_of(empty) == rows_digest_of(empty.select(["page", "app", "max_dur",
                                                                 "avg_dur"]))
    assert rows_digest_of(empty) != rows_digest_of(table(1))
    assert rows_digest_of(empty) != rows_digest_of(empty.drop_columns(["page"]))
    d = RowsDigest()
    d.update(table(3))
    with pytest.raises(ValueError, match="columns changed"):
        d.update(table(3).drop_columns(["page"]))


def test_a_million_rows_is_fast() -> None:
    t = table(1_000_000)
    rows_digest_of(t.slice(0, 1000))  # warm up
    start = time.perf_counter()
    rows_digest_of(t)
    assert time.perf_counter() - start < 1.5
