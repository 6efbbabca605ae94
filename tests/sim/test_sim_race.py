"""Racing replicas (``--ha race``, Hwang et al.) in the deterministic simulator.

Every copy of a producer partition sends to every copy of each consumer partition and to the
egress; each input passes the first copy of a row to arrive (``ConsumerSet._first_copies``,
the claims as the paper's punctuations). The
simulator's links are independent, so the copies' streams reach a consumer in every
interleaving the seeds draw, none in step with another. Seeds:

- K = 2, 3 and 4 copies on five sites, with K - 1 sites crashing at random steps: nobody
  comes back (the run goes on with the copies left), or standbys adopt the slots and catch
  every copy up again (K live copies at the end); the output equals the run without
  replication, row for row, and the filters did drop rows (the copies did race);
- the DAG (fan-out, three sinks, two joins) and the chain with a crash and catch-up;
- two copies: a crash, a standby's catch-up, then the crash of a neighbour that held the
  other copies: the rebuilt copies carry their partitions alone;
- a copy hung past the timeouts while the input flows, its slot adopted by a standby or its
  copies rebuilt on the survivors by the moves of recovery;
- mutations: a filter that passes every copy, and a fold-in that acknowledges to a rebuilt
  copy without racing it (the run stalls once the old copies fail): each is caught, and the
  seed that catches it passes unmutated; an operator that sends rows above its claim is
  reported, not raced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.program import HeldRows
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.sim.run import FailurePlan, SimClock, SimResult, Violation, check, simulate
from sparkflux.sim.workload import (
    tiny_chain_plan,
    tiny_dag_plan,
    tiny_plan,
    tiny_union_arrivals,
    tiny_union_records,
)
from tests.support.seeds import hunt_order, seeds

from .test_sim_catchup import plan_for

SITES, PARTITIONS = 5, 10
SEEDS = seeds(160)  # per K and recovery kind
PACE = 60  # an input batch at most every PACE steps: the input flows through the failures


def plan() -> Any:
    return tiny_plan(sites=SITES, partitions=PARTITIONS)[0]


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table, dict[int, int]]:
    _, batches = tiny_plan(sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(), batches, 0, FailurePlan(), replicas=1).output
    steps = {k: simulate(plan(), batches, 0, FailurePlan(), replicas=k, race=True).steps
             for k in (2, 3, 4)}
    steps[0] = simulate(plan(), batches, 0, FailurePlan(), replicas=2, race=True,
                        pace=PACE).steps  # two copies, the input paced
    assert expected.num_rows > 0
    return batches, expected, steps


def crashes(seed: int, k: int, steps: int, standbys: bool, salt: int = 41) -> FailurePlan:
    """K - 1 distinct sites crash at random steps; with ``standbys`` one adopts each slot
    after the last crash (``salt``: another file's seeds draw their own plans)."""
    rng = np.random.default_rng((seed, salt, k))
    victims = [int(x) for x in rng.choice(SITES, k - 1, replace=False)]
    at = [(v, int(rng.integers(1, steps))) for v in victims]
    if not standbys:
        return FailurePlan(tuple(at))
    last = max(t for _, t in at)
    return FailurePlan(tuple(at), standbys=tuple(last + int(rng.integers(1, 200))
                                                 for _ in victims))


def survive_crashes(n: int, k: int, standbys: bool, plan_of: Callable[[int], FailurePlan],
                    run_seed: Callable[[int, FailurePlan], SimResult]) -> list[str]:
    """Seeds ``0 .. n - 1`` of K - 1 crashes (``plan_of``), each run (``run_seed``) against the
    contract; with standbys each must end with K live copies of every partition. The
    failures, each with its plan."""
    failed = []
    for seed in range(n):
        fp = plan_of(seed)
        try:
            res = run_seed(seed, fp)
            if standbys:
                short = {key: c for key, c in res.replicas_live.items() if c != k}
                assert not short, f"seed {seed}: not {k} live copies: {short}"
        except (Violation, AssertionError) as e:
            failed.append(f"{e} [{fp}]")
    return failed


def run(base: Any, seed: int, k: int, fp: FailurePlan, pace: int = 0) -> SimResult:
    batches, expected, _ = base
    return check(plan, batches, seed, fp, expected=expected, replicas=k, race=True, pace=pace)


def test_every_copy_races_without_failures(base: Any) -> None:
    batches, expected, _ = base
    for k in (2, 3, 4):
        res = run(base, k, k, FailurePlan())
        # every row reached the egress k times, and all but one copy were dropped there
        assert res.raced >= (k - 1) * expected.num_rows, (k, res.raced)


@pytest.mark.parametrize("standbys", [False, True], ids=["no-standby", "standbys"])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_any_k_minus_one_sites_may_crash(base: Any, k: int, standbys: bool) -> None:
    _, _, steps = base
    failed = survive_crashes(SEEDS, k, standbys,
                             lambda seed: crashes(seed, k, steps[k], standbys),
                             lambda seed, fp: run(base, seed, k, fp))
    assert not failed, "\n".join(failed[:5])


@pytest.fixture(scope="module")
def dag() -> tuple[tuple[pa.Table, pa.Table], list[pa.Table], int]:
    records = tiny_union_records()
    res = simulate(tiny_dag_plan(), tiny_union_arrivals(*records, 0), 0, FailurePlan())
    assert res.ended
    return records, res.outputs, res.steps


def test_the_dag_races_through_a_crash_and_catch_up(dag: Any) -> None:
    records, outputs, steps = dag
    failed = []
    for seed in range(seeds(80)):
        fp, _ = plan_for(seed, steps)
        try:
            res = check(tiny_dag_plan, tiny_union_arrivals(*records, seed), seed, fp,
                        expected=outputs[0], race=True)
            if any(not mine.equals(theirs) for mine, theirs in zip(res.outputs, outputs,
                                                                     strict=True)):
                raise Violation(f"seed {seed}: a sink differs from the failure-free run")
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_the_chain_races_through_a_crash_and_catch_up() -> None:
    _, batches = tiny_chain_plan()
    expected = simulate(tiny_chain_plan()[0], batches, 0, FailurePlan(), replicas=1).output
    steps = simulate(tiny_chain_plan()[0], batches, 0, FailurePlan(), race=True).steps
    failed = []
    for seed in range(seeds(80)):
        fp, _ = plan_for(seed, steps)
        try:
            check(lambda: tiny_chain_plan()[0], batches, seed, fp, expected=expected,
                  race=True)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


# -- mutations ------------------------------------------------------------------------------
def hunt(base: Any, k: int, standbys: bool, first: int) -> tuple[int, FailurePlan]:
    """The first seed (from ``first`` on, wrapping round) whose crash plan breaks the run."""
    _, _, steps = base
    for seed in hunt_order(200, first):
        fp = crashes(seed, k, steps[k], standbys)
        try:
            run(base, seed, k, fp)
        except Violation:
            return seed, fp
    raise AssertionError("the mutation survived 200 seeds")


def test_mutation_a_filter_that_passes_every_copy_is_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ConsumerSet, "_first_copies",
                        lambda self, f, qi, p, sn, floor: np.ones(sn.size, dtype=bool))
    seed, fp = hunt(base, 2, False, 0)
    monkeypatch.undo()
    run(base, seed, 2, fp)


