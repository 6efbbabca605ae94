"""Ingress validation: bad records go to the dead letters with a reason; the rest goes on."""

from __future__ import annotations

import pyarrow as pa

from sparkflux.model.validate import validate

SCHEMA = pa.schema([pa.field("a", pa.int32(), nullable=False), pa.field("s", pa.string())])


def test_valid_batch_passes_untouched() -> None:
    b = pa.RecordBatch.from_pydict({"a": [1, 2], "s": ["x", None]}, schema=SCHEMA)
    good, bad = validate(b, SCHEMA)
    assert good.num_rows == 2 and bad == []


def test_records_missing_a_column_or_of_wrong_type_are_rejected_with_reasons() -> None:
    records = [{"a": 1, "s": "x"}, {"s": "no a"}, {"a": "seven", "s": "y"}, {"a": 4, "s": "z"}]
    good, bad = validate(records, SCHEMA)
    assert good.column("a").to_pylist() == [1, 4]
    assert good.schema == SCHEMA
    reasons = {tuple(sorted(r.record.items())): r.reason for r in bad}
    assert len(bad) == 2
    assert "missing column 'a'" in reasons[(("s", "no a"),)]
    assert "'seven'" in reasons[(("a", "seven"), ("s", "y"))]


def test_batch_with_nulls_in_a_required_column() -> None:
    b = pa.RecordBatch.from_pydict({"a": [1, None, 3], "s": ["x", "y", "z"]})
    good, bad = validate(b, SCHEMA)
    assert good.column("a").to_pylist() == [1, 3]
    assert len(bad) == 1 and "missing value for column 'a'" in bad[0].reason


def test_batch_missing_a_column_entirely() -> None:
    b = pa.RecordBatch.from_pydict({"s": ["x"]})
    good, bad = validate(b, SCHEMA)
    assert good.num_rows == 0 and "missing column(s) a" in bad[0].reason


def test_malformed_input_from_a_source_is_rejected_with_its_reason() -> None:
    from sparkflux.model.validate import Malformed

    records = [{"user": 1, "ts": 5}, Malformed({"line": 2, "text": "{oops"}, "not JSON"),
               {"user": 2, "ts": 6}]
    schema = pa.schema([pa.field("user", pa.int32(), nullable=False),
                        pa.field("ts", pa.int64(), nullable=False)])
    good, rejected = validate(records, schema)  # type: ignore[arg-type]
    assert good.to_pydict() == {"user": [1, 2], "ts": [5, 6]}
    assert [(r.record, r.reason) for r in rejected] == [({"line": 2, "text": "{oops"},
                                                         "not JSON")]
