"""Three stages in a chain under the deterministic simulator (``tiny_chain_plan``).

With two stages every exchange has the ingress or the egress at one end. A third puts a
stage in the middle that takes rows from sites and sends rows to sites, and on 4 sites with
chained declustering a producer replica and a consumer replica of one exchange often share a
site. The site core hands such rows to the local consumer through its own FIFO link
(``SiteCore._local``), and drives every stage that got input in a pass.

- failure-free, 1 and 2 replicas: the output equals ``tiny_plan``'s, row for row and SN for
  SN (the extra stage is an identity map);
- one crash with take-over and catch-up (the schedules of ``test_sim_catchup``), 80 seeds:
  ``check`` passes;
- mutation: each of the two rules is broken as it was before this test existed, and a seed
  that passes unmutated catches it: (1) rows for a local consumer handed over at once, ahead
  of a ``reverse``'s resent rows queued on the local link (a duplicate); (2) a pass that
  stops driving at the first stage whose frontier did not move (a stall).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparkflux.protocol.messages import Data, Outgoing
from sparkflux.protocol.site import SiteCore
from sparkflux.sim.run import FailurePlan, Violation, check, simulate
from sparkflux.sim.workload import tiny_chain_plan, tiny_plan
from tests.support import tiny_runs
from tests.support.seeds import seeds

from .test_sim_catchup import plan_for

CRASH_SEEDS, CHUNKS = seeds(80), 2
MUTATION_SEEDS = 80


@pytest.fixture(scope="module")
def baseline() -> tuple[object, int, list]:
    plan, batches = tiny_chain_plan()
    res = simulate(plan, batches, 0, FailurePlan())
    assert res.ended
    return res.output, res.steps, batches


@pytest.mark.parametrize("replicas", [1, 2])
def test_chain_equals_two_stages(replicas: int) -> None:
    plan, batches = tiny_chain_plan()
    assert len(plan.stages) == 3
    res = simulate(plan, batches, 1, FailurePlan(), replicas=replicas)
    two = simulate(*tiny_plan(), 1, FailurePlan(), replicas=replicas)
    assert res.ended and res.output.num_rows > 40
    assert res.output.drop_columns(["_t0"]).equals(two.output.drop_columns(["_t0"]))


def run_seed(baseline: tuple, seed: int) -> FailurePlan:
    out, steps, batches = baseline
    fp, _ = plan_for(seed, steps)
    check(lambda: tiny_chain_plan()[0], batches, seed, fp, expected=out)
    return fp


@pytest.mark.parametrize("part", range(CHUNKS))
def test_chain_survives_a_crash_and_catch_up(baseline: tuple, part: int) -> None:
    failed = []
    for seed in range(part * CRASH_SEEDS // CHUNKS, (part + 1) * CRASH_SEEDS // CHUNKS):
        try:
            run_seed(baseline, seed)
        except Violation as e:
            failed.append(str(e))
    assert not failed, "\n".join(failed[:5])


def caught(monkeypatch: pytest.MonkeyPatch, baseline: tuple, symptoms: tuple[str, ...],
           name: str) -> None:
    """The first seed whose violation shows one of ``symptoms``; it passes unmutated."""
    tiny_runs.caught(monkeypatch, run_seed, baseline, MUTATION_SEEDS, symptoms, name)


def eager_drive(self: SiteCore, *stages: int) -> list[Outgoing]:
    """Mutant 1: a stage's rows for a local consumer are handed over at once (and that
    stage driven in the same loop), not through the local link behind what is queued."""
    out: list[Outgoing] = []
    s = min(stages)
    while s < len(self.plan.stages):
        rel = self.cons[s].release()
        if rel is not None:
            batch, sn, wm = self._process(s, *rel)
            for o in self.prods[s].produce(batch, sn, wm):
                if o.site == self.site:
                    assert isinstance(o.message, Data)
                    out += self.cons[o.message.stage].on_data(o.message, self.site)
                else:
                    out.append(o)
        s += 1
    return out


def first_stop_drive(self: SiteCore, *stages: int) -> list[Outgoing]:
    """Mutant 2: driving stops at the first stage whose frontier did not move."""
    out: list[Outgoing] = []
    for s in range(min(stages), len(self.plan.stages)):
        rel = self.cons[s].release()
        if rel is None:
            break
        batch, sn, wm = self._process(s, *rel)
        out += self.prods[s].produce(batch, sn, wm)
    return out


@pytest.mark.parametrize(("mutant", "symptoms"), [
    (eager_drive, ("duplicate input",)),
    (first_stop_drive, ("never saw the end", "the ingress admitted")),
])
def test_mutation_is_caught(monkeypatch: pytest.MonkeyPatch, baseline: tuple,
                            mutant: Callable, symptoms: tuple[str, ...]) -> None:
    monkeypatch.setattr(SiteCore, "_drive", mutant)
    caught(monkeypatch, baseline, symptoms, mutant.__name__)
