"""Mini-partition moves of racing copies in the deterministic simulator.

``test_sim_moves``'s schedules (moves alone, a failure during a move, a move and then a
failure of the other copy, recovery onto the survivors, groups of moves with a failure,
a move's destination failing, and the balancing policy moving load off a slowed site) run
with ``--ha race``: a move catches up a new copy from any live one and retires the old one
after it; every copy still feeds every copy. Each seed must meet the contract (the output
equal to the failure-free run, nothing lost, buffers drained) and, with a standby, end with
two live copies of every partition.

Racing copies admit the tiny input at their fastest copy's pace, so the ingress often hears
of a retirement only after it has sent the retired copy every row: the schedule that found
the need for ``Rejoined`` (a copy moved back into the column just retired on its site) is
``test_sim_race.test_a_copy_moved_back_where_a_retired_copy_was``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.sim.run import Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import seeds

from .test_sim_catchup import assert_recovered
from .test_sim_moves import plan_for

CHUNKS = 2
SEEDS_PER_CHUNK = seeds(40)


@pytest.fixture(scope="module")
def race_steps(tiny_baseline: Any) -> int:
    batches, _, _ = tiny_baseline
    return simulate(tiny_plan()[0], batches, 0, race=True).steps


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_moves_of_racing_copies_interleaved_with_failures(chunk: int, tiny_baseline: Any,
                                                           race_steps: int) -> None:
    batches, expected, _ = tiny_baseline
    failures = []
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        fp, kw = plan_for(seed, race_steps)
        try:
            res = check(lambda: tiny_plan()[0], batches, seed, fp, expected=expected,
                        race=True, **kw)
            if kw.get("recovery") != "survivors":
                assert_recovered(res, seed, fp)
        except (Violation, AssertionError) as e:
            failures.append(f"{e} [{fp} {kw}]")
    assert not failures, "\n".join(failures[:5])
