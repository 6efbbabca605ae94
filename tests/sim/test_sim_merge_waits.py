"""Eventual consistency at the stages' merges (``protocol/merge_waits.py``): a network
partition between sites, the driver reaching both groups, with ``--consistency eventual``.

On the tiny workload (4 sites, 8 partitions in chained declustering, three stages: two
exchanges in a row) a split such as ``0,1 / 2,3`` leaves each group holding both copies of
some partitions: strict mode waits it out (``test_sim_partitions.py``). In eventual mode
every merge that has held rows for the delay bound X releases them tentatively with the
inputs it has, in the stage's tentative branch, and the output goes on.

Every seed checks, against the failure-free run:

- the stable output is exact, row for row and SN for SN;
- the deliveries that are not stable rows are well formed (tentative rows, then ``undo``
  and ``rec_done`` together), and the run never ends inside an episode;
- for a split longer than the link timeout that cuts a partition's every copy off (the
  output would stall), tentative rows reach the output during the split, and no stretch of
  it longer than the bound of a chain (three stages: 3 X, plus the ticks and the links'
  delays) passes with nothing delivered while the input flows.

Mutant: a merge that releases without the silent streams' rows' SNs kept apart (its
tentative rows go into the stable operators) is caught by a seed, which passes unmutated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sparkflux.protocol import tentative as tentative_mod
from sparkflux.protocol.consistency import Eventual
from sparkflux.sim.run import FailurePlan, SimClock, SimResult, Violation, check
from sparkflux.sim.workload import tiny_plan
from tests.sim.test_sim_tentative import episodes_well_formed
from tests.support.seeds import hunt_order, seeds

pytestmark = pytest.mark.usefixtures("quiet_log")

SITES, PARTITIONS = 4, 8
CLOCK = SimClock()
SEEDS = seeds(24)
PACE = 30  # steps between input batches: the input flows through the split
MUTATION_SEEDS = 30
STAGES = 3
SLACK = 4 * CLOCK.tick_every + 120  # ticks (site and driver) and the links' delays


def plan_factory() -> Any:
    return tiny_plan(sites=SITES, partitions=PARTITIONS, events=1200)[0]


@pytest.fixture(scope="module")
def batches() -> list:
    return tiny_plan(sites=SITES, partitions=PARTITIONS, events=1200)[1]


def split_for(seed: int) -> tuple[FailurePlan, Eventual]:
    """``0,1 / 2,3`` or ``1,2 / 3,0`` (each group holds both copies of two partitions) at a
    random step for a random length, the driver reaching both, and a random bound."""
    rng = np.random.default_rng((seed, 37))
    groups = ((0, 1), (2, 3)) if seed % 2 == 0 else ((1, 2), (0, 3))
    at = int(rng.integers(20, 300))
    n = int(rng.integers(900, 2000))
    x = float(rng.integers(100, 200))  # well above a merge's hold without failures
    return FailurePlan(partitions=((*groups, None, at, n),)), Eventual(x, "process")


def run_seed(batches: list, seed: int, failures: FailurePlan, eventual: Eventual
             ) -> SimResult:
    where = f"seed {seed} ({failures.partitions}, X={eventual.max_delay})"
    try:
        res = check(plan_factory, batches, seed, failures, clock=CLOCK, dial_delay=(0, 40),
                    eventual=eventual, pace=PACE)
    except Violation as e:
        raise Violation(f"{where}: {e}") from None
    episodes_well_formed(res, where)
    return res


def longest_silence(res: SimResult, start: int, end: int) -> int:
    """The longest stretch of ``[start, end]`` with nothing delivered (stable or
    tentative rows)."""
    steps = sorted({s for s in res.delivered_at if start <= s <= end}
                   | {s for s, op, rows in res.tentative
                      if op == "tentative" and rows is not None and start <= s <= end})
    marks = [start, *steps, end]
    return max(b - a for a, b in zip(marks, marks[1:], strict=False))


def test_a_split_gives_tentative_output_within_the_bound_and_an_exact_stable_one(
        batches: list) -> None:
    bad: list[str] = []
    judged = 0
    for seed in range(SEEDS):
        failures, eventual = split_for(seed)
        try:
            res = run_seed(batches, seed, failures, eventual)
        except Violation as e:
            bad.append(str(e))
            continue
        (_, _, _, at, n), = failures.partitions
        # judged while the input flows (after its end there is nothing new to deliver)
        end = min(at + n, res.last_input)
        start = at + CLOCK.link_timeout
        if end - start < 4 * eventual.max_delay:
            continue
        judged += 1
        if not any(op == "tentative" for _, op, _ in res.tentative):
            bad.append(f"seed {seed}: no tentative row during a split of {n} steps")
            continue
        gap = longest_silence(res, at + int(STAGES * eventual.max_delay) + SLACK, end)
        if gap > STAGES * eventual.max_delay + SLACK:
            bad.append(f"seed {seed}: {gap} steps without output during the split "
                       f"(X = {eventual.max_delay})")
    assert not bad, f"{len(bad)} failing seed(s):\n" + "\n".join(bad[:5])
    assert judged >= SEEDS // 3, judged  # not vacuous


def test_mutation_merge_rows_in_the_stable_state(monkeypatch: pytest.MonkeyPatch,
                                                batches: list) -> None:
    """A branch that is the stage's stable program (no fork): the rows a merge releases
    by the delay bound reach the stable state, and the stable output is wrong."""
    real = tentative_mod.Branches.feed

    def no_fork(self: Any, s: int, epoch: int, rows: Any, sn: int, wm: int, sender: int,
                stable: Any, mine: Any, fork: Any) -> Any:
        self.programs[s] = stable
        self.forked[s] = set(range(mine.size))
        return real(self, s, epoch, rows, sn, wm, sender, stable, mine, fork)

    monkeypatch.setattr(tentative_mod.Branches, "feed", no_fork)
    caught = None
    for seed in hunt_order(MUTATION_SEEDS, 0):
        failures, eventual = split_for(seed)
        try:
            run_seed(batches, seed, failures, eventual)
        except Violation:
            caught = (seed, failures, eventual)
            break
    assert caught is not None, f"the mutation survived {MUTATION_SEEDS} seeds"
    monkeypatch.undo()
    run_seed(batches, *caught)
