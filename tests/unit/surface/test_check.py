"""A reference conformed to the dataflow's output, and the verdict of ``run --check`` (no
Spark: the reference is given as an Arrow table)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sparkflux.check import check_output
from sparkflux.model.digest import digest_of
from sparkflux.model.errors import PlanError
from sparkflux.model.rows_digest import rows_digest_of
from sparkflux.spark.expected import collect

OUTPUT_SCHEMA = pa.schema([
    pa.field("page", pa.string()), pa.field("clicks", pa.int64()),
    pa.field("avg", pa.float64()), pa.field("_sn", pa.int64(), nullable=False),
    pa.field("_snm", pa.int64(), nullable=False), pa.field("_t0", pa.float64()),
    pa.field("_part", pa.int32())])


def output(rows: list[tuple]) -> pa.Table:
    """An engine output: rows of (page, clicks, avg, _sn)."""
    cols = list(zip(*rows, strict=True))
    n = len(rows)
    return pa.table([pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int64()),
                     pa.array(cols[2], pa.float64()), pa.array(cols[3], pa.int64()),
                     pa.array([0] * n, pa.int64()), pa.array([0.5] * n),
                     pa.array([1] * n, pa.int32())], schema=OUTPUT_SCHEMA)


def metrics(table: pa.Table) -> dict:
    return {"output_digest": digest_of(table), "rows_digest": rows_digest_of(table)}


ROWS = [("/a", 3, 1.5, 4), ("/b", 1, 2.0, 7), ("/a", 2, 0.5, 9)]


def test_the_reference_takes_the_output_columns_and_types_in_any_order() -> None:
    ref = pa.table({"avg": [0.5, 1.5, 2.0], "page": ["/a", "/a", "/b"],
                    "clicks": pa.array([2, 3, 1], pa.int32())})
    expected = collect(ref, OUTPUT_SCHEMA)
    assert expected.table.schema.names == ["page", "clicks", "avg"]
    assert expected.table.schema.field("clicks").type == pa.int64()
    assert not expected.numbered and expected.output_digest is None
    assert expected.rows_digest == rows_digest_of(output(ROWS))


def test_a_reference_with_other_columns_is_a_clear_error() -> None:
    ref = pa.table({"page": ["/a"], "count": [1], "avg": [1.0], "extra": [0]})
    with pytest.raises(PlanError, match=r"missing column\(s\) clicks; extra column\(s\) "
                                        r"count, extra \(the output has: page, clicks, avg"):
        collect(ref, OUTPUT_SCHEMA)
    with pytest.raises(PlanError, match="only one of _sn, _snm"):
        collect(pa.table({"page": ["/a"], "clicks": [1], "avg": [1.0], "_sn": [0]}),
                OUTPUT_SCHEMA)
    with pytest.raises(PlanError, match="column 'clicks' of type string does not cast"):
        collect(pa.table({"page": ["/a"], "clicks": ["many"], "avg": [1.0]}), OUTPUT_SCHEMA)


def test_a_numbered_reference_is_ordered_and_has_both_digests() -> None:
    out = output(ROWS)
    ref = out.drop_columns(["_t0", "_part"]).take(pa.array([2, 0, 1]))
    expected = collect(ref, OUTPUT_SCHEMA)
    assert expected.numbered and expected.table.column("_sn").to_pylist() == [4, 7, 9]
    assert expected.output_digest == digest_of(out)
    check = check_output(out, metrics(out), expected)
    assert check.match and "in the same order with the same sequence numbers" in check.lines[2]


def test_check_says_which_rows_differ() -> None:
    out = output(ROWS)
    ref = pa.table({"page": ["/a", "/b", "/c"], "clicks": [3, 1, 9], "avg": [1.5, 2.0, 9.5]})
    check = check_output(out, metrics(out), collect(ref, OUTPUT_SCHEMA))
    assert not check.match
    text = "\n".join(check.lines)
    assert "MISMATCH: the rows differ" in text
    assert "rows only in the engine output: 1" in text and "'/a', 'clicks': 2" in text
    assert "rows only in the reference: 1" in text and "'/c'" in text


def test_check_of_rows_without_numbering_ignores_order_and_sequence_numbers() -> None:
    out = output(ROWS)
    ref = pa.table({"page": ["/a", "/a", "/b"], "clicks": [2, 3, 1], "avg": [0.5, 1.5, 2.0]})
    check = check_output(out, metrics(out), collect(ref, OUTPUT_SCHEMA))
    assert check.match and "does not number its rows" in check.lines[1]


def test_check_of_a_numbered_reference_names_the_rows_numbered_otherwise() -> None:
    out = output(ROWS)
    ref = output([ROWS[0], ROWS[1], ("/a", 2, 0.5, 10)]).drop_columns(["_t0", "_part"])
    check = check_output(out, metrics(out), collect(ref, OUTPUT_SCHEMA))
    assert not check.match
    text = "\n".join(check.lines)
    assert "the same 3 rows, but not with the same sequence numbers" in text
    assert "'_sn': 9" in text and "'_sn': 10" in text
