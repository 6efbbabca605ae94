"""Order-insensitive stages of racing copies run their rows as they arrive (the racing-replicas
paper's Algorithms 1 and 2) in the deterministic simulator.

``tiny_relay_plan`` puts maps and a filter in stages of their own after exchanges: racing
copies run them without the SN-ordered merge (``PhysicalPlan.arrival``), so the streams they
send, to the sessions' stage and to the egress, come out of SN order and carry rows above
their claims. Their consumers filter duplicates per row (``ConsumerSet._first_arrivals``),
and the sessions' stage sorts what the claims cover (Algorithm 4). Seeds:

- without failures, two to four copies: the output equals the run without replication, row
  for row; rows did run above their frontier; ``arrival_order`` off (no ``--arrival-order``)
  gives the same output with none early;
- K - 1 sites crash at random steps, with and without standbys that catch the copies up
  again (a snapshot carries the keys its copy passed above its progress);
- the egress's ``--unordered-output`` over a stream out of order;
- a copy hung past the timeouts;
- a mutation: a filter that forgets the keys it passed is caught, and the seed that catches
  it passes unmutated.

A snapshot's keys (``ConsumerSnapshot.seen``) are checked by hand in
``tests/unit/protocol/test_race.py``: here the catch-ups of the later stages run one after
another and end after the tiny input does, when every claim covers every row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.seen_keys import SeenKeys
from sparkflux.sim.run import FailurePlan, SimClock, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_relay_plan
from tests.support.seeds import hunt_order, seeds

from .test_sim_race import crashes as race_crashes
from .test_sim_race import survive_crashes

SITES, PARTITIONS = 5, 10
CLOCK = SimClock()


def plan(arrival_order: bool = True) -> Any:
    return tiny_relay_plan(sites=SITES, partitions=PARTITIONS, arrival_order=arrival_order)[0]


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table, dict[int, int]]:
    _, batches = tiny_relay_plan(sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(), batches, 0, FailurePlan(), replicas=1).output
    steps = {k: simulate(plan(), batches, 0, FailurePlan(), replicas=k, race=True).steps
             for k in (2, 3)}
    assert expected.num_rows > 0
    return batches, expected, steps


def crashes(seed: int, k: int, steps: int, standbys: bool) -> FailurePlan:
    """``test_sim_race``'s crash plans (K - 1 sites, standbys after the last), drawn apart."""
    return race_crashes(seed, k, steps, standbys, salt=53)


def run(base: Any, seed: int, k: int, fp: FailurePlan, **kw: Any) -> SimResult:
    batches, expected, _ = base
    return check(plan, batches, seed, fp, expected=expected, replicas=k, race=True, **kw)


def test_the_arrival_stages_are_the_order_insensitive_ones() -> None:
    p = plan()
    assert p.arrival(race=True) == (True, False, True, False, True)
    assert p.arrival(race=False) == (False,) * 5
    assert plan(arrival_order=False).arrival(race=True) == (False,) * 5


def test_rows_run_as_they_arrive_and_the_output_is_the_unreplicated_one(base: Any) -> None:
    batches, expected, _ = base
    for k in (2, 3, 4):
        for seed in range(seeds(12)):
            res = run(base, seed, k, FailurePlan())
            assert res.arrived_early > 0, (k, seed)
            assert res.raced >= (k - 1) * expected.num_rows, (k, seed, res.raced)
    merged = check(lambda: plan(arrival_order=False), batches, 0, FailurePlan(),
                   expected=expected, race=True)
    assert merged.arrived_early == 0


@pytest.mark.parametrize("standbys", [False, True], ids=["no-standby", "standbys"])
@pytest.mark.parametrize("k", [2, 3])
def test_any_k_minus_one_sites_may_crash(base: Any, k: int, standbys: bool) -> None:
    _, _, steps = base
    failed = survive_crashes(seeds(80), k, standbys,
                             lambda seed: crashes(seed, k, steps[k], standbys),
                             lambda seed, fp: run(base, seed, k, fp))
    assert not failed, "\n".join(failed[:5])


def test_unordered_output_over_a_stream_out_of_order(base: Any) -> None:
    _, _, steps = base
    failed = []
    for seed in range(seeds(40)):
        fp = crashes(seed, 2, steps[2], standbys=seed % 2 == 0)
        try:
            run(base, seed, 2, fp, unordered=True)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_a_hung_copy_is_raced_past(base: Any) -> None:
    batches, _, _ = base
    paced = simulate(plan(), batches, 0, FailurePlan(), race=True, pace=60, clock=CLOCK).steps
    failed = []
    for seed in range(seeds(40)):
        rng = np.random.default_rng((seed, 59))
        site, at = int(rng.integers(SITES)), int(rng.integers(1, paced // 2))
        n = int(rng.integers(CLOCK.heartbeat_timeout + 50, 3 * CLOCK.heartbeat_timeout))
        standby = (at + n + int(rng.integers(1, 300)),) if seed % 2 else ()
        fp = FailurePlan(hangs=((site, at, n),), standbys=standby)
        try:
            run(base, seed, 2, fp, pace=60, clock=CLOCK)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


# -- mutations ------------------------------------------------------------------------------
def hunt(base: Any, standbys: bool, first: int) -> tuple[int, FailurePlan]:
    """The first seed (from ``first`` on, wrapping round) whose crash plan breaks the run."""
    _, _, steps = base
    for seed in hunt_order(200, first):
        fp = crashes(seed, 2, steps[2], standbys)
        try:
            run(base, seed, 2, fp)
        except Violation:
            return seed, fp
    raise AssertionError("the mutation survived 200 seeds")


def test_mutation_a_filter_that_forgets_what_it_passed_is_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged by the punctuations alone, a row above them that a second copy brings again
    passes twice: out of order, the claims do not say which rows came already."""
    first_arrivals = ConsumerSet._first_arrivals

    def forgetful(self: ConsumerSet, *a: Any) -> Any:
        out = first_arrivals(self, *a)
        self.seen = SeenKeys(self.sender.shape[1])
        return out
    monkeypatch.setattr(ConsumerSet, "_first_arrivals", forgetful)
    seed, fp = hunt(base, False, 0)
    monkeypatch.undo()
    run(base, seed, 2, fp)
