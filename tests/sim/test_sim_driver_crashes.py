"""The driver's death and a restart from the newest checkpoint, in the deterministic simulator
(docs/design.md §9; ``sim/driver_crashes.py``): the tiny two-stage workload (4 sites, 8
partitions, windowed state in the second stage) takes a checkpoint every few dozen steps; the
driver (and with it every site) dies one to three times at random steps, each time run again
from the newest complete checkpoint, with a site crash in the first incarnation for half the
seeds. The output the sink keeps equals the failure-free run's, row for row and in order,
with no duplicate; many restarts go on from a real cut (not the start). Mutants: a manifest
written before the egress delivered the cut (rows lost), and a restart that installs the
partitions' progress but not their operators' state, each caught by a seed that passes
unmutated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pytest

from sparkflux.control.checkpoints import Checkpoints, Due
from sparkflux.model.compare import duplicate_rows
from sparkflux.model.digest import digest_of
from sparkflux.protocol.messages import StoredPartition
from sparkflux.protocol.site import SiteCore
from sparkflux.sim import driver_crashes
from sparkflux.sim.run import FailurePlan
from sparkflux.sim.workload import tiny_plan
from tests.support import tiny_runs
from tests.support.seeds import seeds
from tests.support.tiny_runs import Baseline, chunk_of, tiny_baseline

SEEDS, CHUNKS = seeds(120), 2
MUTATION_SEEDS = 60
EVENTS = 800  # 20 batches: about 500 steps a run, time for a few checkpoints to complete


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return tiny_baseline(EVENTS)


def schedule(seed: int, steps: int) -> tuple[list[int], int, FailurePlan]:
    """The seed's driver crashes (steps into each incarnation), checkpoint interval, and
    site crash (and standby) in the first incarnation, for half the seeds."""
    rng = np.random.default_rng(seed)
    crashes = sorted(int(x) for x in rng.integers(steps // 3, steps, size=int(
        rng.integers(1, 4))))
    every = int(rng.integers(10, steps // 10 + 10))
    site = FailurePlan()
    if seed % 2:
        site = FailurePlan(crashes=((int(rng.integers(0, 4)), int(rng.integers(1, steps))),),
                           standbys=(int(rng.integers(1, steps)),))
    return crashes, every, site


def run_seed(base: Baseline, seed: int, race: bool = False) -> driver_crashes.Incarnations:
    crashes, every, site = schedule(seed, base.steps)
    runs = driver_crashes.run(lambda: tiny_plan(events=EVENTS)[0], base.batches, seed,
                              crashes, every, failures=site, race=race)
    out = runs.output
    where = (f"seed {seed}{' with racing copies' if race else ''}: driver crashes at "
             f"{crashes}, checkpoint every {every}, {site}")
    if duplicate_rows(out):
        raise AssertionError(f"{where}: {duplicate_rows(out)} duplicate rows")
    if out.num_rows != base.output.num_rows or digest_of(out) != digest_of(base.output):
        raise AssertionError(f"{where}: output differs from the failure-free run "
                             f"({out.num_rows} rows vs {base.output.num_rows}; restarts "
                             f"from cuts {runs.restarts})")
    return runs


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_driver_crashes_restart_from_the_newest_checkpoint_and_the_output_is_exact(
        baseline: Baseline, chunk: int) -> None:
    restart_exactly(baseline, chunk_of(SEEDS, CHUNKS, chunk), from_cut_share=0.3)


def restart_exactly(base: Baseline, seeds_: range, from_cut_share: float,
                    race: bool = False) -> None:
    """Every seed's output exact; not vacuous: the driver died in every seed, and at least
    ``from_cut_share`` of the restarts went on from a cut."""
    failed, from_cut, restarts = [], 0, 0
    for seed in seeds_:
        try:
            runs = run_seed(base, seed, race=race)
        except AssertionError as e:
            failed.append(str(e))
            continue
        restarts += len(runs.restarts)
        from_cut += sum(c >= 0 for c in runs.restarts)
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    assert restarts >= len(seeds_)
    assert from_cut >= from_cut_share * restarts, \
        f"only {from_cut} of {restarts} restarts from a cut"


def test_racing_copies_restart_from_the_newest_checkpoint_and_the_output_is_exact(
        baseline: Baseline) -> None:
    """The same schedules with racing copies (``--ha race``): every copy of a partition
    holds its merge at the checkpoint's SN, its first live copy stores the part, and a
    restart starts every copy from the cut. Racing admits the input at its fastest copy's
    pace, so fewer checkpoints complete before the driver dies than under Flux-HA."""
    restart_exactly(baseline, range(SEEDS // 2), from_cut_share=0.2, race=True)


def caught(monkeypatch: pytest.MonkeyPatch, base: Baseline, symptom: str, name: str) -> None:
    tiny_runs.caught(monkeypatch, run_seed, base, MUTATION_SEEDS, symptom, name)


def test_mutation_manifest_before_the_egress_delivered_the_cut(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """The sinks commit (and the manifest follows) as soon as the checkpoint begins: a
    driver that dies before the rows at or below the cut came out loses them."""
    def at_once(self: Checkpoints, egress_sn: int) -> Due | None:
        p = self.pending
        if p is None or p.delivered:
            return None
        p.delivered = True
        return Due(p.checkpoint, p.cut, commit=True)

    monkeypatch.setattr(Checkpoints, "delivered", at_once)
    caught(monkeypatch, baseline, "output differs", "manifest before delivery")


def test_mutation_a_restored_partition_without_its_operators_state(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """A restart installs every partition's progress at the cut but not its operators'
    state (the open sessions, the count windows' history): the rows after the cut are
    computed from nothing and the output differs."""
    restore = SiteCore.restore

    def progress_only(self: SiteCore, parts: Mapping[tuple[int, int], StoredPartition]
                      ) -> None:
        blank = {k: replace(p, snapshot=replace(p.snapshot, ops=tuple(
            op.get_partition_state(k[1]) for op in self.plan.stages[k[0]].operators)))
            for k, p in parts.items()}
        restore(self, blank)

    monkeypatch.setattr(SiteCore, "restore", progress_only)
    caught(monkeypatch, baseline, "output differs", "restore without operator state")
