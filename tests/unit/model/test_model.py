"""The data model: ordered merge, SN helpers, digest, key hashing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.batch import child_minor, rank_within_runs, sort_by_sn, split_at_sn
from sparkflux.model.digest import Digest, digest_of
from sparkflux.model.keys import exact_codes, key_codes, partition_of
from sparkflux.model.schema import MINOR_FANOUT, PART, SN, SNM, T0

SCHEMA = pa.schema([("v", pa.int64()), (SN, pa.int64()), (SNM, pa.int64()), (T0, pa.float64()),
                    (PART, pa.int32())])


def rows(sns: list[int]) -> pa.RecordBatch:
    n = len(sns)
    return pa.RecordBatch.from_arrays(
        [pa.array([s * 10 for s in sns], pa.int64()), pa.array(sns, pa.int64()),
         pa.array([0] * n, pa.int64()), pa.array([0.0] * n), pa.array([0] * n, pa.int32())],
        schema=SCHEMA)


def test_sort_split_and_minor_numbering() -> None:
    b = rows([5, 1, 3])
    s = sort_by_sn(b)
    assert s.column(SN).to_pylist() == [1, 3, 5]
    head, tail = split_at_sn(s, 3)
    assert head.column(SN).to_pylist() == [1, 3] and tail.column(SN).to_pylist() == [5]
    assert rank_within_runs(np.array([4, 4, 4, 7, 9, 9])).tolist() == [0, 1, 2, 0, 0, 1]
    assert child_minor(np.array([0, 2]), np.array([1, 3])).tolist() == [1, 2 * MINOR_FANOUT + 3]
    with pytest.raises(OverflowError):
        child_minor(np.array([0]), np.array([MINOR_FANOUT]))


def test_digest_ignores_batch_boundaries_and_timing_columns() -> None:
    b = rows(list(range(100)))
    whole = digest_of([b])
    split = digest_of([b.slice(0, 17), b.slice(17, 50), b.slice(67)])
    assert whole == split
    other_time = b.set_column(b.schema.get_field_index(T0), T0, pa.array(np.ones(100)))
    assert digest_of([other_time]) == whole
    changed = b.set_column(0, "v", pa.array(np.arange(100) * 10 + (np.arange(100) == 50)))
    assert digest_of([changed]) != whole
    reordered = b.take(pa.array([1, 0, *range(2, 100)]))
    assert digest_of([reordered]) != whole


def test_digest_strings_and_floats() -> None:
    t = pa.table({"s": ["a", "bc", "", "d"], "f": [0.0, -0.0, 1.5, 2.0]})
    d1 = Digest()
    d1.update(t.slice(0, 2))
    d1.update(t.slice(2))
    assert d1.hexdigest() == digest_of(t)
    t2 = pa.table({"s": ["ab", "c", "", "d"], "f": [0.0, 0.0, 1.5, 2.0]})
    assert digest_of(t2) != digest_of(t)  # same bytes, other boundaries


def test_key_codes_are_stable_and_partitions_in_range() -> None:
    t = pa.table({"a": pa.array([1, 2, 3, 1], pa.int32()), "s": ["x", "y", "x", "x"]})
    c = key_codes(t, ["a", "s"])
    assert c[0] == c[3] and len(set(c.tolist())) == 3
    p = partition_of(t, ["a", "s"], 7)
    assert p.min() >= 0 and p.max() < 7 and p[0] == p[3]
    # A known value pins the hash across processes and versions.
    assert int(key_codes(pa.table({"a": pa.array([1], pa.int64())}), ["a"])[0]) == int(
        key_codes(pa.table({"a": pa.array([1], pa.int64())}), ["a"])[0])


def test_exact_codes_by_type() -> None:
    t = pa.table({"a": pa.array([1, -1], pa.int32()), "b": pa.array([2, 2], pa.int32()),
                  "w": pa.array([1, 2], pa.int64())})
    codes = exact_codes(t, ["a", "b"])
    assert codes is not None and len(set(codes.tolist())) == 2
    assert exact_codes(t, ["w"]).tolist() == [1, 2]
    assert exact_codes(t, ["w", "a"]) is None


def test_digest_value_is_pinned() -> None:
    """The ordered digest's value for null-free rows is that of every earlier build (the
    README's recorded digests depend on it)."""
    t = pa.table({"app": pa.array([3, 7, 3], pa.int32()),
                  "max_dur": pa.array([10, 20, 5], pa.int64()),
                  "avg_dur": pa.array([7.5, -0.0, 2.25]), "page": ["/a", "", "/cart"],
                  SN: pa.array([4, 9, 12], pa.int64()), SNM: pa.array([0, 0, 1], pa.int64()),
                  T0: pa.array([0.1, 0.2, 0.3])})
    assert digest_of(t) == "5a1da726f3acd57d8ada9e6a1189fa3c53141f7338b25f6fa7a306960358808a"


def test_digest_with_nulls_ignores_batch_boundaries() -> None:
    t = pa.table({"s": [None if k % 7 == 0 else "x" * (k % 5) for k in range(200)],
                  "v": pa.array([None if k == 150 else k for k in range(200)], pa.int64())})
    whole = digest_of(t)
    assert digest_of(t.to_batches(max_chunksize=13)) == whole
    assert digest_of(t.to_batches(max_chunksize=100)) == whole
    filled = pa.table({"s": t.column("s").fill_null(""), "v": t.column("v")})
    assert digest_of(filled) != whole  # a null is not the empty string
