"""The driver's part of eventual consistency (``protocol/consistency.py``), sans I/O.

``InputEpisodes`` judges the input after every release of the sequencer and on every tick:
whether a source has gone silent while records wait for it (the delay bound), what goes on
tentatively and to whom, when the stable release has caught up with the tentative one (the
heal point), and, from the egress's side, when the stable output has passed that point, so
the egress can deliver the episode's ``undo``, its corrections and ``rec_done``. The
``Boundary`` carries out what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkflux.control.stage_states import StageStates
from sparkflux.model.batch import concat
from sparkflux.model.schema import SN, SRC, T0
from sparkflux.protocol.consistency import (
    HEAL,
    OPEN,
    RECONCILE,
    SEND,
    Episode,
    Ev,
    Eventual,
    State,
    silent,
)
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.merge_waits import MergeWaits
from sparkflux.protocol.messages import Outgoing, Reconciled
from sparkflux.protocol.sequencer import Sequencer, merged_order

ROUNDS = 8  # rounds of catching up after the heal, at most (``InputEpisodes._current``)
CONVERGED = 0.9  # a round that took this share of the one before or more: no catching up


@dataclass(frozen=True, slots=True)
class Released:
    """What the sequencer just released stably: rows (aligned, merged order), each row's
    stream, event time and arrival."""

    rows: pa.RecordBatch
    streams: np.ndarray
    et: np.ndarray
    arrived: np.ndarray


class InputEpisodes:
    """The failure episodes of a run's input, and the tentative rows they send."""

    def __init__(self, config: Eventual, sequencer: Sequencer, ingress: Ingress,
                 egress: Egress, empty_rows: pa.RecordBatch) -> None:
        """``empty_rows``: no records, in the schema the sequencer releases them in."""
        if config.max_delay <= 0:
            raise ValueError(f"the delay bound must be positive (got {config.max_delay})")
        self.episode = Episode(config)
        self.seq, self.ingress, self.egress = sequencer, ingress, egress
        self.empty_rows = empty_rows
        self.tentative_rows = 0  # rows sent tentatively (input)
        self.max_wait = 0.0  # the longest a record sent tentatively had waited at the driver
        # whether the open episode is the input's (a silent source: the ingress sends
        # tentatively) or only a merge's (a site's or the egress's merge released by the
        # delay bound, ``merge_waits.py``: the input is whole, the ingress sends nothing)
        self.input_failed = False
        # the egress's own merge under the delay bound (the last stage's partitions)
        self.waits = MergeWaits(egress.cons, config.max_delay)
        self.merge_rows = 0  # rows the egress's merge delivered tentatively
        self.stages = StageStates(len(ingress.plan.stages))  # per stage (the Boundary's)
        # the stable SNs of input never sent tentatively while an episode was open (in
        # ``suspend`` mode, what came during stabilization): their corrections are the first
        # output made of them, so the availability bound counts them (closed ranges)
        self.unsent: list[tuple[int, int]] = []
        self._unsent_from: int | None = None
        # catching up after the heal (``_current``): (when, target SN, round number, how
        # long the round before took)
        self._round: tuple[float, int, int, float] | None = None
        # how long the newest tentative row delivered took from its input's arrival (the
        # tentative output's lag: what ``_current`` holds the stable output's lag against)
        self.tentative_lag = 0.0
        # per last-stage partition, the arrival time (``T0``) of the newest input whose
        # tentative rows reached the output in the open episode
        self.tentative_t0: dict[int, float] = {}

    def tentative_delivered(self, rows: pa.RecordBatch, now: float) -> None:
        """Tentative rows reached the output: note their lag (the newest input's), and per
        last-stage partition the arrival of the newest input that reached the output
        tentatively (a correction of later input is the first output made of it)."""
        if rows.num_rows:
            t0 = rows.column(T0).to_numpy()
            self.tentative_lag = now - float(t0.max())
            part = rows.column(SRC).to_numpy()
            for q in np.unique(part):
                newest = float(t0[part == q].max())
                self.tentative_t0[int(q)] = max(newest, self.tentative_t0.get(int(q), newest))

    def stable_lag(self, now: float) -> float | None:
        """How far behind the input the stable output held for the episode is: from the
        arrival of the newest input its rows answer to now; None with none held."""
        held = self.egress.corrections
        if not held or not held[-1].num_rows:
            return None
        return now - float(held[-1].column(T0).to_numpy().max())

    @property
    def open(self) -> bool:
        return self.episode.state is not State.STABLE

    def judge(self, now: float, released: Released | None, dead: set[int]) -> list[Outgoing]:
        """After a release (or on a tick): the machine's event, and the tentative rows due."""
        ep, seq = self.episode, self.seq
        if ep.since is None:  # the machine's clock starts with the first judgment
            ep.since = now
        x = ep.config.max_delay
        quiet = silent(seq.heard_at, seq.ended, now, x)
        if self.open:  # a source counts as failed again once it is silent for X
            waiting: frozenset[int] = frozenset()
            oldest = seq.oldest()
            blocked = oldest is not None and now - oldest >= x and bool(quiet)
        else:
            # SUnion's rule opens an episode: a record held for X waits for the sources that
            # have not passed it (silent, or speaking without getting there), so none waits
            # longer than X, even one held before a silent source's last records came
            waiting = seq.waiting_on(now - x)
            blocked = bool(waiting)
        if blocked and self.open:
            self.input_failed = True  # a merge's episode: now the input's too
        if ep.state is State.UPSTREAM_FAILURE:
            if self.input_failed:
                healed = not quiet and seq.bound() >= ep.sent_to
            else:  # a merge's episode heals when the stable output moves on
                healed = self.egress.progress.sn > ep.base
            event = Ev.HEALED if healed else Ev.BLOCKED
        elif blocked:
            event = Ev.BLOCKED
        elif ep.state is State.STABILIZATION:
            event = Ev.HEALED
        else:
            return []
        out: list[Outgoing] = []
        for action in ep.on(event, now):
            if action == OPEN:
                self.input_failed = True
                ep.epoch += 1
                ep.base = self.ingress.next_isn - 1
                ep.heal = None
                ep.failed = frozenset()
                ep.sent_to = ep.certain = seq.bound()
                self.egress.holding = ep.base
            elif action == HEAL:
                ep.heal = self.ingress.next_isn - 1
                ep.failed = frozenset()
                self._round = None
            elif action == SEND and ep.sends() and self.input_failed:
                # a source found silent stays out of the tentative bound until the episode
                # heals: while it catches up, the others' new records go on tentatively
                if ep.state is State.UPSTREAM_FAILURE:
                    ep.failed = ep.failed | quiet | waiting
                out += self._send(now, released, dead)
        self._track_unsent(released)
        return out

    def next_due(self, now: float) -> float | None:
        """The next moment after ``now`` at which a judgment may change something without
        new input: a held record reaches the delay bound, a speaking source has been silent
        for it, or (``delay``, in upstream failure) the first record not yet sent has waited
        it. The host ticks then rather than on its next period, so the records an episode
        opens with, and those ``delay`` holds, wait X, not X and up to a tick. None: nothing
        pending."""
        ep = self.episode
        x = ep.config.max_delay
        seq = self.seq
        times = seq.heard_at[~seq.ended] + x
        oldest = seq.oldest()
        if oldest is not None:
            times = np.append(times, oldest + x)
        if ep.config.mode == "delay" and ep.state is State.UPSTREAM_FAILURE:
            # ``delay`` sends each record once it has waited X: the first not sent yet
            unsent = seq.first_arrival_above(ep.sent_to)
            if unsent is not None:
                times = np.append(times, unsent + x)
        future = times[times > now]
        return float(future.min()) if future.size else None

    def _current(self, now: float) -> bool:
        """Whether the stable output, past the heal point, is also current: the episode
        reconciles then. At reconciliation ``undo`` voids every tentative row, and a row
        whose stable version is still on its way has no answer until it comes; while new
        input goes on tentatively (``process``, ``delay``), the stable output that has just
        passed the heal point is still a backlog behind (the input that came while the
        stages redid). It is current once its lag (``stable_lag``) is no more than the
        tentative output's, or than k X (the chain's bound: k stages): the rows the undo
        voids get their stable answers as soon as they got their tentative ones.

        Under the load of an episode (every stage redoing beside its branch) the stable lag
        may never come down that far. So the stable output is also followed in rounds: each
        round's target is the input admitted when the round began (so a round takes about
        the lag at its start); one that took ``CONVERGED`` of the round before or more shows
        a stable output no longer catching up, and waiting longer would only hold more
        corrections back: it reconciles then, and after ``ROUNDS`` rounds whatever the lag.
        ``suspend`` sends nothing new, and the egress holds every stable row of an open
        episode: it reconciles at the heal, as a merge's episode does (the input was never
        held)."""
        if not self.episode.sends() or not self.input_failed:
            return True  # (a merge's episode: the input went on stably all along)
        k_x = len(self.ingress.plan.stages) * self.episode.config.max_delay
        lag = self.stable_lag(now)
        if lag is not None and lag <= max(k_x, self.tentative_lag):
            return True
        sn = self.egress.progress.sn
        if self._round is not None:
            began, target, n, last = self._round
            if sn < target:
                return False
            took = now - began
            if took <= k_x or n >= ROUNDS or took >= CONVERGED * last:
                return True
            self._round = (now, self.ingress.next_isn - 1, n + 1, took)
            return False
        self._round = (now, self.ingress.next_isn - 1, 1, float("inf"))
        return False

    def _track_unsent(self, released: Released | None) -> None:
        """Keep ``unsent`` up to date after a judgment: a range opens after the heal point
        when the state sends nothing new (``suspend``) and closes before this release's
        records when sending starts again (a new failure in the same episode)."""
        ep = self.episode
        if self._unsent_from is None:
            if ep.state is State.STABILIZATION and not ep.sends() and self.input_failed \
                    and ep.heal is not None:
                self._unsent_from = ep.heal + 1
        elif ep.sends():
            n = 0 if released is None else released.rows.num_rows
            hi = self.ingress.next_isn - 1 - n
            if hi >= self._unsent_from:
                self.unsent.append((self._unsent_from, hi))
            self._unsent_from = None

    def open_merge(self, now: float) -> None:
        """A merge released rows by the delay bound (a site's, whose first tentative rows
        reached the egress, or the egress's own): the episode opens if none is open, at
        the stable output's progress (every stable row after it is a correction). The
        input is whole, so the ingress sends nothing tentatively for it."""
        if self.open:
            return
        ep = self.episode
        assert OPEN in ep.on(Ev.BLOCKED, now)
        self.input_failed = False
        ep.epoch += 1
        ep.base = self.egress.progress.sn
        ep.heal = None
        ep.failed = frozenset()
        ep.sent_to = ep.certain = self.seq.bound()
        self.egress.holding = ep.base

    def merge_due(self, now: float) -> pa.RecordBatch | None:
        """The egress's merge on the clock's tick: the last stage's rows it has held for
        the delay bound go out tentatively (opening an episode); None if none, and None
        during an episode of the input (as a site's merges add nothing to one)."""
        due = self.waits.look(now)
        if self.open and self.input_failed:
            # the input's episode: every record came tentatively already, and what the
            # egress's merge holds now is the stable redo (its rows are corrections)
            return None
        go = due | self.waits.forked
        if not go.any():
            return None
        self.open_merge(now)
        fed = self.waits.feed(go, now)
        if fed is None or fed[0] is None or not fed[0].num_rows:
            return None
        self.merge_rows += fed[0].num_rows
        return fed[0]

    def overdue(self, now: float, slack: float) -> int:
        """The held records that break the availability bound: certain among the sources
        that speak (at or below their bound), neither sent tentatively nor stably released,
        and waiting longer than the delay bound plus ``slack`` (how late a judgment may come).
        Zero after every judgment: the simulator checks it on every tick."""
        seq, ep = self.seq, self.episode
        out_ = self._excluded(now) if self.open else silent(
            seq.heard_at, seq.ended, now, ep.config.max_delay)
        open_ = {int(j) for j in np.flatnonzero(~seq.ended)}
        if not out_ or open_ <= out_:  # none left out, or none speaking: nothing is due
            return 0
        peeked = seq.peek(max(ep.sent_to, seq.bound()) if self.open else seq.bound(),
                          seq.bound(out_))
        if peeked is None:
            return 0
        return int((now - seq.released_at > ep.config.max_delay + slack).sum())

    def _excluded(self, now: float) -> frozenset[int]:
        """The sources the tentative bound leaves out: the silent ones, and those of the
        episode's failed ones still behind what went tentatively (catching up: their
        backlog is corrections, and the others' new records must not wait for it)."""
        ep, seq = self.episode, self.seq
        wm = seq.watermarks()
        behind = {j for j in ep.failed if (int(wm[j]), j) <= ep.sent_to}
        return silent(seq.heard_at, seq.ended, now, ep.config.max_delay) | behind

    def caught_up(self, now: float, live: list[int]) -> tuple[
            pa.RecordBatch | None, list[Outgoing], np.ndarray | None] | None:
        """After the egress delivered: if the stable output has passed the heal point (or
        ended), the episode reconciles: its held corrections, ``Reconciled`` for the sites
        ``live``, and which corrections are the first output made of their input
        (``first_outputs``). None while it has not."""
        ep = self.episode
        if ep.state is State.UPSTREAM_FAILURE and not self.input_failed \
                and self.egress.progress.sn > ep.base:
            # a merge's episode heals as soon as the stable output moves on (or ends)
            assert HEAL in ep.on(Ev.HEALED, now)
            ep.heal = self.ingress.next_isn - 1
        if ep.state is not State.STABILIZATION or ep.heal is None:
            return None
        if self.egress.progress.sn < ep.heal and not self.egress.ended:
            return None
        if not self.egress.ended and not self._current(now):
            return None
        assert RECONCILE in ep.on(Ev.CAUGHT_UP, now)
        self._round = None
        self.tentative_lag = 0.0
        self.input_failed = False
        if self._unsent_from is not None:
            self.unsent.append((self._unsent_from, np.iinfo(np.int64).max))
            self._unsent_from = None
        unsent, self.unsent = self.unsent, []
        newest, self.tentative_t0 = self.tentative_t0, {}
        self.waits.reconciled()
        held = self.egress.corrections
        self.egress.corrections, self.egress.holding = [], None
        if not held:
            return None, [Outgoing(s, Reconciled(ep.epoch)) for s in live], None
        rows = concat(held)
        first = first_outputs(rows, unsent, newest)
        if SRC in rows.schema.names:
            rows = rows.drop_columns([SRC])
        self.egress.delivered += rows.num_rows
        return rows, [Outgoing(s, Reconciled(ep.epoch)) for s in live], first

    def _send(self, now: float, released: Released | None, dead: set[int]) -> list[Outgoing]:
        """The records in ``(sent_to, T]`` in SUnion's order, tentatively: ``T`` the bound of
        the sources still speaking; in ``delay`` mode, only up to the last record that has
        waited the delay bound."""
        ep, seq = self.episode, self.seq
        out_ = self._excluded(now)
        speaking = ~seq.ended
        speaking[list(out_)] = False
        # with every open source left out, nothing more is certain: the bound stays
        live_bound = seq.bound(out_) if speaking.any() else ep.sent_to
        # what was once certain stays so (a record ``delay`` holds back until it has waited
        # X goes then, even if every source has gone quiet meanwhile)
        ep.certain = max(ep.certain, live_bound)
        top = max(ep.sent_to, ep.certain)
        low = ep.sent_to
        parts: list[tuple[pa.RecordBatch, np.ndarray, np.ndarray, np.ndarray]] = []
        if released is not None:
            go = _above(released.et, released.streams, low) & ~_above(
                released.et, released.streams, top)
            if go.any():
                mask = pa.array(go)
                parts.append((released.rows.filter(mask), released.streams[go],
                              released.et[go], released.arrived[go]))
        peeked = seq.peek(low, top) if top > low else None
        if peeked is not None:
            parts.append((peeked[0], peeked[1], seq.released_et, seq.released_at))
        if parts:
            rows = concat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
            st = np.concatenate([p[1] for p in parts])
            et = np.concatenate([p[2] for p in parts])
            at = np.concatenate([p[3] for p in parts])
            order = merged_order(et, st, np.arange(et.size))
            rows, st, et, at = rows.take(pa.array(order)), st[order], et[order], at[order]
            if ep.config.mode == "delay" and ep.state is State.UPSTREAM_FAILURE:
                aged = np.flatnonzero(at <= now - ep.config.max_delay)
                if not aged.size:
                    return []  # nothing has waited the bound yet
                # up to the last record that has waited the bound (with every record of its
                # place in the order): none waits longer, some go a little earlier
                k = int(aged[-1])
                k = int(np.flatnonzero((et == et[k]) & (st == st[k]))[-1])
                top = (int(et[k]), int(st[k]))
                rows, st, et, at = rows.slice(0, k + 1), st[:k + 1], et[:k + 1], at[:k + 1]
        else:
            rows = None
        if top <= low and (rows is None or not rows.num_rows):
            return []
        ep.sent_to = top
        n = 0 if rows is None else rows.num_rows
        self.tentative_rows += n
        if n:
            self.max_wait = max(self.max_wait, now - float(at.min()))
        tsn = ep.number(n)
        if rows is None:
            rows, at = self.empty_rows, np.zeros(0)
        first_live = self.ingress.layout.first_live(dead)
        return self.ingress.tentative(rows, at, tsn, ep.next_tsn - 1, top[0], ep.epoch,
                                      first_live)


