"""Comparing an output with a reference as multisets of rows, and saying how they differ.

``compare_rows`` matches the rows of two tables by their row hashes (``row_hashes`` of the
rows digest, so equal means equal as ``rows_digest`` sees it): a row that occurs k times on
one side and j < k times on the other is k - j times "only" on the first side. The rows left
over are then paired once more with floats compared to a relative tolerance ``FLOAT_RTOL``:
two float values a unit in the last place apart can round to different words when they
straddle a rounding boundary of the rows digest, and that must not read as a mismatch. The
pairing sorts both sides the same way, so it is exact for such near-equal rows and
conservative otherwise (a leftover it cannot pair stays a difference).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkflux.model.batch import rank_within_runs
from sparkflux.model.digest import canonical_floats
from sparkflux.model.rows_digest import FLOAT_RTOL, canonical_words, row_hashes
from sparkflux.model.schema import SN, SNM


@dataclass(frozen=True)
class Comparison:
    """How two multisets of rows differ (``examples``: a few rows of each side's surplus)."""

    columns: list[str]
    engine_rows: int
    reference_rows: int
    only_engine: int = 0
    only_reference: int = 0
    within_tolerance: int = 0  # rows equal only with floats compared to FLOAT_RTOL
    examples_engine: list[dict[str, Any]] = field(default_factory=list)
    examples_reference: list[dict[str, Any]] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return self.only_engine == 0 and self.only_reference == 0

    def summary(self) -> list[str]:
        """A few lines for people: counts, then example rows of each side."""
        lines = [f"engine {self.engine_rows:,} rows, reference {self.reference_rows:,} rows"]
        if self.within_tolerance:
            lines.append(f"{self.within_tolerance:,} rows equal only with floats compared to a "
                         f"relative tolerance of {FLOAT_RTOL:g}")
        for what, count, rows in (("the engine output", self.only_engine,
                                   self.examples_engine),
                                  ("the reference", self.only_reference,
                                   self.examples_reference)):
            if count:
                lines.append(f"rows only in {what}: {count:,}")
                lines.extend(f"  {row}" for row in rows)
        return lines


def compare_rows(engine: pa.Table, reference: pa.Table, columns: Sequence[str],
                 examples: int = 5) -> Comparison:
    """Compare the two tables' rows over ``columns`` as multisets (order aside)."""
    cols = list(columns)
    engine, reference = engine.select(cols), reference.select(cols)
    extra_e, extra_r = _surplus(row_hashes(engine, cols), row_hashes(reference, cols))
    left_e, left_r = engine.take(pa.array(extra_e)), reference.take(pa.array(extra_r))
    base = Comparison(cols, engine.num_rows, reference.num_rows)
    if not extra_e.size and not extra_r.size:
        return base
    if _pair_within_tolerance(left_e, left_r):
        return Comparison(cols, engine.num_rows, reference.num_rows,
                          within_tolerance=left_e.num_rows)
    order = [(c, "ascending") for c in cols]
    return Comparison(cols, engine.num_rows, reference.num_rows, int(extra_e.size),
                      int(extra_r.size), 0,
                      left_e.sort_by(order).slice(0, examples).to_pylist(),
                      left_r.sort_by(order).slice(0, examples).to_pylist())


def _keys(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.bytes_]:
    """One sortable 16-byte key per row hash."""
    return np.ascontiguousarray(hashes.astype(">u8")).view("S16").ravel()


def _surplus(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]
             ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Indices of the rows of ``a`` and of ``b`` that the other side has fewer copies of."""
    keys = np.concatenate([_keys(a), _keys(b)])
    _, inverse = np.unique(keys, return_inverse=True)
    ia, ib = inverse[: len(a)], inverse[len(a):]
    size = int(inverse.max()) + 1 if inverse.size else 0
    ca, cb = np.bincount(ia, minlength=size), np.bincount(ib, minlength=size)
    return _beyond(ia, cb), _beyond(ib, ca)


def _beyond(ids: npt.NDArray[np.intp], other_counts: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Rows whose occurrence number among equal rows is at least the other side's count."""
    order = np.argsort(ids, kind="stable")
    occurrence = np.empty(ids.size, dtype=np.int64)
    occurrence[order] = rank_within_runs(ids[order])
    return np.flatnonzero(occurrence >= other_counts[ids])


def _pair_within_tolerance(a: pa.Table, b: pa.Table) -> bool:
    """Whether the leftover rows pair up with equal non-float values and floats within
    ``FLOAT_RTOL`` (both sides sorted by the non-float columns, then the floats)."""
    floats = [c for c in a.column_names if pa.types.is_floating(a.schema.field(c).type)]
    if a.num_rows != b.num_rows or not floats or a.num_rows == 0:
        return False
    others = [c for c in a.column_names if c not in floats]
    order = [(c, "ascending") for c in others + floats]
    a, b = a.sort_by(order), b.sort_by(order)
    for c in a.column_names:
        x, y = a.column(c).combine_chunks(), b.column(c).combine_chunks()
        if not np.array_equal(_nulls(x), _nulls(y)):
            return False
        if c in floats:
            if not np.allclose(canonical_floats(x), canonical_floats(y), rtol=FLOAT_RTOL,
                               atol=0.0, equal_nan=True):
                return False
        elif not np.array_equal(canonical_words(x), canonical_words(y)):
            return False
    return True


def _nulls(col: pa.Array) -> npt.NDArray[np.bool_]:
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False))


def duplicate_rows(table: pa.Table) -> int:
    """Rows of an output whose (``_sn``, ``_snm``) another row has too: each output row has
    its own, so any is a row written twice (a restart that did not skip what it had)."""
    if not table.num_rows:
        return 0
    keys = np.stack([table.column(SN).to_numpy(), table.column(SNM).to_numpy()])
    return int(table.num_rows - np.unique(keys, axis=1).shape[1])
