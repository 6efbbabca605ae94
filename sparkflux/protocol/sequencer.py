"""The ingress sequencer: several input streams, out-of-order within a bound, one order.

Every source is its own input stream, with its own event-time column and its own *allowed
lateness* ``L`` (Spark's ``withWatermark``). The stream's watermark trails the largest event
time it has brought by ``L``: ``wm = max(et) - L``. A record behind its stream's watermark
when it arrives is late and rejected (to the dead letters, with its reason); every other
record is held until no record can still come before it, then released in the order

    (event time, stream, arrival within the stream)

which is SUnion's serialization (Borealis: buckets of event time, then stream, then sequence
number) with buckets one time unit wide. A held record ``x`` of stream ``i`` is released once
``(et(x), i) <= (wm_j, j)`` for every stream ``j`` still open: any later record of ``j`` has
``et >= wm_j``, so it sorts after ``x``. The released sequence therefore depends only on each
stream's own sequence of records, never on how the streams' arrivals interleave, so replicas
and reruns see one order; the ingress numbers it (one ISN sequence over all streams). A
stream that ended no longer holds anything back.

The watermark the ingress claims downstream is the lowest open stream's ``wm_j``: nothing
released later has an event time below it.

``next_stream`` says which stream to read next: the open one that holds the others back (the
lowest ``(wm_j, j)``). Reading that way keeps what is held to about one lateness bound of
each stream when the streams' event times advance together.

A stream without an event-time column (only possible as the only stream) is released as it
arrives.

The sequencer also keeps when each held record arrived: how long the oldest has waited is
what eventual consistency's delay bound is judged by (``consistency.py``), and a released
record's arrival is the start of its latency. ``peek`` shows held records in a range of the
merged order without releasing them: the tentative rows of a failure episode.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.plan import StreamSpec
from sparkflux.model.batch import concat
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK
from sparkflux.model.validate import Rejected


class Sequencer:
    """Holds each stream's records until their place in the merged order is certain."""

    def __init__(self, streams: list[StreamSpec],
                 align: Callable[[int, pa.RecordBatch], pa.RecordBatch] | None = None) -> None:
        """``align(stream, batch)``: a stream's released rows as the merged batch's schema
        (e.g. null-padded to the union of the streams' columns)."""
        if not streams:
            raise ValueError("the sequencer needs at least one stream")
        if len(streams) > 1 and any(s.event_time is None for s in streams):
            raise ValueError("several streams merge by event time: each needs an event_time")
        self.streams = streams
        n = len(streams)
        self.max_et = np.full(n, NO_WATERMARK, dtype=np.int64)
        self.ended = np.zeros(n, dtype=bool)
        self.held: list[list[pa.RecordBatch]] = [[] for _ in range(n)]
        self.held_rows = np.zeros(n, dtype=np.int64)
        self.held_at: list[np.ndarray] = [_NO_TIMES for _ in range(n)]  # arrival, per row
        self.held_et: list[np.ndarray] = [_NO_ETS for _ in range(n)]  # event time, per row
        # when each stream last brought records (NaN until the first input of any stream)
        self.heard_at = np.full(n, np.nan)
        self.align = align or (lambda _, b: b)
        # the last release's event time and arrival per row (in its order)
        self.released_et: np.ndarray = _NO_TIMES.astype(np.int64)
        self.released_at: np.ndarray = _NO_TIMES

    # -- the streams' watermarks --------------------------------------------------------------
    def watermarks(self) -> np.ndarray:
        """``wm_j`` per stream (``END_OF_STREAM`` once it ended)."""
        lateness = np.array([s.lateness for s in self.streams], dtype=np.int64)
        wm = np.where(self.max_et > NO_WATERMARK, self.max_et - lateness, NO_WATERMARK)
        return np.where(self.ended, END_OF_STREAM, wm)

    def watermark(self) -> int:
        """What the ingress may claim: no record released later has an event time below it."""
        if self.streams[0].event_time is None:
            return END_OF_STREAM if self.ended.all() else NO_WATERMARK
        return int(self.watermarks().min())

    def next_stream(self) -> int | None:
        """The open stream to read next (the one holding the others back), None at the end."""
        open_ = np.flatnonzero(~self.ended)
        if not open_.size:
            return None
        wm = self.watermarks()[open_]
        return int(open_[np.lexsort((open_, wm))[0]])

    # -- input ---------------------------------------------------------------------------------
    def offer(self, stream: int, batch: pa.RecordBatch, now: float = 0.0) -> list[Rejected]:
        """Take a batch of stream ``stream`` (valid records, in the stream's order) that
        arrived at ``now``; returns the late ones, rejected."""
        spec = self.streams[stream]
        if self.ended[stream]:
            raise ValueError(f"source {spec.name!r}: input after its end")
        if batch.num_rows == 0:
            return []
        if np.isnan(self.heard_at).all():  # the input starts: every stream's silence with it
            self.heard_at[:] = now
        self.heard_at[stream] = now
        if spec.event_time is None:
            self._hold(stream, batch, now, _NO_ETS)
            return []
        et = batch.column(spec.event_time).cast(pa.int64()).to_numpy(zero_copy_only=False)
        # each record against the watermark of the records before it (its stream's running max)
        before = np.maximum.accumulate(np.r_[self.max_et[stream], et])[:-1]
        wm_before = np.where(before > NO_WATERMARK, before - spec.lateness, NO_WATERMARK)
        late = et < wm_before
        rejected: list[Rejected] = []
        if late.any():
            rows = batch.filter(pa.array(late)).to_pylist()
            lagged = wm_before[late]
            rejected = [Rejected(r, f"late: event time {r[spec.event_time]} of source "
                                    f"{spec.name!r} is behind its watermark {int(w)} (allowed "
                                    f"lateness {spec.lateness})")
                        for r, w in zip(rows, lagged.tolist(), strict=True)]
            batch = batch.filter(pa.array(~late))
            et = et[~late]
        if et.size:
            self.max_et[stream] = max(int(self.max_et[stream]), int(et.max()))
            self._hold(stream, batch, now, et)
        return rejected

    def _hold(self, stream: int, batch: pa.RecordBatch, now: float, et: np.ndarray) -> None:
        self.held[stream].append(batch)
        self.held_rows[stream] += batch.num_rows
        self.held_at[stream] = np.r_[self.held_at[stream], np.full(batch.num_rows, now)]
        if et.size:
            self.held_et[stream] = np.r_[self.held_et[stream], et.astype(np.int64)]

    def oldest(self) -> float | None:
        """When the longest-held record arrived (None: nothing is held)."""
        firsts = [float(a.min()) for a in self.held_at if a.size]
        return min(firsts) if firsts else None

    def waiting_on(self, arrived_by: float) -> frozenset[int]:
        """SUnion's failed inputs: the open streams whose bound ``(wm_j, j)`` has not passed
        the lowest held record (in the merged order) of those that arrived by
        ``arrived_by``; none when no held record arrived by then."""
        low: tuple[int, int] | None = None
        for i, (et, at) in enumerate(zip(self.held_et, self.held_at, strict=True)):
            old = at <= arrived_by
            if at.size and old.any():
                e = (int(et[old].min()), i)
                low = e if low is None or e < low else low
        if low is None:
            return frozenset()
        wm = self.watermarks()
        return frozenset(int(j) for j in np.flatnonzero(~self.ended) if (int(wm[j]), j) < low)

    def first_arrival_above(self, low: tuple[int, int]) -> float | None:
        """When the earliest held record above ``low`` in the merged order arrived (None:
        none is held)."""
        top = (int(np.iinfo(np.int64).max), len(self.streams))
        firsts = [float(at[go].min()) for i, (et, at) in enumerate(
            zip(self.held_et, self.held_at, strict=True))
            if at.size and (go := _within(et, i, low, top)).any()]
        return min(firsts) if firsts else None

    def end(self, stream: int) -> None:
        self.ended[stream] = True

    def restore(self, max_et: list[int], ended: list[bool],
                held: list[pa.RecordBatch | None]) -> None:
        """A restart from a checkpoint: each stream's largest event time, whether it had
        ended, and the records held at the cut (read from the source before it, not yet
        numbered): the merge goes on exactly as if the run had not stopped."""
        self.max_et = np.asarray(max_et, dtype=np.int64).copy()
        self.ended = np.asarray(ended, dtype=bool).copy()
        self.held = [[h] if h is not None and h.num_rows else [] for h in held]
        self.held_rows = np.array([h.num_rows if h is not None else 0 for h in held],
                                  dtype=np.int64)
        self.held_at = [np.zeros(int(n)) for n in self.held_rows]
        self.held_et = [_NO_ETS if h is None or not h.num_rows or s.event_time is None
                        else h.column(s.event_time).cast(pa.int64()).to_numpy(
                            zero_copy_only=False)
                        for h, s in zip(held, self.streams, strict=True)]

    # -- output --------------------------------------------------------------------------------
    def release(self) -> tuple[pa.RecordBatch, np.ndarray] | None:
        """The records whose place is now certain, as one batch in the merged order (each
        stream's rows through ``align`` first), with the stream of each row; None if none."""
        if self.streams[0].event_time is None:
            return self._release_all_unordered()
        return self._take(NO_BOUND, self.bound(), remove=True)

    def bound(self, without: frozenset[int] = frozenset()) -> tuple[int, int]:
        """The lowest ``(wm_j, j)`` over the open streams (but ``without``): a record
        ``(et, i)`` at or below it is certain, as far as those streams go. With no stream
        left, the end of the order."""
        wm = self.watermarks()
        open_ = np.array([j for j in np.flatnonzero(~self.ended) if j not in without],
                         dtype=np.int64)
        if open_.size:
            k = open_[np.lexsort((open_, wm[open_]))[0]]
            return int(wm[k]), int(k)
        return END_OF_STREAM, len(self.streams)

    def peek(self, low: tuple[int, int], high: tuple[int, int], arrived_by: float = np.inf
             ) -> tuple[pa.RecordBatch, np.ndarray] | None:
        """The held records ``(et, i)`` with ``low < (et, i) <= high`` that arrived by
        ``arrived_by``, in the merged order, still held (``released_et``/``released_at``
        describe them); None if none."""
        return self._take(low, high, remove=False, arrived_by=arrived_by)

    def _take(self, low: tuple[int, int], high: tuple[int, int], remove: bool,
              arrived_by: float = np.inf) -> tuple[pa.RecordBatch, np.ndarray] | None:
        ets, streams, rows, ats = [], [], [], []
        for i in range(len(self.streams)):
            if not self.held_rows[i]:
                continue
            et = self.held_et[i]
            go = _within(et, i, low, high) & (self.held_at[i] <= arrived_by)
            n = int(go.sum())
            if not n:
                continue
            if go[:n].all():  # a prefix of the held records (the usual case): no copy
                out, rest = _split(self.held[i], n)
            elif not remove:  # a peek: only the records it selects are copied
                out, rest = _pick(self.held[i], go), self.held[i]
            else:
                batch = concat(self.held[i]) if len(self.held[i]) > 1 else self.held[i][0]
                out, rest = batch.filter(pa.array(go)), [batch.filter(pa.array(~go))]
            if remove:
                self.held[i] = rest
                self.held_rows[i] -= n
            ats.append(self.held_at[i][go])
            if remove:
                self.held_at[i] = self.held_at[i][~go]
                self.held_et[i] = et[~go]
            ets.append(et[go])
            streams.append(np.full(out.num_rows, i, dtype=np.int64))
            rows.append(self.align(i, out))
        if not rows:
            return None
        et_all, st_all = np.concatenate(ets), np.concatenate(streams)
        pos = np.concatenate([np.arange(r.num_rows) for r in rows])
        order = merged_order(et_all, st_all, pos)
        both = rows[0] if len(rows) == 1 else concat(rows)
        at_all = np.concatenate(ats)
        if (order == np.arange(order.size)).all():  # one stream, in event-time order already
            self.released_et, self.released_at = et_all, at_all
            return both, st_all
        self.released_et, self.released_at = et_all[order], at_all[order]
        return both.take(pa.array(order)), st_all[order]

    def _release_all_unordered(self) -> tuple[pa.RecordBatch, np.ndarray] | None:
        if not self.held_rows[0]:
            return None
        out = concat(self.held[0]) if len(self.held[0]) > 1 else self.held[0][0]
        self.released_at = self.held_at[0]
        self.released_et = np.full(out.num_rows, NO_WATERMARK, dtype=np.int64)
        self.held[0], self.held_rows[0], self.held_at[0] = [], 0, _NO_TIMES
        self.held_et[0] = _NO_ETS
        return self.align(0, out), np.zeros(out.num_rows, dtype=np.int64)

    def held_total(self) -> int:
        return int(self.held_rows.sum())


