"""Rescaling a running query as a table, and the placement it moves to (docs/design.md §9).

A rescale changes how many site slots hold the query's mini-partitions while it runs, out of
what Flux already has: slots a standby adopts (recovery, thesis ch. 5) and make-before-break
moves (unified Flux). Nothing stops: every copy that changes site is built by catch-up while
the old one runs, then the old one is retired, so the output is the same SN for SN.

Growing from n to N slots, the new slots ``n .. N-1`` (or slots a shrink left vacant) open
empty and wait for a process each: the runtime starts that many new site tasks, which
register as standbys and adopt them (a slot with nothing to catch up is recovered at once).
Shrinking, the slots above N retire: their copies move off first, then their processes are
stopped and they leave the view (a ``fail`` of a site that holds nothing: no take-over).
Slot numbers stay dense: a shrink retires the highest.

The target placement is chained declustering (replica r of q at ring position
``(q + r + o) mod N``) over a ring of the target slots chosen over their failure domains
(``choose_ring``), rotated by the offset o that keeps the most copies where they are; each
copy not in its partition's target set moves to a target site its partition lacks
(``plan_moves``), so a move never meets another copy of its partition at its destination.

The rules (``RESCALE_TRANSITIONS``); the controller feeds the events only when no recovery
and no move runs (``Controller._next_task``: recovery comes first), so a plan is made from a
table nothing is changing:

1. ``grow`` --every opened slot adopted and recovered (``started``)--> ``moving``.
2. ``grow`` --the grow wait passed with slots no process took (``waited``)--> ``moving``
   (``vacate-unstarted``: those slots are closed again and the run says so; the placement
   spreads over the slots that came).
3. ``moving`` --no rescale move queued or running, copies off the target and rounds left
   (``off-target``)--> ``moving`` (``plan-moves``). The first plan is such a round; a
   failure, or a move given up or skipped, leaves copies for the next.
4. ``moving`` --every copy on the target, or no round left (``placed``)--> ``done``
   (``retire-surplus``: every retiring slot that holds nothing leaves; ``finish``).

A shrink starts in ``moving``. A failure during a rescale is recovered as any other; a
retiring slot that fails is not adopted again (its copies are rebuilt on the target).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum

import numpy as np

from sparkflux.dataflow.placement import NOWHERE, Domain, choose_ring
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition

GROW_WAIT_S = 120.0  # how long opened slots wait for new site tasks to start
MOVE_ROUNDS = 4  # plans of moves per rescale (a failure may leave copies off the target)


class RescaleError(ProtocolError):
    """An impossible transition of a rescale."""


class Phase(StrEnum):
    GROW = "grow"
    MOVING = "moving"
    DONE = "done"


class Ev(Enum):
    STARTED = "started"
    WAITED = "waited"
    OFF_TARGET = "off-target"
    PLACED = "placed"


RESCALE_TRANSITIONS: dict[tuple[Phase, Ev], tuple[Phase, tuple[str, ...]]] = {
    (Phase.GROW, Ev.STARTED): (Phase.MOVING, ()),  # rule 1
    (Phase.GROW, Ev.WAITED): (Phase.MOVING, ("vacate-unstarted",)),  # rule 2
    (Phase.MOVING, Ev.OFF_TARGET): (Phase.MOVING, ("plan-moves",)),  # rule 3
    (Phase.MOVING, Ev.PLACED): (Phase.DONE, ("retire-surplus", "finish")),  # rule 4
}


def rescale_step(phase: Phase, event: Ev) -> tuple[Phase, tuple[str, ...]]:
    """The rescale's next phase and the actions of ``event`` in ``phase``."""
    return transition(RESCALE_TRANSITIONS, phase, event, RescaleError, "rescale")


@dataclass
class RescaleRecord:
    """One rescale: what was asked, what it did, how long it took (the run's metrics)."""

    before: int  # active slots when it was asked
    sites: int  # the target
    start: float
    phase: Phase
    opened: list[int] = field(default_factory=list)  # slots opened for new processes
    retiring: list[int] = field(default_factory=list)  # slots to retire
    target: list[int] = field(default_factory=list)  # the slots the placement spreads over
    moves: int = 0  # copies moved
    rounds: int = 0  # plans of moves
    retired: list[int] = field(default_factory=list)
    unstarted: list[int] = field(default_factory=list)  # opened slots no process adopted
    started_s: float | None = None  # the opened slots' processes were all in
    end: float | None = None
    note: str = ""  # what it could not do

    def as_dict(self) -> dict[str, object]:
        return {"before": self.before, "sites": self.sites, "start": self.start,
                "opened": self.opened, "retired": self.retired, "unstarted": self.unstarted,
                "moves": self.moves, "rounds": self.rounds, "started_s": self.started_s,
                "seconds": None if self.end is None else round(self.end - self.start, 3),
                "note": self.note}


def target_sets(partitions: int, sites: Sequence[int], domains: Mapping[int, Domain],
                replicas: int, table: np.ndarray) -> list[set[int]]:
    """Per partition, the sites chained declustering over ``sites`` gives its copies: the
    ring over their failure domains, rotated to keep the most copies of ``table`` in
    place."""
    n = len(sites)
    ring_ix = choose_ring([domains.get(s, Domain(host=f"site{s}", executor=""))
                           for s in sites], replicas)
    ring = np.asarray([sites[i] for i in ring_ix], dtype=np.int64)
    q = np.arange(partitions)[:, None]
    r = np.arange(replicas)[None, :]
    best: list[set[int]] = []
    best_kept = -1
    for o in range(n):
        placed = ring[(q + r + o) % n]  # [P, R]
        kept = sum(int(np.isin(table[p], placed[p]).sum()) for p in range(partitions))
        if kept > best_kept:
            best_kept, best = kept, [set(map(int, row)) for row in placed]
    return best


def plan_moves(table: np.ndarray, target: Sequence[set[int]]) -> list[tuple[int, int, int]]:
    """``(q, c, dst)``: copy c of q to ``dst``, for every copy whose site is not in its
    partition's target set, each to a target site the partition has no copy on. A copy on a
    failed site moves like any other (it is rebuilt at the destination). Every partition's
    first move comes before any second one: a group of moves takes different partitions."""
    rounds: list[list[tuple[int, int, int]]] = []
    for p, want in enumerate(target):
        row = [int(s) for s in table[p]]
        have = {s for s in row if s != NOWHERE}
        missing = sorted(want - have)
        movers = [c for c, s in enumerate(row) if s != NOWHERE and s not in want]
        for i, (c, dst) in enumerate(zip(movers, missing, strict=False)):
            if i == len(rounds):
                rounds.append([])
            rounds[i].append((p, c, dst))
    return [m for r in rounds for m in r]
