"""Progress markers (DESIGN.md §3; thesis L2919-2927).

A progress marker on a stream says "nothing with major SN <= ``sn`` will follow, and nothing
with event time < ``wm`` will follow". Producers attach one to every data message and send
bare markers when idle, so that a merge never stalls on a quiet producer.

A consumer releases tuples in SN order, up to the minimum progress over its live input
streams (FH-Cons, ``protocol/consumer.py``). Because every replica of a consumer sees the
same SN-ordered input and operators are deterministic, replicas stay identical. This module
knows nothing of sockets or sites.
"""

from __future__ import annotations

from dataclasses import dataclass

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
