"""The load-balancing round as a table (thesis §4.4 and ch. 5: collection and movement phases).

Everything that moves a round from one phase to the next lives here; the controller feeds it
events and carries out the actions it names (``Controller._round``). The rules:

1. ``wait``: no round runs. When the next round is due (``due``: the collection interval
   after the last one ended) the controller asks every live site for its counters
   (``collect``): the round's *baseline*.
2. ``baseline`` --every live site's sample in (``sampled``)--> ``collect``: the baseline is
   pooled (``pool``: the oldest taken in the last ``window_s`` seconds under the same
   placement) and the collection phase runs for ``delta`` seconds.
3. ``collect`` --``due``--> ``end``: the counters again (``collect``).
4. ``end`` --``sampled``--> the movement phase is planned (``plan``): the hill-climbing
   policy's moves from the utilisation between the two samples. None (``no-moves``): back to
   ``wait``, the next round sooner (``shorten``: delta halved, down to ``delta_min``). Some
   (``planned``): ``moving`` (``move``: the moves start as a group).
5. ``moving`` --the group's last move folded in (``moved``)--> ``wait``, the next collection
   phase as long as the movement took (``lengthen``).
6. A failure in any phase ends the round at once (``abandon``: a new round number, so late
   samples of this one are stale; planned balance moves dropped); recovery comes first.
7. A sample in a phase that waits for none (a slow reply after its phase moved on) changes
   nothing.

Any (phase, event) pair missing from the table is impossible: ``RoundError`` names the
round, the phase and the event.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition


class RoundError(ProtocolError):
    """An impossible transition of a balancing round."""


class Phase(StrEnum):
    WAIT = "wait"
    BASELINE = "baseline"
    COLLECT = "collect"
    END = "end"
    MOVING = "moving"


class Ev(Enum):
    DUE = "due"
    SAMPLED = "sampled"
    NO_MOVES = "no-moves"
    PLANNED = "planned"
    MOVED = "moved"
    FAILURE = "failure"


W, B, C, E, M = Phase.WAIT, Phase.BASELINE, Phase.COLLECT, Phase.END, Phase.MOVING

ROUND_TRANSITIONS: dict[tuple[Phase, Ev], tuple[Phase, tuple[str, ...]]] = {
    (W, Ev.DUE): (B, ("collect",)),
    (B, Ev.SAMPLED): (C, ("pool",)),
    (C, Ev.DUE): (E, ("collect",)),
    (E, Ev.SAMPLED): (E, ("plan",)),
    (E, Ev.NO_MOVES): (W, ("shorten",)),
    (E, Ev.PLANNED): (M, ("move",)),
    (M, Ev.MOVED): (W, ("lengthen",)),
    (W, Ev.FAILURE): (W, ("drop-moves",)),
    **{(p, Ev.FAILURE): (W, ("abandon", "drop-moves")) for p in (B, C, E, M)},
    **{(p, Ev.SAMPLED): (p, ()) for p in (W, C, M)},  # rule 7
}


def step(round_no: int, phase: Phase, event: Ev) -> tuple[Phase, tuple[str, ...]]:
    """The next phase and the actions of ``event`` in ``phase``."""
    return transition(ROUND_TRANSITIONS, phase, event, RoundError,
                      f"balancing round {round_no}")
