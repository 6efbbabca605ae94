"""The controller's load balancing (thesis §4.4, ch. 5): the balancing round's actions,
which ``rounds.py``'s table names, carried out on the controller's state (``Balancing`` is
a part of ``Controller``): the sites' samples, the pooled baseline, and the movement phase's
plan from the policy.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from sparkflux.control.events import Action, Collect, Stats
from sparkflux.control.memory_policy import SiteMemory, plan_memory_moves, why, with_room
from sparkflux.control.moves import MoveRecord
from sparkflux.control.policy import PlannedMove, PolicyConfig, plan_moves
from sparkflux.control.redeploy import Redeploy
from sparkflux.control.redeploy import measured as measured_matrix
from sparkflux.control.redeploy import plan as plan_redeploy
from sparkflux.control.rounds import Ev as RoundEv
from sparkflux.control.rounds import Phase
from sparkflux.control.rounds import step as round_step
from sparkflux.control.utilisation import utilisation
from sparkflux.dataflow.placement import Domain, Layout

RECENT_ROUNDS = 4  # a partition moved in one of the last rounds is not moved again yet


class RoundRecord(TypedDict):
    """One balancing round as the run's metrics list it (per site j unless said)."""

    round: int
    at: float  # the controller's clock at the movement phase
    delta_s: float  # the collection phase's length asked for
    window_s: float  # the pooled baseline's age: what the statistics cover
    utilisation: dict[int, float]
    busy: dict[int, float]
    replicas: dict[int, int]  # partition copies site j hosts
    rows: dict[int, int]  # rows site j processed
    load: dict[int, int]  # the demand of what site j hosts
    fixed: float  # the fitted fixed cost
    moves: list[tuple[int, int, int]]  # (partition, donor, receiver) planned
    policy: str  # which ran: "cpu", "memory" or "latency" (a re-deployment)
    why: str  # why that one (``memory_policy.why``)
    memory: dict[int, dict[str, int | None]]  # per site with a budget: budget, used, spilled


