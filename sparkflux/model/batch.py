"""Batch helpers: empty batches, concatenation, SN ordering, prefix splits, derived SNs.

Everything works on whole Arrow batches and numpy arrays: there is no per-tuple Python work
here (docs/design.md §6).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkflux.model.schema import MINOR_FANOUT, SN, SNM


@functools.lru_cache(maxsize=256)
def empty(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of ``schema`` with no rows (one per schema: batches are immutable, and a
    scheduler pass asks for several)."""
    return pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in schema], schema=schema
    )


def concat(batches: Sequence[pa.RecordBatch], schema: pa.Schema | None = None) -> pa.RecordBatch:
    """One batch holding the rows of ``batches`` in order (``schema`` needed when empty)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        if schema is None:
            raise ValueError("concat of no batches needs a schema")
        return empty(schema)
    if len(batches) == 1:
        return batches[0]
    # one batch or an error: ``combine_chunks`` may keep a string column over 2 GiB in
    # several chunks, and taking the first batch of that would drop rows
    return pa.concat_batches(batches)


def sn_array(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    """The major SN column as an int64 numpy array (zero-copy)."""
    sn: npt.NDArray[np.int64] = batch.column(batch.schema.get_field_index(SN)).to_numpy()
    return sn


def snm_array(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    """The minor SN column as an int64 numpy array (zero-copy)."""
    snm: npt.NDArray[np.int64] = batch.column(batch.schema.get_field_index(SNM)).to_numpy()
    return snm


def sort_by_sn(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its rows in ``(_sn, _snm)`` order (stable)."""
    if batch.num_rows < 2:
        return batch
    sn, snm = sn_array(batch), snm_array(batch)
    if np.all(sn[1:] > sn[:-1]):
        return batch
    order = np.lexsort((snm, sn))
    return batch.take(pa.array(order))


def split_at_sn(batch: pa.RecordBatch, upto: int) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """Split an SN-ordered batch into (rows with ``_sn <= upto``, the rest)."""
    cut = int(np.searchsorted(sn_array(batch), upto, side="right"))
    return batch.slice(0, cut), batch.slice(cut)


def child_minor(snm: np.ndarray, k: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Minor SNs for outputs ``k`` triggered by inputs with minor ``snm`` (1:many rule, §3)."""
    ks = np.asarray(k, dtype=np.int64)
    if ks.size and int(ks.max()) >= MINOR_FANOUT:
        raise OverflowError(f"one input triggered more than {MINOR_FANOUT} outputs")
    if snm.size and int(snm.max()) >= np.iinfo(np.int64).max // MINOR_FANOUT:
        raise OverflowError("minor sequence numbers nest too deeply (more than two 1:many levels)")
    return snm.astype(np.int64) * MINOR_FANOUT + ks


def rank_within_runs(sn: np.ndarray) -> npt.NDArray[np.int64]:
    """For an ordered array, the 0-based position of each element within its run of equal values.

    Used to number the outputs ``k`` that one input SN triggered.
    """
    n = sn.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sn[1:] != sn[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n, dtype=np.int64) - run_start


def nbytes(batch: pa.RecordBatch) -> int:
    """Bytes held by the batch's buffers."""
    return int(batch.nbytes)
