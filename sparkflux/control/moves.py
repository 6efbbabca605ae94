"""A move's life as a table (unified Flux, thesis ch. 5; made before it breaks).

Everything that moves a move from one phase to the next lives here; the controller feeds it
events and carries out the actions it names (``Controller._move_step``). The rules:

1. A move of a live copy is made before it breaks: the new copy is built in the partition's
   free column. ``applying`` (every live site applies the ``move``) --``confirmed``-->
   ``building`` (its catch-ups run, bottom-up) --``built`` (the last stage's ``cu-done``)-->
   ``folding`` --every live party has folded it in (``folded``)--> ``done``, retiring the old
   copy (``retire-old``).
2. The old copy's site fails (``source-failed``): the old copy is retired at once (the slot's
   recovery must not rebuild it) and the build goes on, in the same phase with the old copy
   gone (``... (old gone)``), where nothing waits for the fold-in: ``built`` ends the move.
3. The destination, or a site the new copy is being built from, fails while the old copy
   lives (``destination-failed``, ``builder-failed``): the build is given up and its partial
   copy retired (``give-up``); the old copy stays.
4. With the old copy gone, the destination failing leaves the new copy to the destination
   slot's recovery (``drop``); a builder failing changes nothing here (a catch-up in flight
   from it is orphaned by the controller, as any recovery's is).
5. A copy whose site has failed is rebuilt in its own column (``rebuild``: recovery onto the
   survivors): there is nothing to retire, so rule 2 cannot happen and rule 4 applies.
6. A move that is ``done`` or ``given up`` waits for its group to end; failures change
   nothing for it.

Any (phase, event) pair missing from the table is impossible: ``MoveError`` names the move,
the phase and the event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition


class MoveError(ProtocolError):
    """An impossible transition of a move."""


class MovePhase(StrEnum):
    APPLYING = "applying"
    BUILDING = "building"
    FOLDING = "folding"
    APPLYING_ALONE = "applying (old gone)"
    BUILDING_ALONE = "building (old gone)"
    REBUILD_APPLYING = "rebuild: applying"
    REBUILDING = "rebuild: building"
    DONE = "done"
    GIVEN_UP = "given up"


class MoveEv(Enum):
    CONFIRMED = "confirmed"
    BUILT = "built"
    FOLDED = "folded"
    SOURCE_FAILED = "source-failed"
    DESTINATION_FAILED = "destination-failed"
    BUILDER_FAILED = "builder-failed"


P, E = MovePhase, MoveEv
_FAILURES = (E.SOURCE_FAILED, E.DESTINATION_FAILED, E.BUILDER_FAILED)

MOVE_TRANSITIONS: dict[tuple[MovePhase, MoveEv], tuple[MovePhase, tuple[str, ...]]] = {
    # rule 1
    (P.APPLYING, E.CONFIRMED): (P.BUILDING, ()),
    (P.BUILDING, E.BUILT): (P.FOLDING, ()),
    (P.FOLDING, E.FOLDED): (P.DONE, ("retire-old",)),
    # rule 2
    (P.APPLYING, E.SOURCE_FAILED): (P.APPLYING_ALONE, ("retire-old",)),
    (P.BUILDING, E.SOURCE_FAILED): (P.BUILDING_ALONE, ("retire-old",)),
    (P.FOLDING, E.SOURCE_FAILED): (P.DONE, ("retire-old",)),
    (P.APPLYING_ALONE, E.CONFIRMED): (P.BUILDING_ALONE, ()),
    (P.BUILDING_ALONE, E.BUILT): (P.DONE, ()),
    # rule 3
    **{(p, ev): (P.GIVEN_UP, ("give-up",))
       for p in (P.APPLYING, P.BUILDING, P.FOLDING)
       for ev in (E.DESTINATION_FAILED, E.BUILDER_FAILED)},
    # rules 4 and 5
    (P.REBUILD_APPLYING, E.CONFIRMED): (P.REBUILDING, ()),
    (P.REBUILDING, E.BUILT): (P.DONE, ()),
    **{(p, E.DESTINATION_FAILED): (P.GIVEN_UP, ("drop",))
       for p in (P.APPLYING_ALONE, P.BUILDING_ALONE, P.REBUILD_APPLYING, P.REBUILDING)},
    **{(p, E.BUILDER_FAILED): (p, ())
       for p in (P.APPLYING_ALONE, P.BUILDING_ALONE, P.REBUILD_APPLYING, P.REBUILDING)},
    # rule 6
    **{(p, ev): (p, ()) for p in (P.DONE, P.GIVEN_UP) for ev in _FAILURES},
}

# phases in which the move still waits for something (its group cannot end)
RUNNING = frozenset({P.APPLYING, P.BUILDING, P.FOLDING, P.APPLYING_ALONE, P.BUILDING_ALONE,
                     P.REBUILD_APPLYING, P.REBUILDING})


def move_step(epoch: int, phase: MovePhase, event: MoveEv
              ) -> tuple[MovePhase, tuple[str, ...]]:
    """The next phase and the actions of ``event`` in ``phase``."""
    return transition(MOVE_TRANSITIONS, phase, event, MoveError, f"move {epoch}")


@dataclass(slots=True, kw_only=True)
class MoveRecord:
    """One move of copy r of partition q from site ``src`` to ``dst`` (thesis ch. 5), from
    its start to the fold-in of its last stage: the controller's bookkeeping while it runs
    (``Controller.moving``) and the run's record once done (``Controller.moves``, reported by
    ``runtime/reports.move_report``). Mutable: confirmations and catch-ups fill it in.
    Times are the controller's clock (``Controller.now``).

    Make before break: the new copy is built in column ``c``, q's free one, while copy r keeps
    running; r is retired once c is folded in. A move whose source is already gone (recovery
    onto the survivors) rebuilds the copy in its own column (``c == r``), nothing to retire."""

    q: int
    r: int
    src: int
    dst: int
    epoch: int  # the move's epoch: the new copy's incarnation
    reason: str  # "balance", "recovery" or "domain"
    start: float
    survivor: int  # the copy of q the move named to rebuild the new copy from
    left: int  # stages still to be caught up
    c: int = -1  # the column the new copy is built in (-1: r's own)
    nbytes: int = 0  # state moved by its catch-ups (``CuDone.nbytes``)
    confirmed: float | None = None  # every live site had applied it (``moved``)
    end: float | None = None  # its last stage folded in
    retired: float | None = None  # the old copy was retired (make before break)
    abandoned: str | None = None  # why the new copy was given up (a failure during the build)
    # copies of q lost to failures while the move ran: the move is not what took them
    lost_to_failures: int = 0
    # seconds during which q had fewer complete copies than when the move started (at most
    # --replicas), failures aside: what the move itself cost the partition's safety (0 for
    # make before break)
    baseline: int = 0
    short_s: float = 0.0
    short_since: float | None = None
    # (party, consumer stage) that have folded the new copy in (``folded``): the old copy is
    # retired once every live one has
    folded: set[tuple[int, int]] = field(default_factory=set)
    phase: MovePhase = MovePhase.APPLYING  # its place in ``control/moves.py``'s table

    def __post_init__(self) -> None:
        if self.c < 0:
            self.c = self.r
        if self.c == self.r:
            self.phase = MovePhase.REBUILD_APPLYING
