"""Each stage's consistency state (``control/stage_states.py``), driven with exact
observations: three stages follow the input into upstream failure; after the heal each
stabilizes until the lowest frontier over the live sites passes the heal point, the first
stage before the last; the reconciliation makes every stage stable."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.control.stage_states import StageStates
from sparkflux.model.progress import END_OF_STREAM
from sparkflux.protocol.consistency import State

S, UF, ST = State.STABLE, State.UPSTREAM_FAILURE, State.STABILIZATION


def f(*sn: int) -> np.ndarray:
    return np.array(sn, dtype=np.int64)


def test_stages_stabilize_in_turn_down_the_chain() -> None:
    st = StageStates(3)
    st.observe(0.0, S, None, [f(5, 5, 5)])
    st.observe(1.0, UF, None, [f(10, 9, 8), f(10, 9, 8)])
    assert st.state == [UF, UF, UF]
    st.observe(4.0, ST, 100, [f(50, 20, 10), f(120, 20, 10)])
    assert st.state == [ST, ST, ST]  # site 0's copies of stage 0 have not passed 100 yet
    st.observe(4.5, ST, 100, [f(100, 60, 10), f(120, END_OF_STREAM, 10)])
    assert st.state == [S, ST, ST]
    # a site that no longer reports a frontier for a stage (a late heartbeat) cannot put a
    # stage back: a stage once past the heal point stays stable until the reconciliation
    st.observe(5.0, ST, 100, [f(90, 100, 40)])
    assert st.state == [S, S, ST]
    st.observe(6.0, S, None, [f(200, 200, 200)])
    assert st.state == [S, S, S]
    got = st.time_in(7.0)
    assert got[0] == pytest.approx({"stable": 1.0 + 1.5 + 1.0, "upstream-failure": 3.0,
                                    "stabilization": 0.5})
    assert got[1] == pytest.approx({"stable": 1.0 + 1.0 + 1.0, "upstream-failure": 3.0,
                                    "stabilization": 1.0})
    assert got[2] == pytest.approx({"stable": 1.0 + 1.0, "upstream-failure": 3.0,
                                    "stabilization": 2.0})


def test_a_failure_during_stabilization_puts_every_stage_back_into_upstream_failure() -> None:
    st = StageStates(2)
    st.observe(0.0, UF, None, [])
    st.observe(1.0, ST, 10, [f(10, 3)])
    assert st.state == [S, ST]
    st.observe(2.0, UF, 10, [f(12, 3)])
    assert st.state == [UF, UF]
    st.observe(3.0, ST, 30, [f(12, 3)])  # a new heal point: nobody has passed it
    assert st.state == [ST, ST]
    st.observe(3.5, ST, 30, [])  # no site reports: nothing is known to have passed
    assert st.state == [ST, ST]
    assert st.time_in(4.0)[0] == pytest.approx(
        {"stable": 1.0, "upstream-failure": 2.0, "stabilization": 1.0})
