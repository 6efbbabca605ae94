"""The balancing round's table (``control/rounds.py``): every row, and the impossible ones."""

from __future__ import annotations

import pytest

from sparkflux.control.rounds import ROUND_TRANSITIONS, Ev, Phase, RoundError, step


def test_a_round_with_moves_and_one_without() -> None:
    walk = [(Ev.DUE, Phase.BASELINE, ("collect",)), (Ev.SAMPLED, Phase.COLLECT, ("pool",)),
            (Ev.DUE, Phase.END, ("collect",)), (Ev.SAMPLED, Phase.END, ("plan",)),
            (Ev.PLANNED, Phase.MOVING, ("move",)), (Ev.MOVED, Phase.WAIT, ("lengthen",))]
    phase = Phase.WAIT
    for event, nxt, actions in walk:
        phase, got = step(1, phase, event)
        assert (phase, got) == (nxt, actions)
    assert step(2, Phase.END, Ev.NO_MOVES) == (Phase.WAIT, ("shorten",))


@pytest.mark.parametrize("phase", list(Phase))
def test_a_failure_ends_every_phase(phase: Phase) -> None:
    nxt, actions = step(3, phase, Ev.FAILURE)
    assert nxt is Phase.WAIT and actions[-1] == "drop-moves"
    assert ("abandon" in actions) == (phase is not Phase.WAIT)  # a new round number


def test_impossible_transitions_name_the_round_phase_and_event() -> None:
    impossible = [(p, e) for p in Phase for e in Ev if (p, e) not in ROUND_TRANSITIONS]
    assert (Phase.WAIT, Ev.MOVED) in impossible and (Phase.MOVING, Ev.DUE) in impossible
    for p, e in impossible:
        with pytest.raises(RoundError, match=f"balancing round 7: no transition from "
                                             f"{p.value} on {e.value}"):
            step(7, p, e)
