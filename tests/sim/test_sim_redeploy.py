"""Re-deploying copies when the measured latencies change (``control/redeploy.py``) in the
deterministic simulator: the copies are placed by latency at view 1, every site probes its
links (``protocol/site_boundary.py`` rule 6), and the balancing rounds re-deploy by what
they measured.

The matrix (``test_sim_wan``'s, ten times longer, so that the links' latency stands out
of the queueing a busy simulated link adds): at first the driver and sites 0 and 1 are
near each other, sites 2 and 3 far. At step ``CHANGE`` the driver's region moves next to
sites 1 and 2; site 0 goes far. The partitions whose copies are on sites 0 and 3 then have
no copy near the driver, until a re-deployment gives each of them one on site 1 or 2.

Seeds, racing replicas, two copies (Flux-HA is not re-deployed: its egress reads column 0's
copy, which a move does not change):

- the output equals the run without replication, row for row; copies moved for latency
  (``move_reasons``), and at the end every partition has a copy near the driver; under
  Flux-HA the same schedules move nothing;
- a site crashes at a random step after the change (often during the re-deployment's
  moves), with and without a standby: the output is still exact;
- a mutation: a controller that takes the placement's matrix for the measured one (the
  sites' reports ignored) never re-deploys; the seed that catches it passes unmutated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control import balancing
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import hunt_order, seeds

SITES, PARTITIONS, EVENTS = 4, 8, 1200
CHANGE = 3000  # the step the latencies change at
PACE = 400  # steps between input batches: the input flows long after the change


def _matrix(region: list[int]) -> np.ndarray:
    """One-way latency in steps between the driver (index 0) and every site, by region."""
    return np.array([[0 if a == b else 10 if region[a] == region[b] else 300 * (
        1 + (region[a] != 0) * (region[b] != 0) + abs(region[a] - region[b]))
        for b in range(SITES + 1)] for a in range(SITES + 1)])


BEFORE = _matrix([0, 0, 0, 1, 2])  # the driver, sites 0 and 1 near; 2 and 3 far
AFTER = _matrix([0, 1, 0, 0, 2])  # the driver, sites 1 and 2 near; 0 and 3 far
NEAR_AFTER = (1, 2)


def plan() -> Any:
    return tiny_plan(events=EVENTS, sites=SITES, partitions=PARTITIONS)[0]


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table]:
    _, batches = tiny_plan(events=EVENTS, sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(), batches, 0, FailurePlan(), replicas=1).output
    assert expected.num_rows > 0
    return batches, expected


def run(base: Any, seed: int, race: bool, fp: FailurePlan | None = None) -> SimResult:
    batches, expected = base
    return check(plan, batches, seed, fp or FailurePlan(), expected=expected, replicas=2, race=race,
                 wan=BEFORE, wan_changes=((CHANGE, AFTER),), placement="latency",
                 balance=True, pace=PACE, max_steps=200_000)


def redeployed(res: SimResult) -> bool:
    """Copies moved for latency, and every partition ends with a copy near the driver."""
    near = {q for s in NEAR_AFTER for q in res.hosted.get(s, [])}
    return "latency" in res.move_reasons and near == set(range(PARTITIONS))


@pytest.mark.parametrize("race", [False, True], ids=["flux", "race"])
def test_copies_follow_the_latencies_the_sites_measure(base: Any, race: bool) -> None:
    failed = []
    for seed in range(seeds(12)):
        try:
            res = run(base, seed, race)
        except Violation as e:
            failed.append(str(e))
            continue
        if race and not redeployed(res):
            failed.append(f"seed {seed}: not re-deployed (moves {res.moves}, hosted "
                          f"{res.hosted})")
        if not race and res.moves:
            failed.append(f"seed {seed}: Flux-HA's copies moved ({res.moves})")
    assert not failed, "\n".join(failed[:5])


@pytest.mark.parametrize("race", [True], ids=["race"])
def test_a_crash_during_the_redeployment(base: Any, race: bool) -> None:
    failed = []
    for seed in range(seeds(24)):
        rng = np.random.default_rng((seed, 61))
        victim = int(rng.integers(SITES))
        at = CHANGE + int(rng.integers(500, 8000))
        standby = (at + int(rng.integers(200, 3000)),) if seed % 2 else ()
        fp = FailurePlan(crashes=((victim, at),), standbys=standby)
        try:
            run(base, seed, race, fp)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_mutation_measures_ignored_is_caught(base: Any, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setattr(balancing, "measured_matrix", lambda link_ms, placed_by: placed_by)
    caught = next((seed for seed in hunt_order(seeds(12), 0)
                   if not redeployed(run(base, seed, race=True))), None)
    assert caught is not None, "no seed caught a controller that ignores the measures"
    monkeypatch.undo()
    assert redeployed(run(base, caught, race=True))
