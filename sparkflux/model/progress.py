"""Progress markers and the order-preserving merge (DESIGN.md §3; thesis L2919-2927).

A progress marker on a stream says "nothing with major SN <= ``sn`` will follow, and nothing
with event time < ``wm`` will follow". Producers attach one to every data message and send
bare markers when idle, so that a merge never stalls on a quiet producer.

The merge releases tuples in SN order, up to the minimum progress over its live input
streams. Because every replica of a consumer sees the same SN-ordered input and operators are
deterministic, replicas stay identical. This module knows nothing of sockets or sites.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import pyarrow as pa

from sparkflux.model.batch import concat, sort_by_sn, split_at_sn

NO_PROGRESS = -1
END_OF_STREAM = (1 << 62)
NO_WATERMARK = -(1 << 62)


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress marker: all SNs <= ``sn`` and all event times < ``wm`` are complete."""

    sn: int = NO_PROGRESS
    wm: int = NO_WATERMARK

    @property
    def ended(self) -> bool:
        return self.sn >= END_OF_STREAM

    def min(self, other: Progress) -> Progress:
        return Progress(min(self.sn, other.sn), min(self.wm, other.wm))


START = Progress()
ENDED = Progress(END_OF_STREAM, END_OF_STREAM)


class OrderedMerge:
    """Order-preserving merge of several SN-ordered input streams.

    ``push`` adds an input's data (SN-ordered, above its previous progress) and its new
    progress; ``release`` returns every buffered row with SN <= the frontier (the minimum
    progress over inputs), in ``(_sn, _snm)`` order, and keeps the rest.
    """

    def __init__(self, inputs: Iterable[Hashable], schema: pa.Schema) -> None:
        self.schema = schema
        self._progress: dict[Hashable, Progress] = {i: START for i in inputs}
        if not self._progress:
            raise ValueError("an ordered merge needs at least one input")
        self._pending: dict[Hashable, list[pa.RecordBatch]] = {i: [] for i in self._progress}
        self._released = START

    @property
    def inputs(self) -> frozenset[Hashable]:
        return frozenset(self._progress)

    @property
    def frontier(self) -> Progress:
        """The minimum progress over the live inputs."""
        it = iter(self._progress.values())
        acc = next(it)
        for p in it:
            acc = acc.min(p)
        return acc

    def pending_rows(self) -> int:
        return sum(b.num_rows for bs in self._pending.values() for b in bs)

    def push(self, stream: Hashable, batch: pa.RecordBatch | None, progress: Progress) -> None:
        if stream not in self._progress:
            raise KeyError(f"stream {stream!r} is not an input of this merge")
        if batch is not None and batch.num_rows:
            self._pending[stream].append(batch)
        old = self._progress[stream]
        self._progress[stream] = Progress(max(old.sn, progress.sn), max(old.wm, progress.wm))

    def release(self) -> tuple[pa.RecordBatch, Progress]:
        """Rows with SN <= frontier in SN order, and the frontier they complete."""
        f = self.frontier
        out: list[pa.RecordBatch] = []
        if f.sn > self._released.sn:
            for stream, batches in self._pending.items():
                keep: list[pa.RecordBatch] = []
                for b in batches:
                    head, tail = split_at_sn(b, f.sn)
                    if head.num_rows:
                        out.append(head)
                    if tail.num_rows:
                        keep.append(tail)
                self._pending[stream] = keep
        self._released = f
        return sort_by_sn(concat(out, self.schema)), f
