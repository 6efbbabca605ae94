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


# -- a value goes into its column exactly, or is a dead letter --------------------------------

NUMBERS = pa.schema([pa.field("i", pa.int64()), pa.field("f", pa.float32()),
                     pa.field("b", pa.bool_()), pa.field("s", pa.string())])
FITS = {"i": 1, "f": 0.5, "b": True, "s": "x"}


def check_records(bad_values: list[dict[str, object]], good_values: list[dict[str, object]]
                  ) -> list[str]:
    """Validate FITS overridden by each of ``bad_values`` and ``good_values`` as records, and
    as one Arrow batch per record (the Parquet and DataFrame path); every bad one rejected
    with its reason and every good one kept, the two paths agreeing. The reasons."""
    records = [{**FITS, **v} for v in [*bad_values, *good_values]]
    good, rejected = validate(records, NUMBERS)
    assert good.num_rows == len(good_values), [r.reason for r in rejected]
    assert [r.record for r in rejected] == records[:len(bad_values)]
    assert good.num_rows + len(rejected) == len(records)
    for record in records:  # each alone as a batch of the types its values have
        try:
            batch = pa.RecordBatch.from_pylist([record])
        except (pa.ArrowException, OverflowError):
            continue  # no Arrow type holds it (2**63): only records can carry it
        one_good, one_bad = validate(batch, NUMBERS)
        assert one_good.num_rows + len(one_bad) == 1
        assert (one_good.num_rows == 1) == (record in records[len(bad_values):]), record
    return [r.reason for r in rejected]


def test_a_fraction_into_an_integer_column_is_a_dead_letter_never_truncated() -> None:
    reasons = check_records([{"i": 1.5}, {"i": -0.25}, {"i": float("nan")}, {"i": 1e300}],
                            [{"i": 1.0}, {"i": 1e3}, {"i": -7}])
    assert reasons[0] == "column 'i': 1.5 is not of type int64: not a whole number"
    assert "not a finite number" in reasons[2]
    good, _ = validate([{**FITS, "i": 1.0}, {**FITS, "i": 1e3}], NUMBERS)
    assert good.column("i").to_pylist() == [1, 1000]


def test_an_overflow_is_a_dead_letter_never_wrapped_or_infinite() -> None:
    reasons = check_records([{"i": 2**63}, {"i": -(2**63) - 1}, {"f": 1e300}, {"f": -1e39}],
                            [{"i": 2**63 - 1}, {"f": 3e38}, {"f": float("inf")}])
    assert reasons[2] == "column 'f': 1e+300 is not of type float: beyond the range of float"
    small = pa.schema([pa.field("n", pa.int32()), pa.field("u", pa.uint8())])
    good, bad = validate([{"n": 2**31, "u": 1}, {"n": 1, "u": -1}, {"n": 1, "u": 256},
                          {"n": 2**31 - 1, "u": 255}], small)
    assert good.to_pylist() == [{"n": 2**31 - 1, "u": 255}] and len(bad) == 3
    wide = pa.RecordBatch.from_pydict({"n": pa.array([2**31, 5], pa.int64()),
                                       "u": pa.array([1, 300], pa.int64())})
    good, bad = validate(wide, small)
    assert good.num_rows == 0 and len(bad) == 2


def test_a_string_is_never_parsed_into_a_number_nor_a_bool_taken_for_one() -> None:
    reasons = check_records([{"i": "5"}, {"f": "0.5"}, {"i": True}, {"f": False}, {"b": 1},
                             {"b": "true"}, {"s": 5}, {"s": 1.5}],
                            [{"s": ""}, {"b": False}, {"f": 2}])
    assert reasons[0] == "column 'i': '5' is not of type int64: a string, not an integer"
    assert reasons[2] == "column 'i': True is not of type int64: a bool, not an integer"
    assert reasons[4] == "column 'b': 1 is not of type bool: a number, not a bool"
    # a whole column of strings that all parse as numbers is still refused, row by row
    strings = pa.RecordBatch.from_pydict({"i": ["1", "2"], "f": [0.5, 0.5], "b": [True, True],
                                          "s": ["x", "y"]})
    good, bad = validate(strings, NUMBERS)
    assert good.num_rows == 0 and len(bad) == 2


def test_numbers_of_another_width_go_in_when_exact() -> None:
    batch = pa.RecordBatch.from_pydict({
        "i": pa.array([1, 2], pa.int8()), "f": pa.array([0.5, 2.0], pa.float64()),
        "b": [True, False], "s": pa.array(["x", "y"], pa.large_string())})
    good, bad = validate(batch, NUMBERS)
    assert bad == [] and good.schema == NUMBERS and good.column("i").to_pylist() == [1, 2]
    from decimal import Decimal
    dec = pa.schema([pa.field("i", pa.int64()), pa.field("f", pa.float64())])
    good, bad = validate([{"i": Decimal("2"), "f": 1}, {"i": Decimal("2.5"), "f": 1}], dec)
    assert good.to_pylist() == [{"i": 2, "f": 1.0}]
    assert bad[0].reason == "column 'i': Decimal('2.5') is not of type int64: not a whole number"
