"""The consistency machine of eventual consistency (``protocol/consistency.py``): its table,
exactly, and the episode's bookkeeping (time per state, tentative numbering, which states
send new input tentatively per mode)."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.protocol.consistency import (
    HEAL,
    MODES,
    OPEN,
    RECONCILE,
    SEND,
    TENTATIVE_BASE,
    TRANSITIONS,
    ConsistencyError,
    Episode,
    Ev,
    Eventual,
    State,
    silent,
)


def test_the_table_is_borealis_state_machine() -> None:
    """STABLE -blocked-> UPSTREAM_FAILURE -healed-> STABILIZATION -caught-up-> STABLE, and
    a failure while stabilizing goes back to UPSTREAM_FAILURE in the same episode."""
    assert TRANSITIONS[(State.STABLE, Ev.BLOCKED)] == (State.UPSTREAM_FAILURE, (OPEN, SEND))
    assert TRANSITIONS[(State.UPSTREAM_FAILURE, Ev.BLOCKED)] == (State.UPSTREAM_FAILURE,
                                                                 (SEND,))
    assert TRANSITIONS[(State.UPSTREAM_FAILURE, Ev.HEALED)] == (State.STABILIZATION,
                                                                (HEAL, SEND))
    assert TRANSITIONS[(State.STABILIZATION, Ev.BLOCKED)] == (State.UPSTREAM_FAILURE, (SEND,))
    assert TRANSITIONS[(State.STABILIZATION, Ev.CAUGHT_UP)] == (State.STABLE, (RECONCILE,))
    # every pair is there: nothing the ingress can see is impossible
    assert {(s, e) for s in State for e in Ev} == set(TRANSITIONS)


def test_an_episode_walks_the_machine_and_times_its_states() -> None:
    ep = Episode(Eventual(1.0))
    assert ep.on(Ev.HEALED, 0.5) == ()  # nothing to heal from
    assert ep.on(Ev.BLOCKED, 1.0) == (OPEN, SEND)
    assert ep.on(Ev.BLOCKED, 2.0) == (SEND,)
    assert ep.on(Ev.HEALED, 5.0) == (HEAL, SEND)
    assert ep.on(Ev.CAUGHT_UP, 6.5) == (RECONCILE,)
    assert ep.state is State.STABLE
    assert ep.history == [(1.0, "upstream-failure"), (5.0, "stabilization"), (6.5, "stable")]
    # from the first event on: stable 0.5-1.0 and 6.5-7.0
    assert ep.time_in(7.0) == {"stable": 1.0, "upstream-failure": 4.0, "stabilization": 1.5}


@pytest.mark.parametrize("mode", MODES)
def test_which_states_send_new_input_tentatively(mode: str) -> None:
    ep = Episode(Eventual(1.0, mode))  # type: ignore[arg-type]
    assert not ep.sends()
    ep.on(Ev.BLOCKED, 0.0)
    assert ep.sends()
    ep.on(Ev.HEALED, 1.0)
    assert ep.sends() == (mode != "suspend")  # suspend: nothing new while reconciling


def test_tentative_numbers_are_apart_from_stable_ones() -> None:
    ep = Episode(Eventual(1.0))
    assert ep.number(3).tolist() == [TENTATIVE_BASE, TENTATIVE_BASE + 1, TENTATIVE_BASE + 2]
    assert ep.number(0).size == 0
    assert ep.number(1).tolist() == [TENTATIVE_BASE + 3]


def test_a_missing_pair_is_a_protocol_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(TRANSITIONS, (State.STABLE, Ev.CAUGHT_UP))
    with pytest.raises(ConsistencyError, match="no transition from stable on caught-up"):
        Episode(Eventual(1.0)).on(Ev.CAUGHT_UP, 0.0)


def test_silent_sources_are_the_open_ones_unheard_for_the_bound() -> None:
    heard = np.array([0.0, 9.5, 1.0, np.nan])
    ended = np.array([False, False, True, False])
    assert silent(heard, ended, 10.0, 2.0) == frozenset({0})  # 2 ended, 3 not started
