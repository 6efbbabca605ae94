"""The run's options are checked before anything starts: a bad one fails fast with a message
that says what to change."""

from __future__ import annotations

import pytest

from sparkflux.dataflow.placement import Layout
from sparkflux.operators.base import PlanError
from sparkflux.options import replicas_option


def test_replicas_default_to_two_with_flux_and_one_without() -> None:
    assert replicas_option("flux", None, 4) == 2
    assert replicas_option("none", None, 4) == 1
    assert replicas_option("flux", 3, 5) == 3


@pytest.mark.parametrize("ha,replicas,sites,message", [
    ("none", 2, 4, "--replicas needs --ha flux"),
    ("flux", 1, 4, "for one copy, use --ha none"),
    ("flux", 5, 4, "use --sites >= 5"),
])
def test_a_bad_replica_count_says_what_to_change(ha: str, replicas: int, sites: int,
                                                 message: str) -> None:
    with pytest.raises(PlanError, match=message):
        replicas_option(ha, replicas, sites)


def test_chained_declustering_with_three_replicas() -> None:
    lay = Layout(5, 10, 3)
    assert [lay.site_of(7, r) for r in range(3)] == [2, 3, 4]
    assert lay.others(7, 1) == [2, 4]
    with pytest.raises(PlanError, match="two replicas would be on site 4"):
        lay.move(7, 0, 4)
    lay.move(7, 0, 0)
    assert lay.hosted(0)[7] == 0
    with pytest.raises(PlanError, match="use --sites >= 3"):
        Layout(2, 4, 3)
