"""The driver's record of a run's progress: ``ProgressLog`` makes a ``QueryProgress``
(``progress.py``) every ``--progress-interval`` seconds from the host's counters, the sites'
heartbeats (their stages' watermarks, their operators' state) and the events the host's
actions note as they happen (a failure, its take-over, an adoption, a catch-up, a move).

It runs on the host's loop (``ProgressLog.run`` is one of its tasks); other threads (the
query's ``last_progress``, the terminal's live view, the dashboard) read ``recent``,
``events`` and ``last`` under its lock. Listeners (the Prometheus series) get every progress
as it is made. Nothing here is on the data path: a progress is a read of counters.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from sparkflux.control.membership import Slot
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime.progress import (
    EventKind,
    OperatorState,
    QueryProgress,
    RunEvent,
    SiteRole,
    SiteState,
    SourceProgress,
    StageProgress,
)

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

RECENT = 300  # the progresses kept (``recent_progress``): five minutes at one a second


def _wm(value: int) -> int | None:
    return None if value <= NO_WATERMARK or value >= END_OF_STREAM else int(value)


class ProgressLog:
    """The progress of one run (see the module)."""

    def __init__(self, host: Host, interval: float = 1.0) -> None:
        self.host = host
        self.interval = interval
        self.recent: deque[QueryProgress] = deque(maxlen=RECENT)
        self.events: list[RunEvent] = []
        self.listeners: list[Callable[[QueryProgress], None]] = []
        self.lock = threading.Lock()
        # (stage, partition) -> the highest watermark any copy of it reported
        self._wm: dict[tuple[int, int], int] = {}
        # slot -> its last state report: (operator, partition) -> (keys, bytes)
        self._state: dict[int, dict[tuple[int, int], tuple[int, int]]] = {}
        self._pid: dict[int, int] = {}
        self._held: dict[int, int] = {}
        # slot -> (bytes held, budget or None, bytes on disk) at its last heartbeat with state
        self._memory: dict[int, tuple[int, int | None, int]] = {}
        self._busy: dict[int, tuple[float, float]] = {}  # slot -> (at, busy_s) at the last
        self._busy_share: dict[int, float] = {}
        self._last_at = 0.0
        self._last_in: list[int] = []
        self._last_out = 0
        self._last_done = 0
        self._last_tentative = 0
        # --consistency eventual: the bound, the mode, the state and every state change
        # (seconds after the input started), as of the last interval (None: strict)
        self.consistency: dict[str, Any] | None = None
        self._catching: dict[int, int] = {}  # site -> its copies caught up so far
        self._moves_seen = 0
        self._short = False  # a partition was short of copies at the last look
        self._stalls_seen = 0
        self._next_id = 0
        # (index over the plan's operators, stage, name) of the stateful ones (the rest
        # hold nothing between batches)
        self._ops = [(k, stage, op.name) for k, (stage, op) in enumerate(
            (s.index, op) for s in host.plan.stages for op in s.operators) if op.stateful]

    @property
    def last(self) -> QueryProgress | None:
        with self.lock:
            return self.recent[-1] if self.recent else None

    # -- what the host tells it --------------------------------------------------------------
    def note(self, kind: EventKind, site: int | None, detail: str) -> None:
        """An event as it happens (from the host's loop)."""
        t0 = self.host.metrics.start
        at = round(time.time() - t0, 3) if t0 is not None else 0.0
        with self.lock:
            self.events.append(RunEvent(at_s=at, kind=kind, site=site, detail=detail))

    def heartbeat(self, slot: int, beat: cm.Heartbeat) -> None:
        """A site's heartbeat: its stages' watermarks, its state when it carries them, its
        busy time (the interval's busy share)."""
        self._pid[slot] = beat.pid
        self._held[slot] = beat.buffered + beat.held + beat.pending
        if beat.has_state:
            self._memory[slot] = (beat.memory, None if beat.budget < 0 else beat.budget,
                                  beat.spilled)
            for st, q, w in zip(beat.wm_stage.tolist(), beat.wm_part.tolist(),
                                beat.wm.tolist(), strict=True):
                if w > self._wm.get((st, q), NO_WATERMARK):
                    self._wm[(st, q)] = w
            self._state[slot] = {
                (int(o), int(p)): (int(k), int(b)) for o, p, k, b in zip(
                    beat.state_op, beat.state_part, beat.state_keys, beat.state_bytes,
                    strict=True)}
        last = self._busy.get(slot)
        if last is not None and beat.at > last[0]:
            share = (beat.busy_s - last[1]) / (beat.at - last[0])
            self._busy_share[slot] = round(min(max(share, 0.0), 1.0), 3)
        if last is None or beat.at - last[0] >= self.interval:
            self._busy[slot] = (beat.at, beat.busy_s)

    def caught_up(self, site: int) -> None:
        """One more copy caught up onto ``site`` (the count its ``caught-up`` event gives)."""
        self._catching[site] = self._catching.get(site, 0) + 1

    def recovered(self, site: int) -> None:
        copies = self._catching.pop(site, 0)
        self.note("caught-up", site, f"site {site} caught up ({copies} copies): every "
                                     f"partition has its copies again")

    # -- the interval ------------------------------------------------------------------------
    async def run(self) -> None:
        """Every ``interval`` from the start of the input: one progress."""
        host = self.host
        assert host.start_ingress is not None
        await host.start_ingress.wait()
        self._last_at = time.time()
        self._last_in = [0] * len(host.plan.streams)
        while True:
            await asyncio.sleep(self.interval)
            self.tick()

    def tick(self) -> QueryProgress:
        """The progress since the last one (also made once more when the run ends)."""
        host = self.host
        now = time.time()
        duration = max(now - self._last_at, 1e-9)
        self._note_records()
        totals = list(host.source_rows)
        if len(self._last_in) != len(totals):
            self._last_in = [0] * len(totals)
        rows_in = sum(totals) - sum(self._last_in)
        out = host.egress.delivered
        done = min(host.completed[-1][1] + 1, host.ingress.next_isn) if host.completed else 0
        lat = host.metrics.latencies_between(self._last_at, now)
        t0 = host.metrics.start or now
        with self.lock:
            since = [e for e in self.events if e.at_s > self._last_at - t0 - 1e-9]
        eps = host.core.episodes
        tent = host.metrics.tentative_rows
        progress = QueryProgress(
            id=self._next_id, timestamp=round(now, 3), elapsed_s=round(now - t0, 3),
            duration_s=round(duration, 3), phase=host.stats.phase,
            input_state=host.input_state, input_rows=rows_in,
            input_rows_per_s=round(rows_in / duration, 1),
            processed_rows_per_s=round(max(done - self._last_done, 0) / duration, 1),
            output_rows=out - self._last_out,
            output_rows_per_s=round((out - self._last_out) / duration, 1),
            total_input_rows=host.ingress.next_isn, total_output_rows=out,
            dead_letters=host.stats.dead_letters,
            latency_p50_s=round(float(np.percentile(lat, 50)), 4) if lat.size else None,
            latency_p99_s=round(float(np.percentile(lat, 99)), 4) if lat.size else None,
            consistency=None if eps is None else eps.episode.state.value,
            tentative_rows=tent - self._last_tentative,
            tentative_rows_per_s=round((tent - self._last_tentative) / duration, 1),
            total_tentative_rows=tent, corrections=host.metrics.corrections,
            sources=self._sources(totals, duration), stages=self._stages(),
            state=self._operators(), sites=self._sites(), events=since)
        self._next_id += 1
        self._last_at, self._last_in, self._last_out = now, totals, out
        self._last_done = max(done, self._last_done)
        self._last_tentative = tent
        with self.lock:
            self.recent.append(progress)
            if eps is not None:
                ep = eps.episode
                self.consistency = {
                    "max_delay_s": ep.config.max_delay, "mode": ep.config.mode,
                    "state": ep.state.value, "episodes": ep.epoch,
                    "states": [{"at_s": round(at - t0, 3), "state": st}
                               for at, st in ep.history]}
        for listen in self.listeners:
            listen(progress)
        return progress

    def _note_records(self) -> None:
        """Events the host records rather than tells: moves that ended, stalls reported."""
        host = self.host
        moves = host.controller.moves
        for mv in moves[self._moves_seen:]:
            why = {"balance": "to balance the load", "domain": "off a shared failure domain"}
            self.note("moved", mv.dst, f"partition {mv.q} copy {mv.r} moved from site "
                                       f"{mv.src} to {mv.dst} {why.get(mv.reason, mv.reason)}")
        self._moves_seen = len(moves)
        short = bool(host.controller.incomplete)
        if self._short and not short:  # back to full copies without a site's recovery
            with self.lock:
                kinds = [e.kind for e in self.events if e.kind in ("failure", "caught-up")]
            if kinds and kinds[-1] == "failure":
                self.note("caught-up", None, "every partition has all its copies again")
        self._short = short
        for stall in host.stalls[self._stalls_seen:]:
            self.note("stall", None, stall["message"])
        self._stalls_seen = len(host.stalls)

    def _sources(self, totals: list[int], duration: float) -> list[SourceProgress]:
        seq = self.host.core.sequencer
        wms = seq.watermarks()
        return [SourceProgress(
            name=spec.name, rows=n - last, total_rows=n,
            rows_per_s=round((n - last) / duration, 1),
            watermark=_wm(int(wms[k])) if spec.event_time else None,
            ended=bool(seq.ended[k]))
            for k, (spec, n, last) in enumerate(zip(self.host.plan.streams, totals,
                                                    self._last_in, strict=True))]

    def _live(self) -> list[int]:
        dead = self.host.dead
        return [s for s in self._slots() if s not in dead]

    def _slots(self) -> list[int]:
        """The site slots of the query now: the plan's, and those a rescale opened, less
        those it retired."""
        return [s for s, st in sorted(self.host.controller.slot_state.items())
                if st is not Slot.VACANT]

    def _stages(self) -> list[StageProgress]:
        """Each stage's watermark: the lowest over its partitions of the highest any copy
        of the partition reported (None until every partition has reported one)."""
        out = []
        parts = self.host.plan.partitions
        for stage in self.host.plan.stages:
            k = stage.index
            wms = [self._wm.get((k, q)) for q in range(parts)]
            low = NO_WATERMARK if any(w is None for w in wms) else min(
                w for w in wms if w is not None)
            out.append(StageProgress(stage=k, operators=" > ".join(
                op.name for op in stage.operators), watermark=_wm(low),
                ended=low >= END_OF_STREAM))
        return out

    def _operators(self) -> list[OperatorState]:
        best: dict[tuple[int, int], tuple[int, int]] = {}
        for s in self._live():
            for key, size in self._state.get(s, {}).items():
                if key not in best or size[1] > best[key][1]:
                    best[key] = size
        out = []
        for k, stage, name in self._ops:
            mine = [v for (o, _), v in best.items() if o == k]
            out.append(OperatorState(stage=stage, operator=name,
                                     keys=sum(v[0] for v in mine),
                                     bytes=sum(v[1] for v in mine), partitions=len(mine)))
        return out

    def _sites(self) -> list[SiteState]:
        host = self.host
        ctl = host.controller
        layout = ctl.layout
        building: dict[int, int] = {}
        if layout is not None:
            for (_, q, r) in ctl.in_flight | set(ctl.queue):
                s = layout.site_of(q, r)
                building[s] = building.get(s, 0) + 1
            for mv in ctl.moving.values():
                building[mv.dst] = building.get(mv.dst, 0) + 1
        out = []
        opened = ctl.rescaling.opened if ctl.rescaling is not None else []
        for s in self._slots():
            hosted = layout.hosted(s) if layout is not None else {
                q: 0 for q in range(host.plan.partitions) if q % host.plan.sites == s}
            role: SiteRole = ("starting" if s in opened and s in host.dead else
                    "failed" if s in host.dead else
                    "catching up" if building.get(s) or ctl.recovering == s else "live")
            out.append(SiteState(
                site=s, role=role, pid=self._pid.get(s), copies=len(hosted),
                primaries=sum(1 for r in hosted.values() if r == 0),
                building=building.get(s, 0),
                busy=None if s in host.dead else self._busy_share.get(s),
                buffered_rows=0 if s in host.dead else self._held.get(s, 0),
                **self._memory_of(s, s in host.dead)))
        for conn in list(host.standbys):
            ident = host.identity.get(conn)
            out.append(SiteState(site=-1, role="standby", pid=ident[2] if ident else None,
                                 copies=0, primaries=0, building=0, busy=None,
                                 buffered_rows=0))
        return out

    def _memory_of(self, s: int, dead: bool) -> dict[str, int | None]:
        """A live site's memory at its last heartbeat with state (``protocol/memory.py``)."""
        held, budget, spilled = self._memory.get(s, (None, None, None))
        if dead:
            held = budget = spilled = None
        return {"memory_bytes": held, "budget_bytes": budget, "spilled_bytes": spilled}