_NO_TIMES = np.zeros(0, dtype=np.float64)
_NO_ETS = np.zeros(0, dtype=np.int64)


def _split(pieces: list[pa.RecordBatch], n: int) -> tuple[pa.RecordBatch,
                                                           list[pa.RecordBatch]]:
    """The first ``n`` rows of ``pieces`` (one batch), and the pieces of the rest."""
    taken: list[pa.RecordBatch] = []
    k = 0
    while n:
        head = pieces[k]
        if head.num_rows <= n:
            taken.append(head)
            n -= head.num_rows
            k += 1
        else:
            taken.append(head.slice(0, n))
            return (taken[0] if len(taken) == 1 else concat(taken),
                    [head.slice(n), *pieces[k + 1:]])
    return taken[0] if len(taken) == 1 else concat(taken), pieces[k:]
NO_BOUND = (NO_WATERMARK - 1, 0)  # below every record of the merged order


def _pick(held: list[pa.RecordBatch], go: np.ndarray) -> pa.RecordBatch:
    """The records ``go`` selects of the batches ``held`` (in their order), copying only
    those: a run of them is sliced out of the batches it spans, others are taken."""
    at = np.flatnonzero(go)
    table = pa.Table.from_batches(held)
    lo, hi = int(at[0]), int(at[-1]) + 1
    part = table.slice(lo, hi - lo)
    if hi - lo != at.size:
        part = part.take(pa.array(at - lo))
    return part.combine_chunks().to_batches()[0]


def _within(et: np.ndarray, i: int, low: tuple[int, int], high: tuple[int, int]) -> np.ndarray:
    """``low < (et, i) <= high`` in the merged order, per record of stream ``i``."""
    above = (et > low[0]) | ((et == low[0]) & (i > low[1]))
    below = (et < high[0]) | ((et == high[0]) & (i <= high[1]))
    out: np.ndarray = above & below
    return out


def merged_order(et: np.ndarray, stream: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """SUnion's order: by event time, then stream, then arrival within the stream."""
    return np.lexsort((pos, stream, et))
