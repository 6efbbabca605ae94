"""Time-window aggregates of racing copies fold their input as it arrives (the racing-replicas
paper's Algorithm 3) in the deterministic simulator.

``tiny_arrival_windows_plan``: an identity map in a stage of its own (its stream out of SN
order), then two sliding and tumbling window stages that take their input in arrival order
(``PhysicalPlan.arrival``): they fold rows above their frontier, number each window after
its highest ``(SN, SNM)`` and emit, in SN order, only what their claims cover. A row folded
twice changes a count. Seeds:

- without failures, two to four copies: the output equals the run without replication, row
  for row; windows did fold rows above their frontier; ``arrival_order`` off gives the same
  output with none early;
- K - 1 sites crash at random steps, with and without standbys caught up from a survivor,
  every other seed with the input paced (catch-ups while rows still flow), the others at
  once (rows of a window from several producers in one pass, out of SN order);
- a mutation: a window numbered after the row it folded last, not its highest, is caught,
  and the seed that catches it passes unmutated.

A window stage behind an ordered stream (the top windows, after the hot ones) folds rows
above its frontier, the lowest claim of its streams, but never above their own stream's
claim (a producer that merges sends nothing above its claim): the claims judge its
duplicates, and a rebuilt copy is resent only what its snapshot's claims do not cover. A
filter per row there would change nothing; 200 seeds of it judged by the claims alone
passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.time_window as time_window_mod
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_arrival_windows_plan
from tests.support.seeds import hunt_order, seeds

from .test_sim_race import crashes as race_crashes
from .test_sim_race import survive_crashes

SITES, PARTITIONS, PACE = 5, 10, 20


def plan(arrival_order: bool = True) -> Any:
    return tiny_arrival_windows_plan(sites=SITES, partitions=PARTITIONS,
                                     arrival_order=arrival_order)[0]


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table, dict[int, int]]:
    _, batches = tiny_arrival_windows_plan(sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(), batches, 0, FailurePlan(), replicas=1).output
    steps = {(k, pace): simulate(plan(), batches, 0, FailurePlan(), replicas=k, race=True,
                                 pace=pace).steps for k in (2, 3) for pace in (0, PACE)}
    assert expected.num_rows > 0
    return batches, expected, steps


def crashes(seed: int, k: int, steps: int, standbys: bool) -> FailurePlan:
    """``test_sim_race``'s crash plans (K - 1 sites, standbys after the last), drawn apart."""
    return race_crashes(seed, k, steps, standbys, salt=67)


def pace_of(seed: int) -> int:
    return PACE if seed % 2 else 0


def run(base: Any, seed: int, k: int, fp: FailurePlan, pace: int) -> SimResult:
    batches, expected, _ = base
    return check(plan, batches, seed, fp, expected=expected, replicas=k, race=True, pace=pace)


def test_the_windows_take_arrival_order_and_send_in_sn_order() -> None:
    p = plan()
    assert p.arrival(race=True) == (True, True, True)
    assert p.unordered(race=True) == (True, False, False)
    assert plan(arrival_order=False).arrival(race=True) == (False,) * 3


def test_windows_fold_rows_as_they_arrive_and_the_output_is_the_unreplicated_one(
        base: Any) -> None:
    batches, expected, _ = base
    for k in (2, 3, 4):
        for seed in range(seeds(12)):
            res = run(base, seed, k, FailurePlan(), pace=0)
            assert res.arrived_early > 0, (k, seed)
    merged = check(lambda: plan(arrival_order=False), batches, 0, FailurePlan(),
                   expected=expected, race=True)
    assert merged.arrived_early == 0


@pytest.mark.parametrize("standbys", [False, True], ids=["no-standby", "standbys"])
@pytest.mark.parametrize("k", [2, 3])
def test_any_k_minus_one_sites_may_crash(base: Any, k: int, standbys: bool) -> None:
    _, _, steps = base
    failed = survive_crashes(seeds(60), k, standbys,
                             lambda seed: crashes(seed, k, steps[k, pace_of(seed)], standbys),
                             lambda seed, fp: run(base, seed, k, fp, pace_of(seed)))
    assert not failed, "\n".join(failed[:5])


# -- mutations ------------------------------------------------------------------------------
def hunt(base: Any, standbys: bool, first: int) -> tuple[int, FailurePlan]:
    """The first seed (from ``first`` on, wrapping round) whose crash plan breaks the run."""
    _, _, steps = base
    for seed in hunt_order(200, first):
        fp = crashes(seed, 2, steps[2, pace_of(seed)], standbys)
        try:
            run(base, seed, 2, fp, pace_of(seed))
        except Violation:
            return seed, fp
    raise AssertionError("the mutation survived 200 seeds")


def test_mutation_a_window_numbered_after_its_last_folded_row_is_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of order, the row folded last is not the highest: the copies number a window
    differently, and the egress takes the first."""
    monkeypatch.setattr(time_window_mod, "sort_by_sn", lambda b: b)
    monkeypatch.setattr(time_window_mod, "after", lambda sn, *_: np.ones(sn.size, dtype=bool))
    seed, fp = hunt(base, False, 0)
    monkeypatch.undo()
    run(base, seed, 2, fp, pace_of(seed))

