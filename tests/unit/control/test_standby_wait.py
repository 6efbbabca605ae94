"""How long recovery waits for a standby (``control/standby_wait.py``): the largest of the
floor, the measured start, adoption and executor start, capped; a user's wait is fixed."""

from __future__ import annotations

import pytest

from sparkflux.control import standby_wait as sw
from sparkflux.control.standby_wait import standby_wait


def test_the_constants() -> None:
    assert (sw.FLOOR_S, sw.START_FACTOR, sw.ADOPTION_FACTOR, sw.CAP_S) == (5.0, 2.0, 1.5, 60.0)


@pytest.mark.parametrize(("kwargs", "wait"), [
    ({}, 5.0),  # nothing measured yet: the floor
    ({"start_s": 1.0}, 5.0),  # a fast start stays at the floor
    ({"start_s": 4.0}, 8.0),  # twice the slowest start
    ({"start_s": 4.0, "adoptions_s": [3.0, 7.0]}, 10.5),  # 1.5 x the slowest adoption
    ({"start_s": 4.0, "adoptions_s": (2.0,)}, 8.0),  # the start still wins
    ({"start_s": 2.0, "executor_start_s": 6.0}, 12.0),  # 1.5 x (executor + sites' start)
    ({"executor_start_s": 6.0}, 9.0),  # no sites' start measured: the executor's alone
    ({"start_s": 100.0}, 60.0),  # capped
    ({"adoptions_s": [50.0]}, 60.0),
])
def test_the_measured_wait(kwargs: dict, wait: float) -> None:
    assert standby_wait(None, **kwargs) == wait


def test_a_users_wait_is_the_wait_whatever_was_measured() -> None:
    assert standby_wait(2.0, start_s=40.0, adoptions_s=[30.0], executor_start_s=9.0) == 2.0
    assert standby_wait(120.0) == 120.0  # not capped either
    assert standby_wait(0.0) == 0.0
