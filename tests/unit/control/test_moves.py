"""A move's table (``control/moves.py``): every rule's rows, and the impossible ones."""

from __future__ import annotations

import re

import pytest

from sparkflux.control.moves import (
    MOVE_TRANSITIONS,
    RUNNING,
    MoveError,
    MoveEv,
    MovePhase,
    move_step,
)

P, E = MovePhase, MoveEv


def walk(phase: MovePhase, *events: MoveEv) -> list[tuple[MovePhase, tuple[str, ...]]]:
    out = []
    for ev in events:
        phase, actions = move_step(1, phase, ev)
        out.append((phase, actions))
    return out


def test_made_before_it_breaks_the_old_copy_goes_last() -> None:
    assert walk(P.APPLYING, E.CONFIRMED, E.BUILT, E.FOLDED) == [
        (P.BUILDING, ()), (P.FOLDING, ()), (P.DONE, ("retire-old",))]


@pytest.mark.parametrize("phase", [P.APPLYING, P.BUILDING, P.FOLDING])
def test_the_old_copys_site_failing_retires_it_once_and_the_build_goes_on(
        phase: MovePhase) -> None:
    nxt, actions = move_step(1, phase, E.SOURCE_FAILED)
    assert actions == ("retire-old",)
    rest = {P.APPLYING: (E.CONFIRMED, E.BUILT), P.BUILDING: (E.BUILT,), P.FOLDING: ()}[phase]
    steps = walk(nxt, *rest)
    assert (steps[-1][0] if steps else nxt) is P.DONE
    assert all(a == () for _, a in steps)  # never retired twice


@pytest.mark.parametrize("phase", [P.APPLYING, P.BUILDING, P.FOLDING])
@pytest.mark.parametrize("event", [E.DESTINATION_FAILED, E.BUILDER_FAILED])
def test_losing_the_build_while_the_old_copy_lives_gives_it_up(
        phase: MovePhase, event: MoveEv) -> None:
    assert move_step(1, phase, event) == (P.GIVEN_UP, ("give-up",))


@pytest.mark.parametrize("phase", [P.APPLYING_ALONE, P.BUILDING_ALONE, P.REBUILD_APPLYING,
                                   P.REBUILDING])
def test_with_no_old_copy_the_new_one_is_kept(phase: MovePhase) -> None:
    assert move_step(1, phase, E.DESTINATION_FAILED) == (P.GIVEN_UP, ("drop",))
    assert move_step(1, phase, E.BUILDER_FAILED) == (phase, ())


def test_a_rebuild_has_nothing_to_retire() -> None:
    assert walk(P.REBUILD_APPLYING, E.CONFIRMED, E.BUILT) == [(P.REBUILDING, ()),
                                                              (P.DONE, ())]
    with pytest.raises(MoveError):
        move_step(1, P.REBUILDING, E.SOURCE_FAILED)


def test_ended_moves_ignore_failures_and_only_running_ones_hold_their_group() -> None:
    for p in (P.DONE, P.GIVEN_UP):
        assert p not in RUNNING
        for ev in (E.SOURCE_FAILED, E.DESTINATION_FAILED, E.BUILDER_FAILED):
            assert move_step(1, p, ev) == (p, ())
    assert set(MovePhase) - {P.DONE, P.GIVEN_UP} == RUNNING


def test_impossible_transitions_name_the_move_phase_and_event() -> None:
    impossible = [(p, e) for p in P for e in E if (p, e) not in MOVE_TRANSITIONS]
    assert (P.APPLYING, E.FOLDED) in impossible and (P.FOLDING, E.BUILT) in impossible
    for p, e in impossible:
        with pytest.raises(MoveError, match=re.escape(f"move 7: no transition from {p.value} "
                                                      f"on {e.value}")):
            move_step(7, p, e)
