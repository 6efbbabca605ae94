"""Shared utilities for the operator tests: input batches, runs, splits and SN checks."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import concat
from sparkflux.model.progress import ENDED, Frontier, Progress
from sparkflux.model.schema import PART, SN, SNM, T0
from sparkflux.operators.base import Operator

ProgressFn = Callable[[pa.RecordBatch], Progress | None]
PARTS = 64  # mini-partitions the operator tests' frontiers cover


def everywhere(progress: Progress) -> Frontier:
    """The same progress for every mini-partition an operator test uses."""
    return Frontier.every(progress, PARTS)


def make_batch(
    columns: dict[str, Any],
    part: Sequence[int] | np.ndarray | None = None,
    sn: Sequence[int] | np.ndarray | None = None,
    snm: Sequence[int] | np.ndarray | None = None,
    types: dict[str, pa.DataType] | None = None,
) -> pa.RecordBatch:
    """User ``columns`` plus ``_sn`` (dense 0..n-1 unless given), ``_snm`` 0, ``_t0``, ``_part``."""
    types = types or {}
    arrays = {k: pa.array(v, type=types.get(k)) for k, v in columns.items()}
    n = len(next(iter(arrays.values())))
    arrays[SN] = pa.array(np.arange(n) if sn is None else sn, pa.int64())
    arrays[SNM] = pa.array(np.zeros(n, np.int64) if snm is None else snm, pa.int64())
    arrays[T0] = pa.array(np.arange(n, dtype=np.float64) / 1000.0)
    arrays[PART] = pa.array(np.zeros(n, np.int32) if part is None else part, pa.int32())
    schema = pa.schema(
        [pa.field(k, a.type) for k, a in arrays.items() if k not in (SN, SNM, T0, PART)]
        + [pa.field(SN, pa.int64(), False), pa.field(SNM, pa.int64(), False),
           pa.field(T0, pa.float64(), False), pa.field(PART, pa.int32(), False)]
    )
    return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


def split(batch: pa.RecordBatch, rng: np.random.Generator, pieces: int) -> list[pa.RecordBatch]:
    """``batch`` cut at random points into ``pieces`` parts (some may be empty)."""
    cuts = np.sort(rng.integers(0, batch.num_rows + 1, pieces - 1))
    bounds = [0, *cuts.tolist(), batch.num_rows]
    return [batch.slice(a, b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def feed(op: Operator, batches: Sequence[pa.RecordBatch],
         progress: ProgressFn | None = None, finish: bool = False) -> list[pa.RecordBatch]:
    """Process ``batches`` in order (advancing after each), returning every output batch."""
    out = []
    for b in batches:
        out.append(op.process(b))
        p = progress(b) if progress is not None else None
        if p is not None:
            out.append(op.advance(everywhere(p))[0])
    if finish:
        out.append(op.advance(everywhere(ENDED))[0])
    for o in out:
        assert o.schema.equals(op.output_schema), (o.schema, op.output_schema)
    return out


def run(make_op: Callable[[], Operator], batches: Sequence[pa.RecordBatch],
        progress: ProgressFn | None = None, finish: bool = False) -> pa.RecordBatch:
    """A fresh operator bound to the first batch's schema, fed ``batches``: all its output."""
    op = make_op()
    op.bind(batches[0].schema)
    return concat(feed(op, batches, progress, finish), op.output_schema)


def over_the_wire(state: Any) -> Any:
    """``state`` as another site receives it: through the typed codec of moved partitions
    (no pickle: numbers, strings, lists for tuples, dicts, numeric numpy arrays, Arrow)."""
    from sparkflux.protocol.messages import ConsumerSnapshot, PartitionSnapshot, State
    from sparkflux.runtime.frames import FRAME_HEADER, decode, encode

    none = np.zeros(1, dtype=np.int64)
    cons = ConsumerSnapshot(progress_sn=none, progress_wm=none, released_sn=0, released_wm=0,
                            pending=None)
    msg = State(0, 0, 0, PartitionSnapshot(cons=cons, ops=(state,), out_sn=0, out_wm=0))
    raw = b"".join(bytes(p) for p in encode(msg))
    _, kind = FRAME_HEADER.unpack_from(raw, 0)
    return decode(kind, raw[FRAME_HEADER.size:], {}).snapshot.ops[0]


