"""The driver's sources: the plan's sources read batch by batch, and the push source that
``--rate`` makes of them (the paper's packet sprayer), whose buffer overflow is counted as
dropped input and logged: a warning when drops begin and one when they end, with counts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.dataflow.plan import PhysicalPlan, StreamSpec
from sparkflux.model.batch import concat
from sparkflux.model.progress import NO_WATERMARK
from sparkflux.runtime.run_config import LiveStats

log = logging.getLogger(__name__)

FLUSH_S = 0.02  # a push source's records wait at most this long for admission (a batch)
TICK_S = 0.005  # a push source's records arrive this often (or every flush, if shorter)
DROPS_QUIET_S = 1.0  # a run of drops ends after this long without one

WAIT = object()  # nothing to admit yet: the feed waits idly and asks again
_ENDED = object()  # a source's iterator is exhausted
# the push source hands its sources' records over in turns of about this much input in all
# (a finer turn costs the driver more per record than it gains)
SLICE_S = 0.1
HOLD_BACK_MAX = 1024  # slices a cut-off source produces in one turn, at most


Item = tuple[int, "pa.RecordBatch | list[dict[str, Any]] | None"]  # (source, batch); None: it ended


class SourceFeed:
    """The plan's sources read batch by batch, as ``(source, batch)``, and ``(source, None)``
    once a source is exhausted; ``None`` after the last; ``WAIT`` when the source read next
    has nothing yet (it yielded ``None``: an unbounded source waiting for input).

    With several sources it reads next from the one whose watermark (largest event time read
    so far less its allowed lateness) is lowest: the one the sequencer's merge waits for, so
    that what the merge holds stays small. Which source is read when never changes the
    merged order (the sequencer's rule), only how much it holds. So when that source has
    nothing yet the feed waits for it rather than read ahead from the others: the merge could
    not release their records anyway. Unless ``read_ahead`` (``--consistency eventual``):
    then the merge may release them without the silent source, tentatively, and the feed
    reads the next source that has something; and while a source is cut off
    (``--cut-source``) the others' records keep arriving, held by the merge in strict
    mode, as a network cut of one source would leave them.

    ``slice_rows`` (the push source sets it to a source's share of about 0.1 s of its
    rate): a source's batch
    is handed over in slices of at most that many records, each judged by its own largest
    event time, so several sources interleave in event time as live streams do. Without
    it a large batch of one source would come at once, and at a low rate the others would
    seem silent while it lasts (a delay bound shorter than that would take them for
    failed)."""

    def __init__(self, plan: PhysicalPlan, skip: list[int] | None = None,
                 read_ahead: bool = False) -> None:
        """``skip``: a restart's position of each source (records it had handed over at the
        checkpoint's cut): it resumes after them (``Source.batches_from``)."""
        self.read_ahead = read_ahead
        self._sources = plan.sources
        skip = skip or [0] * len(plan.sources)
        self._iters: list[Iterator[pa.RecordBatch | list[dict[str, Any]] | None]] = [
            s.batches_from(n) if n else s.batches()
            for s, n in zip(plan.sources, skip, strict=True)]
        self._streams = plan.streams
        self._wm = [NO_WATERMARK] * len(self._iters)
        self._open = [True] * len(self._iters)
        # ``--cut-source``: per source, until when (monotonic) its records are held outside,
        # and what it produced meanwhile (delivered first after the heal)
        self._cut_until = [0.0] * len(self._iters)
        self._held: list[list[Any]] = [[] for _ in self._iters]
        self.from_backlog = False  # the last item came from a healed cut's backlog
        self.slice_rows: int | None = None
        self.held_rows = 0  # records produced and held behind a cut so far
        self._rest: list[Any] = [None] * len(self._iters)  # a batch's slices still to come

    @property
    def sources(self) -> int:
        """How many sources it reads."""
        return len(self._iters)

    def cut(self, source: int, seconds: float) -> None:
        """Hold source ``source``'s records outside the dataflow for ``seconds`` from now
        (``--cut-source``, a network cut between the source and the ingress): the source
        goes on producing in its turn, its records held on the far side of the cut, and
        after the heal they all come at once (a burst, outside any pacing:
        ``from_backlog``), then the source as it comes."""
        self._cut_until[source] = time.monotonic() + seconds

    def cut_off(self, source: int) -> float:
        """Seconds the source stays cut off (0: it is not)."""
        return max(0.0, self._cut_until[source] - time.monotonic())

    def end(self) -> None:
        """End the input here (``FluxQuery.stop``): each open source is closed (its
        ``close()`` hook if it has one, a generator's ``close``) and reported ended in turn;
        nothing more is read from it."""
        for i, it in enumerate(self._iters):
            if not self._open[i]:
                continue
            hook = getattr(self._sources[i], "close", None)
            if callable(hook):
                hook()
            close = getattr(it, "close", None)
            if callable(close):
                try:
                    close()
                except ValueError:  # a generator running now (never on the host's loop)
                    pass
            self._iters[i] = iter(())

    def waiting_for(self) -> str | None:
        """What the source the feed waits on says it waits for (``Source.waiting_for``)."""
        live = [i for i, o in enumerate(self._open) if o or self._held[i]]
        if not live:
            return None
        i = min(live, key=lambda j: (self._wm[j], j))
        if self.cut_off(i):
            return (f"source {self._streams[i].name!r} is cut off (--cut-source) for "
                    f"{self.cut_off(i):.1f} s more; the merge of the sources waits for it")
        return self._sources[i].waiting_for()

    def next(self) -> Item | None | object:
        self.from_backlog = False
        for i, held in enumerate(self._held):
            if held and not self.cut_off(i):  # the heal: the backlog comes first, at once
                self.from_backlog = True
                return i, held.pop(0)
        live = [i for i, o in enumerate(self._open) if o]
        if not live:  # (records still held behind a cut come after it)
            return WAIT if any(self._held) else None
        order = sorted(live, key=lambda j: (self._wm[j], j))
        # a cut source's peers keep arriving (``--cut-source`` is a network cut, not a
        # pause of the world): the merge holds their records, or sends them tentatively
        ahead = self.read_ahead or any(self.cut_off(j) for j in live)
        for i in order if ahead else order[:1]:
            if self._cut_until[i] and self.cut_off(i):
                # produced in its turn, held on the far side of the cut: in slices until
                # its event time passes the lowest of the others, as a live stream keeps
                # pace with them (one slice per turn would leave it behind, its backlog
                # then paced after the heal)
                bar = min((self._wm[j] for j in live
                           if j != i and not (self._cut_until[j] and self.cut_off(j))),
                          default=None)
                for _ in range(HOLD_BACK_MAX):
                    if not self._hold_back(i) or bar is None or self._wm[i] > bar \
                            or self._streams[i].event_time is None:
                        break
                continue
            item = self._read(i)
            if item is _ENDED:
                self._open[i] = False
                return i, None
            if item is None:
                continue
            if len(self._iters) > 1:
                self._wm[i] = max(self._wm[i], _max_time(item, self._streams[i]))
            return i, item
        return WAIT


    def _read(self, i: int) -> Any:
        """Source ``i``'s next slice: the rest of its last batch first; ``_ENDED`` at its
        end."""
        item, self._rest[i] = self._rest[i], None
        if item is None:
            try:
                item = next(self._iters[i])
            except StopIteration:
                return _ENDED
        if item is not None and self.slice_rows is not None and len(self._iters) > 1:
            n = len(item) if isinstance(item, list) else item.num_rows
            if n > self.slice_rows:
                item, self._rest[i] = split(item, self.slice_rows)
        return item

    def _hold_back(self, i: int) -> bool:
        """Source ``i`` is cut off: its next slice (if it has one now) is produced and held
        outside until the heal; its end too. Whether it had one."""
        item = self._read(i)
        if item is _ENDED:
            self._open[i] = False
            self._held[i].append(None)
            return False
        if item is None:
            return False
        self._held[i].append(item)
        self.held_rows += len(item) if isinstance(item, list) else item.num_rows
        if len(self._iters) > 1:
            self._wm[i] = max(self._wm[i], _max_time(item, self._streams[i]))
        return True


def _max_time(item: pa.RecordBatch | list[dict[str, Any]], spec: StreamSpec) -> int:
    """The batch's largest event time less the lateness (NO_WATERMARK if none is valid)."""
    col = spec.event_time
    if col is None:
        return NO_WATERMARK
    if isinstance(item, pa.RecordBatch):
        if item.schema.get_field_index(col) < 0 or not item.num_rows:
            return NO_WATERMARK
        top = pc.max(item.column(col)).as_py()
    else:
        times = [r.get(col) for r in item if isinstance(r, dict)]
        top = max((t for t in times if isinstance(t, int) and not isinstance(t, bool)),
                  default=None)
    return NO_WATERMARK if not isinstance(top, int) else top - spec.lateness


class PacedBuffer:
    """A push source (the paper's packet sprayer): records arrive at ``rate`` per second.

    What the ingress buffer cannot hold is dropped and counted (``ingress_dropped``): a push
    source does not wait. A run of drops is logged as a warning when it begins (its first
    record dropped), with the buffer's capacity and the rate, and when it ends (no record
    dropped for ``DROPS_QUIET_S``, or the input's end), with the records it dropped, from its
    first drop to its last, and the run's total so far: two lines however often the buffer
    fills and drains within it.
    """

    def __init__(self, source: SourceFeed, rate: float, capacity: int, stats: LiveStats,
                 flush_rows: int = 8192, flush_s: float = FLUSH_S) -> None:
        self.source = source
        source.slice_rows = max(64, int(rate * SLICE_S / max(1, source.sources)))
        self.rate = rate
        self.capacity = capacity
        self.stats = stats
        self.buffer: deque[Item] = deque()
        self.held = 0
        self.exhausted = False
        self._carry: Item | None = None
        self.flush_rows = flush_rows
        self.flush_s = flush_s
        self._last_take = time.monotonic()
        self._drops_since: float | None = None  # when the current run of drops began
        self._last_drop = 0.0  # and its latest drop
        self._drops = 0  # the records it dropped
        self.drop_runs = 0  # runs of drops so far

    async def produce(self) -> None:
        try:
            await self._produce()
        finally:
            self._drops_end("the input ended" if self.exhausted else "the run ended")

    def _dropped(self, n: int) -> None:
        self.stats.dropped += n
        if self._drops_since is None:
            self._drops_since, self._drops = time.monotonic(), 0
            self.drop_runs += 1
            log.warning("input dropped: the ingress buffer is full (%s records, "
                        "--ingress-buffer) and the push source sends %s records/s (--rate): "
                        "what does not fit is dropped and counted (ingress_dropped) until the "
                        "admission, which waits for the sites (a slow, failed or cut-off site; "
                        "--window), takes from it again", f"{self.capacity:,}",
                        f"{self.rate:,.0f}")
        self._drops += n
        self._last_drop = time.monotonic()

    def _drops_end(self, why: str) -> None:
        if self._drops_since is None:
            return
        log.warning("input no longer dropped (%s): %s records dropped over %.1f s; %s dropped "
                    "in all so far", why, f"{self._drops:,}",
                    self._last_drop - self._drops_since, f"{self.stats.dropped:,}")
        self._drops_since = None

    async def _produce(self) -> None:
        t0 = time.monotonic()
        produced = 0
        while not self.exhausted:
            due = int((time.monotonic() - t0) * self.rate) - produced
            while due > 0 and not self.exhausted:
                held = self.source.held_rows
                item = self._carry if self._carry is not None else self.source.next()
                self._carry = None
                # a cut-off source produces at its share of the rate too, on the far side
                # of the cut: what it held counts, so its peers keep their own share
                produced += self.source.held_rows - held
                due -= self.source.held_rows - held
                if item is WAIT:
                    # Nothing yet: what was due meanwhile is not owed later (a push source
                    # sends nothing while it has nothing; a burst would be a later rate).
                    produced += max(due, 0)
                    break
                if due <= 0 and isinstance(item, tuple) and item[1] is not None \
                        and not self.source.from_backlog:
                    self._carry = item  # the held records took what was due: it waits
                    break
                if item is None:
                    self.exhausted = True
                    break
                assert isinstance(item, tuple)
                stream, payload = item
                if payload is None:  # a source's end: it takes no room and is never dropped
                    self.buffer.append(item)
                    continue
                if self.source.from_backlog:  # a healed cut's burst: paced when produced
                    self.buffer.append(item)
                    self.held += len(payload) if isinstance(payload, list) \
                        else payload.num_rows
                    continue
                n = len(payload) if isinstance(payload, list) else payload.num_rows
                if n > due:
                    payload, rest = split(payload, due)
                    self._carry = (stream, rest)
                    n = due
                produced += n
                due -= n
                if self.held + n > self.capacity:
                    self._dropped(n)
                    continue
                self.buffer.append((stream, payload))
                self.held += n
            if (self._drops_since is not None
                    and time.monotonic() - self._last_drop >= DROPS_QUIET_S):
                self._drops_end(f"none for {DROPS_QUIET_S:g} s")
            await asyncio.sleep(min(TICK_S, self.flush_s))

    def take(self) -> Any:
        """Everything buffered, once it fills a batch or the flush interval has passed, as
        ``[(source, batch or None), ...]`` with each run of one source's batches merged.

        Admitting every few milliseconds would multiply the per-message cost (every admission
        fans out into data and acknowledgements to every site and both replicas); flushing on
        size or a short timer keeps that cost bounded at any rate (docs/design.md §6).
        """
        now = time.monotonic()
        due = self.held >= self.flush_rows or now - self._last_take >= self.flush_s
        if self.buffer and (due or self.exhausted):
            self._last_take = now
            runs: list[tuple[int, list[Any]]] = []
            while self.buffer:
                stream, payload = self.buffer.popleft()
                if payload is None:
                    runs.append((stream, []))
                    continue
                self.held -= len(payload) if isinstance(payload, list) else payload.num_rows
                if runs and runs[-1][0] == stream and runs[-1][1]:
                    runs[-1][1].append(payload)
                else:
                    runs.append((stream, [payload]))
            return [(i, merge(parts) if parts else None) for i, parts in runs]
        return None if self.exhausted else WAIT


def split(item: pa.RecordBatch | list[dict[str, Any]], n: int) -> tuple[Any, Any]:
    if isinstance(item, list):
        return item[:n], item[n:]
    return item.slice(0, n), item.slice(n)


def merge(parts: list[Any]) -> Any:
    if all(isinstance(p, pa.RecordBatch) for p in parts):
        return concat(parts, parts[0].schema) if len(parts) > 1 else parts[0]
    out: list[dict[str, Any]] = []
    for p in parts:
        out.extend(p if isinstance(p, list) else p.to_pylist())
    return out


def total(plan: PhysicalPlan) -> int | None:
    totals = [s.total() for s in plan.sources]
    known = [t for t in totals if t is not None]
    return None if len(known) < len(totals) else int(sum(known))
