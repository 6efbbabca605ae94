"""The rescale's table and the placement it moves to (``control/rescale.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.control.rescale import (
    Ev,
    Phase,
    RescaleError,
    plan_moves,
    rescale_step,
    target_sets,
)
from sparkflux.dataflow.placement import NOWHERE, Domain, Layout


def test_the_table_names_each_rule_and_refuses_what_cannot_happen() -> None:
    assert rescale_step(Phase.GROW, Ev.STARTED) == (Phase.MOVING, ())
    assert rescale_step(Phase.GROW, Ev.WAITED) == (Phase.MOVING, ("vacate-unstarted",))
    assert rescale_step(Phase.MOVING, Ev.OFF_TARGET) == (Phase.MOVING, ("plan-moves",))
    assert rescale_step(Phase.MOVING, Ev.PLACED) == (Phase.DONE, ("retire-surplus", "finish"))
    with pytest.raises(RescaleError, match="no transition from grow on placed"):
        rescale_step(Phase.GROW, Ev.PLACED)
    with pytest.raises(RescaleError, match="from done on off-target"):
        rescale_step(Phase.DONE, Ev.OFF_TARGET)


def test_the_same_sites_need_no_move() -> None:
    table = Layout(4, 16, 2).table()
    assert plan_moves(table, target_sets(16, [0, 1, 2, 3], {}, 2, table)) == []


@pytest.mark.parametrize(("before", "after"), [(4, 6), (6, 3), (4, 3), (3, 8), (5, 2)])
def test_moves_reach_chained_declustering_and_never_meet_another_copy(
        before: int, after: int) -> None:
    table = np.array([[q % before, (q + 1) % before, NOWHERE] for q in range(16)])
    sites = list(range(after))
    want = target_sets(16, sites, {}, 2, table)
    moves = plan_moves(table, want)
    seen = set()
    for q, c, dst in moves:
        assert dst not in table[q], (q, c, dst)  # never onto a copy of its own partition
        table[q, c] = dst
        assert (q, c) not in seen
        seen.add((q, c))
    for q in range(16):
        assert {int(s) for s in table[q] if s != NOWHERE} == want[q]
        assert len(want[q]) == 2 and want[q] <= set(sites)
    per = np.bincount(table[table != NOWHERE], minlength=after)[:after]
    assert per.max() - per.min() <= 2  # spread evenly
    # each partition's first move before any second: a group takes different partitions
    firsts = [q for q, _, _ in moves[:len({q for q, _, _ in moves})]]
    assert len(firsts) == len(set(firsts))


def test_the_target_ring_keeps_copies_in_different_executors() -> None:
    domains = {s: Domain(host="h", executor=f"e{s % 2}") for s in range(6)}
    table = np.array([[q % 4, (q + 1) % 4, NOWHERE] for q in range(12)])
    for want in target_sets(12, list(range(6)), domains, 2, table):
        a, b = sorted(want)
        assert domains[a].executor != domains[b].executor
