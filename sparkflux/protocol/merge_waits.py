"""SUnion's delay bound at an order-preserving merge (``--consistency eventual``), sans I/O.

Every merge of several inputs (a stage's FH-Cons on a site, whose input streams are the
previous stage's partitions; the egress, whose streams are the last stage's) releases a row
only once every input stream has claimed past it (``ConsumerSet.release``). When the streams
of a partition's only reachable copies go quiet (a network partition between sites, while
every process lives), the merge holds everything after them. In eventual mode a merge that
has held rows for the delay bound X releases them *tentatively*, with the inputs it has:

- a partition is **due** once rows have waited above its frontier for X without the frontier
  moving (``look``, at each tick of the host's clock);
- a stream is **silent** once its progress has not moved for X;
- the tentative frontier of a due partition is the lowest progress over its streams that
  are not silent; the held rows up to it (above what went before) go on tentatively, in SN
  order (``feed``): a site processes them in the stage's tentative branch
  (``tentative.py``), the egress delivers them as tentative rows. They stay held: the stable
  release takes them in their turn, once the silent streams are back.

The rows keep their stable SNs (the ingress has numbered them; only the merge is waiting), so
downstream the tentative rows of such an episode and the stable ones are in one numbering.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.model.progress import NO_PROGRESS, NO_WATERMARK
from sparkflux.protocol.consumer import ConsumerSet


class MergeWaits:
    """The delay bound's bookkeeping for one ``ConsumerSet``."""

    def __init__(self, cons: ConsumerSet, max_delay: float) -> None:
        if max_delay <= 0:
            raise ValueError(f"the delay bound must be positive (got {max_delay})")
        self.cons = cons
        self.max_delay = max_delay
        n = int(cons.released_sn.size)
        self._seen_sn = cons.progress_sn.copy()
        # when each stream's progress last moved
        self.moved_at: np.ndarray = np.full(cons.progress_sn.shape, np.nan)
        self._seen_frontier = cons.released_sn.copy()
        self.since: np.ndarray = np.full(n, np.nan)  # since when each partition held rows
        self.fed: np.ndarray = np.full(n, NO_PROGRESS, dtype=np.int64)  # went tentatively
        self.forked: np.ndarray = np.zeros(n, dtype=bool)  # fed in the open episode

    def look(self, now: float) -> np.ndarray:
        """The clock's tick: per partition, whether it is due (rows held for X)."""
        c = self.cons
        moved = c.progress_sn != self._seen_sn
        first = np.isnan(self.moved_at)
        self.moved_at[moved | first] = now
        self._seen_sn = c.progress_sn.copy()
        holding = c.holding() & c.installed
        advanced = c.released_sn != self._seen_frontier
        self._seen_frontier = c.released_sn.copy()
        restart = ~holding | advanced
        self.since[restart] = np.nan
        self.since[holding & np.isnan(self.since)] = now
        due: np.ndarray = holding & (now - np.nan_to_num(self.since, nan=now)
                                     >= self.max_delay)
        return due

    def silent(self, now: float) -> np.ndarray:
        """Per stream ``[partition, producer]``: its progress has not moved for X."""
        out: np.ndarray = now - np.nan_to_num(self.moved_at, nan=now) >= self.max_delay
        return out

    def feed(self, parts: np.ndarray, now: float
             ) -> tuple[pa.RecordBatch | None, int, int] | None:
        """The held rows of partitions ``parts`` (a mask) that the streams still speaking
        have made certain, above what went before, in SN order; and the claim ``(sn, wm)``
        that holds for them (the lowest over those partitions). None: nothing to say."""
        c = self.cons
        if not parts.any():
            return None
        speaking = ~self.silent(now)
        sn = np.where(speaking, c.progress_sn, np.iinfo(np.int64).max).min(axis=1)
        wm = np.where(speaking, c.progress_wm, np.iinfo(np.int64).max).min(axis=1)
        none = ~speaking.any(axis=1)  # every stream silent: nothing more is certain
        low = np.maximum(self.fed, c.released_sn)
        high = np.where(none, low, np.maximum(sn, low))
        wm = np.where(none, NO_WATERMARK, wm)
        mask = parts & c.installed
        if not mask.any():
            return None
        high = np.where(mask, high, low)
        rows = c.peek(low, high)
        self.fed = np.where(mask, high, self.fed)
        self.forked = self.forked | mask
        return rows, int(high[mask].min()), int(wm[mask].min())

    def reconciled(self) -> None:
        """The episode is over: the next one starts from the stable frontier."""
        self.fed[:] = NO_PROGRESS
        self.forked[:] = False
