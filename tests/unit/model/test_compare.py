"""compare_rows: which rows only one side has, and floats that differ in the last bits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.model.compare import compare_rows
from sparkflux.model.rows_digest import round_floats

COLS = ["page", "clicks", "avg"]


def table(rows: list[tuple]) -> pa.Table:
    page, clicks, avg = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table({"page": pa.array(page, pa.string()), "clicks": pa.array(clicks, pa.int64()),
                     "avg": pa.array(avg, pa.float64())})


ROWS = [("/a", 3, 1.5), ("/b", 1, 2.0), ("/a", 3, 1.5), ("/c", 7, 0.25)]


def test_equal_multisets_match_in_any_order() -> None:
    c = compare_rows(table(ROWS), table(ROWS[::-1]), COLS)
    assert c.match and (c.engine_rows, c.reference_rows) == (4, 4)
    assert c.summary() == ["engine 4 rows, reference 4 rows"]


def test_surplus_rows_are_named_with_their_multiplicity() -> None:
    engine = table([*ROWS, ("/c", 7, 0.25)])  # one row twice more
    reference = table([ROWS[0], ROWS[1], ("/d", 2, 9.0), ROWS[3]])  # one /a dropped, /d new
    c = compare_rows(engine, reference, COLS)
    assert not c.match
    assert (c.only_engine, c.only_reference) == (2, 1)
    assert c.examples_engine == [{"page": "/a", "clicks": 3, "avg": 1.5},
                                 {"page": "/c", "clicks": 7, "avg": 0.25}]
    assert c.examples_reference == [{"page": "/d", "clicks": 2, "avg": 9.0}]
    text = "\n".join(c.summary())
    assert "rows only in the engine output: 2" in text and "'/d'" in text
    few = compare_rows(table(ROWS * 10), table([]), COLS, examples=3)
    assert few.only_engine == 40 and len(few.examples_engine) == 3


def test_floats_straddling_a_rounding_boundary_still_match() -> None:
    # a value just below a boundary of the rows digest's rounding, and one ulp above it
    x = 1.0 + 2.0**-31  # exactly half a step: rounds up
    below = np.nextafter(x, 0.0)
    assert round_floats(np.array([below])) != round_floats(np.array([x]))
    c = compare_rows(table([("/a", 1, below), ("/b", 2, 3.0)]),
                     table([("/b", 2, 3.0), ("/a", 1, x)]), COLS)
    assert c.match and c.within_tolerance == 1
    assert "relative tolerance" in c.summary()[1]
    # a real difference in a float is not forgiven, nor one in another column
    assert not compare_rows(table([("/a", 1, 1.0)]), table([("/a", 1, 1.0 + 1e-6)]), COLS).match
    assert not compare_rows(table([("/a", 1, below)]), table([("/a", 2, x)]), COLS).match


def test_duplicate_rows_counts_rows_sharing_a_sequence_number() -> None:
    from sparkflux.model.compare import duplicate_rows

    t = pa.table({"_sn": pa.array([1, 2, 2, 3, 3, 3], pa.int64()),
                  "_snm": pa.array([0, 0, 1, 0, 0, 0], pa.int64())})
    assert duplicate_rows(t) == 2  # (3, 0) three times: two too many
    assert duplicate_rows(t.slice(0, 3)) == 0