def run_with_move(make_op: Callable[[], Operator], batches: Sequence[pa.RecordBatch],
                  cut: int, progress: ProgressFn | None = None,
                  finish: bool = False, wire: bool = False) -> pa.RecordBatch:
    """Like ``run``, but every partition's state moves to a fresh operator after ``cut`` batches
    (pickled, or with ``wire`` through the codec a real move uses)."""
    first = make_op()
    first.bind(batches[0].schema)
    out = feed(first, batches[:cut], progress)
    parts = {i.part for i in first.partition_info()}
    second = make_op()
    second.bind(batches[0].schema)
    for p in sorted(parts):
        state = first.get_partition_state(p)
        state = over_the_wire(state) if wire else pickle.loads(pickle.dumps(state))
        second.install_partition_state(p, state)
        first.drop_partition(p)
    assert first.partition_info() == []
    out += feed(second, batches[cut:], progress, finish)
    return concat(out, first.output_schema)


def assert_sn_increasing(batch: pa.RecordBatch) -> None:
    """``(_sn, _snm)`` strictly increases along the batch."""
    sn = batch.column(SN).to_numpy()
    snm = batch.column(SNM).to_numpy()
    ok = (sn[1:] > sn[:-1]) | ((sn[1:] == sn[:-1]) & (snm[1:] > snm[:-1]))
    assert ok.all(), f"SN order broken at row {int(np.flatnonzero(~ok)[0]) + 1}"


def per_partition(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows grouped by ``_part``, each partition's in the order they came.

    Each mini-partition's output is its own stream (SN-ordered, identical on every replica);
    when rows of different partitions come out depends on each one's progress, so a shell's
    output is compared partition by partition."""
    part = batch.column(PART).to_numpy()
    return batch.take(pa.array(np.argsort(part, kind="stable")))


def untimed(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch without ``_t0``: an operator that emits on progress times its rows from the
    close, which follows the passes (timing only, in no digest)."""
    return batch.drop_columns([T0])


def assert_sn_increasing_per_partition(batch: pa.RecordBatch) -> None:
    """``(_sn, _snm)`` strictly increases along each partition's rows."""
    assert_sn_increasing_within(per_partition(batch))


def assert_sn_increasing_within(batch: pa.RecordBatch) -> None:
    part = batch.column(PART).to_numpy()
    sn = batch.column(SN).to_numpy()
    snm = batch.column(SNM).to_numpy()
    same = part[1:] == part[:-1]
    ok = (sn[1:] > sn[:-1]) | ((sn[1:] == sn[:-1]) & (snm[1:] > snm[:-1]))
    assert (ok | ~same).all(), f"SN order broken at row {int(np.flatnonzero(~ok & same)[0]) + 1}"


def user_rows(batch: pa.RecordBatch, with_sn: bool = True) -> list[tuple]:
    """The rows as tuples of user columns (and ``_sn, _snm`` when asked)."""
    names = [n for n in batch.schema.names if not n.startswith("_")]
    if with_sn:
        names += [SN, SNM]
    cols = [batch.column(n).to_pylist() for n in names]
    return list(zip(*cols, strict=True))


def with_timestamps(batch: pa.RecordBatch, column: str, type_: pa.DataType) -> pa.RecordBatch:
    """``batch`` with its integer ``column`` as the timestamp ``type_`` (same numbers)."""
    i = batch.schema.get_field_index(column)
    return batch.set_column(i, pa.field(column, type_), batch.column(column).cast(type_))


def bounds_as_int64(batch: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """``batch`` with the timestamp ``columns`` as int64 (their numbers), to compare with
    a run over integer times."""
    for c in columns:
        i = batch.schema.get_field_index(c)
        batch = batch.set_column(i, pa.field(c, pa.int64()), batch.column(c).cast(pa.int64()))
    return batch
