"""Progress markers (docs/design.md §3).

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

import numpy as np
import numpy.typing as npt

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


@dataclass(frozen=True, slots=True)
class Frontier:
    """Progress per mini-partition: ``sn[q]`` and ``wm[q]`` for partition ``q`` of a stage.

    What an operator shell's ``advance`` takes and returns (``operators/base.py``). A site
    hosts some of a stage's partitions; the others never make progress here, so an operator
    must read each partition's own entry (``at``), never a minimum over all of them.
    """

    sn: npt.NDArray[np.int64]
    wm: npt.NDArray[np.int64]

    @classmethod
    def every(cls, progress: Progress, partitions: int) -> Frontier:
        """The same progress for partitions ``0 .. partitions - 1``."""
        return cls(np.full(partitions, progress.sn, dtype=np.int64),
                   np.full(partitions, progress.wm, dtype=np.int64))

    def at(self, parts: np.ndarray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The ``(sn, wm)`` of each of ``parts`` (an array of partition numbers)."""
        return self.sn[parts], self.wm[parts]

    def of(self, part: int) -> Progress:
        return Progress(int(self.sn[part]), int(self.wm[part]))

    def min(self, sn: np.ndarray, wm: np.ndarray) -> Frontier:
        """This frontier held back to at most ``sn`` / ``wm`` per partition."""
        return Frontier(np.minimum(self.sn, sn), np.minimum(self.wm, wm))


_NEVER = np.iinfo(np.int64).max  # no held row in a partition: nothing holds its claim back


def release_closed(claim: np.ndarray, part: np.ndarray, sn: np.ndarray, closed: np.ndarray
                   ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """The release rule of an operator that holds rows until their window, group or session
    closes: which held rows go out now, and the output claim per partition.

    ``claim[q]``: the input's SN claim of partition ``q``; per held row its partition
    ``part``, its ``sn`` and whether it is ``closed``. An open row holds its partition's
    claim below its SN (a future output may carry it); a closed row is released only at or
    below that claim, and one that waits behind an open row holds the claim below its own SN
    too, so the output leaves in SN order and the claim never passes a row not yet out.
    Returns ``(release, claim)``: the mask of rows released, and the output's SN claim."""
    n = claim.size
    lowest_open = np.full(n, _NEVER, dtype=np.int64)
    np.minimum.at(lowest_open, part[~closed], sn[~closed])
    claim = np.minimum(claim, lowest_open - 1)
    release = closed & (sn <= claim[part])
    held = closed & ~release
    lowest_held = np.full(n, _NEVER, dtype=np.int64)
    np.minimum.at(lowest_held, part[held], sn[held])
    return release, np.minimum(claim, lowest_held - 1)