def _above(et: np.ndarray, st: np.ndarray, bound: tuple[int, int]) -> np.ndarray:
    """``(et, stream) > bound`` in the merged order, per record."""
    out: np.ndarray = (et > bound[0]) | ((et == bound[0]) & (st > bound[1]))
    return out



def first_outputs(rows: pa.RecordBatch, unsent: list[tuple[int, int]],
                  newest: dict[int, float]) -> np.ndarray:
    """Which of an episode's corrections are the first output made of their input (the
    availability bound counts their latency): those whose SN lies in an ``unsent`` range
    (input never sent tentatively, ``suspend``), and those whose input came after the
    newest input whose tentative rows of the same last-stage partition reached the output
    (``newest``: partition -> its arrival time). Within a partition the tentative output
    follows its input in order, so such input had none (its tentative rows stalled in a
    stage, or there were none). Rows without their partition compare with every one."""
    sn = rows.column(SN).to_numpy()
    first = np.zeros(sn.size, dtype=bool)
    for lo, hi in unsent:
        first |= (sn >= lo) & (sn <= hi)
    t0 = rows.column(T0).to_numpy()
    if SRC in rows.schema.names:
        part = rows.column(SRC).to_numpy().astype(np.int64)
        keys = np.fromiter(newest.keys(), dtype=np.int64, count=len(newest))
        table = np.full(int(max(part.max(initial=-1), keys.max(initial=-1))) + 1, -np.inf)
        table[keys] = np.fromiter(newest.values(), dtype=np.float64, count=len(newest))
        seen = table[part]
    else:
        seen = np.full(sn.size, max(newest.values(), default=-np.inf))
    first |= t0 > seen
    return first
