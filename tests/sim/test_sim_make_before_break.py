"""Moves made before they break, with a failure at every point of a move (simulator).

A move builds the new copy in the partition's free column while the old copies run, and
retires the old copy only once every party has folded the new one in. So one failure at any
moment of a move (of the old copy's site, the destination, the site the new copy is built
from, or a bystander; while the sites apply the move, while the new copy is built) never
leaves a partition without a complete copy: every seed satisfies the contract (output
identical to the failure-free run, buffers drained), none stops with the lost-partition
error, and, with a standby, each ends with two live copies of every partition.

``SPARKFLUX_SEEDS=full`` runs the 1,000 seeds; the default a third of them (``seeds.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sparkflux.control.controller import Controller
from sparkflux.control.moves import MoveEv, MovePhase
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import seeds

from .test_sim_catchup import assert_recovered

SITES, PARTITIONS = 4, 8
CHUNKS = 4
SEEDS_PER_CHUNK = seeds(1000) // CHUNKS
ROLES = ("source", "destination", "built from", "bystander")
# The phases a crash lands in. The wait for every party's fold-in after the last ``cu-done``
# is empty in the simulator's schedules (the egress folds the last stage in before the
# ``cu-done`` behind it on the same link), so ``test_controller_moves.py`` drives it.
PHASES = ("applying", "building")


def plan_for(seed: int, steps: int) -> tuple[FailurePlan, dict[str, Any]]:
    """One move of copy 0 of a random partition (initial placement: q on q % 4 and
    (q + 1) % 4) to a site without a copy, and one site failing 0-320 steps later (in a third
    of the seeds 0-24, so that the short phase of applying the move is hit as often as the
    building): the old copy's, the destination, the other copy's (the new one is built from
    it) or the fourth.
    A standby adopts the slot later; in a quarter of the seeds there is none, and the failed
    site's copies are recovered onto the survivors."""
    rng = np.random.default_rng((seed, 29))
    q = int(rng.integers(PARTITIONS))
    src, other = q % SITES, (q + 1) % SITES
    dst = int(rng.choice([s for s in range(SITES) if s not in (src, other)]))
    bystander = next(s for s in range(SITES) if s not in (src, other, dst))
    victim = (src, dst, other, bystander)[seed % 4]
    at = int(rng.integers(steps // 8, 2 * steps // 3))
    crash = at + int(rng.integers(0, 25 if rng.random() < 1 / 3 else 321))
    if rng.random() < 0.25:
        return FailurePlan(((victim, crash),), moves=((at, q, dst),)), {"recovery": "survivors"}
    return FailurePlan(((victim, crash),), standbys=(crash + int(rng.integers(1, 200)),),
                       moves=((at, q, dst),)), {}


def run_seed(seed: int, tiny_baseline: Any) -> SimResult:
    batches, expected, steps = tiny_baseline
    fp, kw = plan_for(seed, steps)
    res = check(lambda: tiny_plan()[0], batches, seed, fp, expected=expected, **kw)
    if kw.get("recovery") != "survivors":
        assert_recovered(res, seed, fp)
    assert res.short_s and max(res.short_s) == 0.0, \
        f"seed {seed}: a move left its partition short of copies for {res.short_s}"
    return res


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_a_failure_at_any_point_of_a_move_loses_nothing(chunk: int, tiny_baseline: Any) -> None:
    failures, points = [], set()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        try:
            points |= set(run_seed(seed, tiny_baseline).crash_points)
        except (Violation, AssertionError) as e:
            failures.append(f"{e} [{plan_for(seed, tiny_baseline[2])}]")
    assert not failures, "\n".join(failures[:5])
    # the failures land at every point of a move: every role in every phase
    missing = {(r, p) for r in ROLES for p in PHASES} - points
    assert not missing, f"no seed of chunk {chunk} crashed a move's {sorted(missing)}"


def test_mutation_retiring_the_old_copy_before_the_fold_in_is_caught(
        tiny_baseline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break before make: the old copy retired as soon as the new one's build starts (every
    site has applied the move), not once every party has folded it in. A failure of the site
    the new copy is built from then leaves the partition no complete copy."""
    def early(self: Controller) -> list:
        actions: list = []
        for m in sorted(self.moving.values(), key=lambda m: m.epoch):
            if m.phase is MovePhase.BUILDING:  # retired as if its site had failed
                actions += self._move_step(m, MoveEv.SOURCE_FAILED, "mutant: before fold-in")
        return actions

    caught = None
    for seed in range(2, 400, 4):  # the seeds whose failure is the "built from" site's
        monkeypatch.setattr(Controller, "_retire_folded", early)
        try:
            run_seed(seed, tiny_baseline)
        except (Violation, AssertionError):
            caught = seed
        monkeypatch.undo()
        if caught is not None:
            break
    assert caught is not None, "retiring the old copy early went unnoticed"
    run_seed(caught, tiny_baseline)  # the seed that catches it passes unmutated