class Balancing:
    """The load-balancing part of the controller: its rounds' state lives on ``Controller``
    (set up in its ``__init__``), named here for the methods below."""

    balance: bool
    started: bool
    finished: bool
    aborted: str | None
    incomplete: set[tuple[int, int, int]]
    awaiting: list[int]
    moving: dict[int, MoveRecord]
    recovering: int | None
    pending_moves: list[tuple[int, int, int, str]]
    layout: Layout | None
    policy: PolicyConfig
    now: float
    round: int
    lb_state: Phase
    lb_at: float
    delta: float
    rounds: list[RoundRecord]
    _base: dict[int, Stats]
    _pool: list[tuple[float, dict[int, Stats]]]
    _pool_table: np.ndarray | None
    _samples: dict[int, Stats]
    _moving_since: float
    _previous: tuple[dict[int, float], dict[int, float]]
    _settled_at: float | None
    rescaling: object | None
    placement_mode: str
    _placed_by: np.ndarray | None  # the latency matrix the copies were last placed by
    # since when every round has found a re-deployment worth it (``redeploy.py`` rule 4)
    _redeploy_since: float | None
    redeploy_settle: float
    placement: Any
    stages: int

    def _live(self) -> list[int]:
        raise NotImplementedError

    def _is_member(self, site: int, attempt: int) -> bool:
        raise NotImplementedError

    def _live_domains(self) -> dict[int, Domain]:
        raise NotImplementedError

    def _next_task(self) -> list[Action]:
        raise NotImplementedError

    def _balancing(self) -> bool:
        return (self.balance and self.started and not self.finished and not self.aborted
                and not self.incomplete and not self.awaiting and not self.moving
                and self.recovering is None and not self.pending_moves
                and self.rescaling is None)

    def _stop_balancing(self) -> None:
        """A failure ends load balancing at once: stale statistics are ignored (round
        numbers) and planned moves are dropped; it resumes once recovery is complete."""
        self._round(RoundEv.FAILURE)

    # -- the balancing round's actions (``rounds.py`` names them) ----------------------------
    def _round(self, event: RoundEv) -> list[Action]:
        """One transition of the balancing round, its actions carried out in order."""
        self.lb_state, names = round_step(self.round, self.lb_state, event)
        out: list[Action] = []
        for name in names:
            out += _ROUND_ACTIONS[name](self)
        return out

    def _round_collect(self) -> list[Action]:
        self.round += 1
        self._samples = {}
        return [Collect(round=self.round)]

    def _round_pool(self) -> list[Action]:
        self._base = self._pooled_base(dict(self._samples))
        if self._settled_at is None:
            self._settled_at = self.now + self.policy.window_s
        self.lb_at = self.now + self.delta
        return []

    def _round_shorten(self) -> list[Action]:
        self.delta = max(self.delta / 2, self.policy.delta_min)
        self.lb_at = self.now
        return []

    def _round_move(self) -> list[Action]:
        self._moving_since = self.now
        return self._next_task()

    def _round_lengthen(self) -> list[Action]:
        self.delta = max(self.now - self._moving_since, self.policy.delta_min)
        self.lb_at = self.now
        return []

    def _round_abandon(self) -> list[Action]:
        self.round += 1  # late samples of the abandoned round are stale
        return []

    def _round_drop_moves(self) -> list[Action]:
        # (a re-layout over failure domains is planned afresh after the next recovery)
        self.pending_moves = [m for m in self.pending_moves
                              if m[3] not in ("balance", "domain", "memory", "latency")]
        self._previous = ({}, {})  # the sites' loads before the failure say nothing now
        self._pool = []
        self._settled_at = None
        self.lb_at = self.now + self.delta
        return []

    def _stats(self, ev: Stats) -> list[Action]:
        if ev.round != self.round or not self._is_member(ev.site, ev.attempt):
            return []  # a reply from an earlier round (or an old process): stale
        self.now = max(self.now, ev.now)
        self._samples[ev.site] = ev
        if not set(self._live()) <= set(self._samples):
            return []  # a live site's sample is still missing
        return self._round(RoundEv.SAMPLED)

    def _pooled_base(self, samples: dict[int, Stats]) -> dict[int, Stats]:
        """The baseline a round's statistics start from: the oldest one taken in the last
        ``window_s`` seconds while the placement was what it is now, from the same site
        processes. Counters are cumulative, so a longer phase is just an older baseline;
        a move, a failure or a recovery changes the placement and starts the pool afresh."""
        assert self.layout is not None
        table = self.layout.table()
        if self._pool_table is None or not np.array_equal(table, self._pool_table):
            self._pool, self._pool_table = [], table.copy()
        attempts = {j: s.attempt for j, s in samples.items()}
        self._pool = [(t, b) for t, b in self._pool if t >= self.now - self.policy.window_s
                      and {j: s.attempt for j, s in b.items()} == attempts]
        self._pool.append((self.now, samples))
        return self._pool[0][1]

    def _redeploy(self) -> Redeploy | None:
        """With ``--placement latency`` and racing copies: the re-deployment the sites'
        measured latencies call for (``redeploy.py``), recorded in the placement report;
        None: none, or not every slot live. Not under Flux-HA: its egress reads column 0's
        copy, and a move builds the new copy in the free column, so moving the far copies
        would cost moves and gain nothing."""
        if self.placement_mode != "latency" or self._placed_by is None \
                or self.layout is None or not self.layout.race \
                or len(self._live()) < self.layout.sites or self.layout.replicas < 2:
            self._redeploy_since = None  # (a slot down: the settle time starts afresh)
            return None
        matrix = measured_matrix({j: s.link_ms for j, s in self._samples.items()}, self._placed_by)
        re = plan_redeploy(self.layout.table(), matrix, self.layout.replicas,
                           max(self.stages - 1, 0), self._live_domains())
        if re is None or self._redeploy_since is None:
            # (rule 4: from now on, every round for the settle time must find one worth it)
            self._redeploy_since = None if re is None else self.now
            return None
        if self.now - self._redeploy_since < self.redeploy_settle:
            return None
        self._redeploy_since = None
        self._placed_by = re.matrix
        self.placement.setdefault("redeploys", []).append({
            "at": round(self.now, 3), "round": self.round, "bound_ms": re.bound_ms,
            "new_bound_ms": re.new_bound_ms, "moves": len(re.moves)})
        return re

    def _movement_phase(self) -> list[Action]:
        assert self.layout is not None
        u = utilisation(self._base, self._samples, self.layout.table())
        util, counts, measured = u.util, u.load, u.busy
        recent = frozenset(q for r in self.rounds[-RECENT_ROUNDS:] for q, _, _ in r["moves"])
        gave = frozenset(d for r in self.rounds[-RECENT_ROUNDS:] for _, d, _ in r["moves"])
        memory = {j: SiteMemory(None if s.budget < 0 else s.budget, s.memory, s.spilled,
                                np.asarray(s.part_bytes or (0,) * self.layout.partitions,
                                           dtype=np.int64), frozenset(s.on_disk))
                  for j, s in self._samples.items()}
        mode = self.policy.mode
        budgeted = any(m.budget is not None for m in memory.values())
        which, reason = why(memory, mode)
        redeploy = self._redeploy()
        if redeploy is not None:
            which = "latency"
            reason = (f"measured latencies: bound {redeploy.bound_ms:g} -> "
                      f"{redeploy.new_bound_ms:g}")
            planned = [PlannedMove(q, r, self.layout.site_of(q, r), dst, 0, 0.0, 0.0)
                       for q, r, dst in redeploy.moves]
        elif which == "memory":
            planned = plan_memory_moves(memory, self.layout.table(), recent,
                                        self._live_domains())
        else:
            planned = plan_moves(util, counts, self.layout.table(), self.policy, recent,
                                 measured, u.per_row, gave, self._previous,
                                 self._live_domains())
            if budgeted and mode == "hybrid":
                planned = with_room(planned, memory)
            if self.policy.hysteresis and self._settled_at is not None \
                    and self.now < self._settled_at:
                planned = []  # still ramping up after a start or a failure
        self._previous = (util, measured)
        self.rounds.append({"round": self.round, "at": self.now, "delta_s": self.delta,
                            # (a round always has its baseline in the pool)
                            "window_s": round(self.now - self._pool[0][0], 3),
                            "utilisation": {j: round(u, 3) for j, u in util.items()},
                            "busy": {j: round(u, 3) for j, u in measured.items()},
                            "replicas": {j: int((self.layout.table() == j).sum())
                                         for j in util},
                            # rows the site processed, and the demand of what it hosts
                            "rows": u.rows,
                            "load": {j: int(counts[j].sum()) for j in util},
                            "fixed": round(u.fixed, 4),
                            "moves": [(m.q, m.donor, m.receiver) for m in planned],
                            "policy": which, "why": reason,
                            "memory": {j: {"budget": m.budget, "used": m.used,
                                           "spilled": m.spilled}
                                       for j, m in memory.items() if m.budget is not None}})
        if not planned:
            return self._round(RoundEv.NO_MOVES)
        self.pending_moves += [(m.q, m.r, m.receiver, "balance" if which == "cpu" else which)
                               for m in planned]
        return self._round(RoundEv.PLANNED)


_ROUND_ACTIONS = {
    "collect": Balancing._round_collect, "pool": Balancing._round_pool,
    "plan": Balancing._movement_phase, "shorten": Balancing._round_shorten,
    "move": Balancing._round_move, "lengthen": Balancing._round_lengthen,
    "abandon": Balancing._round_abandon, "drop-moves": Balancing._round_drop_moves,
}