def survivor_lost(seed: int, steps: int) -> FailurePlan:
    """Two copies: a site crashes, a standby rebuilds its copies, then a neighbour that held
    the other copies of some of its partitions crashes: the rebuilt copies carry them."""
    rng = np.random.default_rng((seed, 43))
    a, crash = int(rng.integers(SITES)), int(rng.integers(1, steps // 3))
    sb = crash + int(rng.integers(1, 60))
    neighbour = (a + int(rng.choice([1, SITES - 1]))) % SITES
    return FailurePlan(((a, crash),), standbys=(sb, sb + 2 * steps),
                       after_recovery=((neighbour, int(rng.integers(1, 40))),))


def test_rebuilt_copies_carry_on_when_their_survivors_fail(base: Any) -> None:
    _, _, steps = base
    failed = []
    for seed in range(seeds(160)):
        fp = survivor_lost(seed, steps[0])
        try:
            run(base, seed, 2, fp, PACE)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


def test_mutation_a_rebuilt_copy_never_raced_again_is_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """At a rebuilt producer copy's ``psync`` a consumer acknowledges to it but does not ask
    it to send (Flux-HA's fold-in): the output stays right while the old copies live, and
    stalls once they fail, as the rebuilt copy, the only one left, sends nobody anything."""
    on_psync = ConsumerSet.on_psync

    def pairs_fold_in(self: ConsumerSet, msg: Any) -> Any:
        race, self.race = self.race, False
        try:
            return on_psync(self, msg)
        finally:
            self.race = race
    monkeypatch.setattr(ConsumerSet, "on_psync", pairs_fold_in)
    _, _, steps = base
    for seed in hunt_order(200, 0):
        fp = survivor_lost(seed, steps[0])
        try:
            run(base, seed, 2, fp, PACE)
        except Violation:
            break
    else:
        raise AssertionError("the mutation survived 200 seeds")
    monkeypatch.undo()
    run(base, seed, 2, fp, PACE)


def test_mutation_rows_sent_above_their_claim_are_reported(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter decides by the claims alone, so it needs every row a copy sends covered
    by its frame's claim; an operator that sends rows above its progress breaks that, and
    the consumer says so (fail-stop) rather than drop or pass rows it cannot judge."""
    records = tiny_union_records()
    monkeypatch.setattr(HeldRows, "release", lambda self, rows, claim: rows)
    with pytest.raises(Violation, match="racing copies need every row covered by its "
                                        "frame's claim"):
        simulate(tiny_dag_plan(), tiny_union_arrivals(*records, 0), 0, FailurePlan(),
                 race=True)
    monkeypatch.undo()
    simulate(tiny_dag_plan(), tiny_union_arrivals(*records, 0), 0, FailurePlan(), race=True)


# -- hangs, moves and recovery onto the survivors -------------------------------------------
CLOCK = SimClock()


def hang_plan(seed: int, steps: int) -> FailurePlan:
    """A site hangs (SIGSTOP) past the heartbeat timeout from a random step in the first
    half of the paced input; half the seeds a standby adopts its slot after its exclusion,
    the others its copies are rebuilt on the survivors (moves)."""
    rng = np.random.default_rng((seed, 47))
    site, at = int(rng.integers(SITES)), int(rng.integers(1, steps // 2))
    n = int(rng.integers(CLOCK.heartbeat_timeout + 50, 3 * CLOCK.heartbeat_timeout))
    standby = (at + n + int(rng.integers(1, 300)),) if rng.random() < 0.5 else ()
    return FailurePlan(hangs=((site, at, n),), standbys=standby)


@pytest.fixture(scope="module")
def paced(base: Any) -> int:
    batches, _, _ = base
    return simulate(plan(), batches, 0, FailurePlan(), replicas=2, race=True, pace=PACE,
                    clock=CLOCK).steps


def test_a_hung_copy_is_raced_past_and_rebuilt(base: Any, paced: int) -> None:
    """A copy hangs past the link and heartbeat timeouts while the input flows: the output
    equals the run without replication, whether a standby adopts the hung site's slot or its
    copies are rebuilt on the survivors (the moves of recovery, racing as they are built).
    (That the output does not wait for the hung copy is the runtime's bench:
    ``bench/racing.py``; the tiny workload's output comes in bursts too far apart to show
    it here.)"""
    batches, expected, _ = base
    failed, moved = [], 0
    for seed in range(seeds(80)):
        fp = hang_plan(seed, paced)
        try:
            res = check(plan, batches, seed, fp, expected=expected, replicas=2, race=True,
                        pace=PACE, clock=CLOCK,
                        recovery="standby" if fp.standbys else "survivors")
            moved += bool(res.moves)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])
    assert moved, "no seed rebuilt the hung site's copies on the survivors"


def test_a_copy_moved_back_where_a_retired_copy_was() -> None:
    """Two make-before-break moves of partition 4 (``test_sim_moves``'s layout, 4 sites):
    its copy 0 from site 0 to 2, then its copy 1 from site 1 into the freed column 0 on
    site 0. Racing copies admit the whole input before the first move's retirement reaches
    the ingress, so the ingress sent the old copy 0 on site 0 every row, and some of them
    reach site 0 after the new copy of column 0 installed there (the ``move`` and the
    snapshot come on other connections). A frame names the consumer partition, not the
    incarnation of its copy: the new copy takes nothing of a stream from a site between its
    ``Rejoin`` and that site's ``Rejoined`` (ordered with the rows), or those rows would be
    taken for its input (SNs at or below its progress: FH-Cons stops the site)."""
    p, batches = tiny_plan()
    expected = simulate(p, batches, 0, FailurePlan(), replicas=1).output
    fp = FailurePlan(moves=((57, 4, 2), (120, 4, 0)))
    check(lambda: tiny_plan()[0], batches, 0, fp, expected=expected, race=True)
