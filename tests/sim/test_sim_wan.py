"""Wide-area links in the deterministic simulator (``wan``: a one-way latency in steps per
pair of nodes, plus a random jitter up to a quarter of it), with the copies placed by
chained declustering or by latency (``--placement latency``, ``dataflow/deployment.py``).

The driver and sites 0 and 1 are near each other, sites 2 and 3 in two far regions. Seeds:

- racing replicas and Flux-HA, two copies, both placements, through a random crash and its
  recovery (``test_sim_catchup.plan_for``'s schedules: a standby before or after the crash,
  a standby killed while catching up, a second crash of a site that shares no partition
  with the first, under the placement in use): the output equals the failure-free run
  without replication, row for row;
- three racing copies placed by latency, two sites crashing;
- a mutation: sites that ignore the table the view carries (they place by the ring, the
  driver by latency) is caught, and the seed that catches it passes unmutated;
- ``--unordered-output``: the egress hands rows on as they pass its filter; the output, put
  in SN order, equals the run without replication through crashes with flux and race, and it
  did arrive out of order; an egress that hands rows on early but keeps them pending (each
  row handed on again at the next frame) is caught.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.deployment import deploy
from sparkflux.dataflow.placement import Layout
from sparkflux.protocol import site_boundary
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.site_boundary import SiteBoundary
from sparkflux.sim.run import FailurePlan, Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import hunt_order, seeds

from .test_sim_catchup import plan_for

SITES, PARTITIONS = 4, 8
# one-way latency in steps: the driver and sites 0, 1 in one region, site 2 and site 3 far
REGION = [0, 0, 0, 1, 2]
WAN = np.array([[0 if a == b else 1 if REGION[a] == REGION[b] else 30 * (1 + (REGION[a] != 0)
                 * (REGION[b] != 0) + abs(REGION[a] - REGION[b]))
                 for b in range(SITES + 1)] for a in range(SITES + 1)])


def plan() -> Any:
    return tiny_plan(sites=SITES, partitions=PARTITIONS)[0]


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table, int]:
    _, batches = tiny_plan(sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(), batches, 0, FailurePlan(), replicas=1).output
    steps = simulate(plan(), batches, 0, FailurePlan(), replicas=2, race=True, wan=WAN).steps
    assert expected.num_rows > 0
    return batches, expected, steps


def sharing(placement: str) -> set[frozenset[int]]:
    """The pairs of sites that hold copies of one partition at the start."""
    p = plan()
    table = (deploy(WAN.tolist(), PARTITIONS, 2, len(p.stages) - 1)
             if placement == "latency" else Layout(SITES, PARTITIONS, 2).table()[:, :2])
    return {frozenset(int(x) for x in row) for row in table}


def schedule(seed: int, steps: int, placement: str) -> FailurePlan:
    """``plan_for``'s schedule; its second crash (a site two slots on, which shares no
    partition with the first under chained declustering) moved to a site that shares none
    under ``placement``."""
    fp, _ = plan_for(seed, steps)
    (a, t), *rest = fp.crashes
    pairs = sharing(placement)
    moved = [(b if b == a or frozenset((a, b)) not in pairs else
              next(c for c in range(SITES) if c != a and frozenset((a, c)) not in pairs), u)
             for b, u in rest]
    return dataclasses.replace(fp, crashes=((a, t), *moved))


def run(base: Any, seed: int, fp: FailurePlan, placement: str, race: bool,
        replicas: int = 2) -> Any:
    batches, expected, _ = base
    return check(plan, batches, seed, fp, expected=expected, replicas=replicas, race=race,
                 wan=WAN, placement=placement)


def test_links_have_their_latency(base: Any) -> None:
    # the far links make the run longer than one without the model, the output the same
    batches, expected, steps = base
    near = simulate(plan(), batches, 0, FailurePlan(), replicas=2, race=True).steps
    assert steps > near + 30
    for placement in ("chained", "latency"):
        res = run(base, 0, FailurePlan(), placement, race=True)
        assert res.raced > 0


@pytest.mark.parametrize("race", [False, True], ids=["flux", "race"])
@pytest.mark.parametrize("placement", ["chained", "latency"])
def test_a_crash_and_recovery_over_wide_area_links(base: Any, placement: str,
                                                   race: bool) -> None:
    _, _, steps = base
    failed = []
    for seed in range(seeds(80)):
        fp = schedule(seed, steps, placement)
        try:
            run(base, seed, fp, placement, race)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_three_copies_placed_by_latency_survive_two_crashes(base: Any) -> None:
    _, _, steps = base
    failed = []
    for seed in range(seeds(80)):
        rng = np.random.default_rng((seed, 51))
        victims = [int(x) for x in rng.choice(SITES, 2, replace=False)]
        fp = FailurePlan(tuple((v, int(rng.integers(1, steps))) for v in victims))
        try:
            run(base, seed, fp, "latency", race=True, replicas=3)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_mutation_sites_that_ignore_the_views_table_are_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install = SiteBoundary._install_view

    def by_the_ring(self: SiteBoundary, ev: Any) -> Any:
        return install(self, dataclasses.replace(
            ev, message=dataclasses.replace(ev.message, table=np.zeros((0, 0), np.int32))))

    monkeypatch.setitem(site_boundary._ACTIONS, "install-view", by_the_ring)
    caught = None
    for seed in hunt_order(40, 0):
        try:
            run(base, seed, FailurePlan(), "latency", race=True)
        except Violation:
            caught = seed
            break
    assert caught is not None, "no seed caught sites placing by the ring"
    monkeypatch.undo()
    run(base, caught, FailurePlan(), "latency", race=True)


def test_unordered_output_is_the_same_rows_in_another_order(base: Any) -> None:
    batches, expected, steps = base
    raw = simulate(plan(), batches, 1, FailurePlan(), replicas=2, race=True, wan=WAN,
                   unordered=True).output
    sn = raw.column("_sn").to_numpy()
    assert (sn[1:] < sn[:-1]).any(), "the rows came in SN order: nothing was unordered"
    failed = []
    for race in (False, True):
        for seed in range(seeds(40)):
            fp = schedule(seed, steps, "chained")
            try:
                check(plan, batches, seed, fp, expected=expected, race=race, wan=WAN,
                      unordered=True)
            except Violation as e:
                failed.append(f"{'race' if race else 'flux'}: {e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_mutation_rows_handed_on_early_and_merged_again_are_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    batches, expected, _ = base
    take = ConsumerSet.take_arrived

    def keep_them(self: ConsumerSet) -> Any:
        pending = list(self.pending)
        out = take(self)
        self.pending = pending
        return out

    monkeypatch.setattr(ConsumerSet, "take_arrived", keep_them)
    # the egress's own check that nothing is released after the early rows, or the output
    with pytest.raises((Violation, AssertionError), match="differs|released after"):
        check(plan, batches, 0, FailurePlan(), expected=expected, race=True, wan=WAN,
              unordered=True)
    monkeypatch.undo()
    check(plan, batches, 0, FailurePlan(), expected=expected, race=True, wan=WAN,
          unordered=True)
