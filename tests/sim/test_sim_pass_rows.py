"""A pass's row budget (``SiteCore.pass_rows``) in the deterministic simulator.

Each stage's merge releases about ``pass_rows`` rows a pass and holds the rest back
(``ConsumerSet.release``); a site that held rows back runs passes with nothing new,
interleaved at random with deliveries (``simulate(pass_rows=...)``: the budget drawn per
pass from 1, 2, 7 rows and no real limit). Splitting a release must change no output:

- three stages in a chain with a crash, take-over and catch-up (``test_sim_catchup``'s
  schedules): ``check`` passes (output equal to the failure-free run, buffers drained);
- a cut source under ``--consistency eventual`` in each mode, with and without a crash
  (``test_sim_tentative``'s schedules): the stable output is exact, the episodes well
  formed, no record waits at the ingress past the delay bound.

Mutants: a site that forgets the stages it held rows back for (it drives only the stages
that got new input), and a release that holds rows back without saying so, each leave rows
in a merge for ever; a seed catches each and passes unmutated.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.protocol import consumer as consumer_mod
from sparkflux.protocol.site import SiteCore
from sparkflux.sim.run import FailurePlan, Violation, check, simulate
from sparkflux.sim.workload import tiny_chain_plan
from tests.support import tiny_runs
from tests.support.seeds import seeds

from .test_sim_catchup import plan_for
from .test_sim_tentative import base_for, run_seed, schedule

pytestmark = pytest.mark.usefixtures("quiet_log")

PASS_ROWS = (1, 2, 7, 1 << 30)
CHAIN_SEEDS, TENTATIVE_SEEDS, MUTATION_SEEDS = seeds(40), seeds(30), 30


@pytest.fixture(scope="module")
def chain() -> tuple[Any, int, list[Any]]:
    plan, batches = tiny_chain_plan()
    res = simulate(plan, batches, 0, FailurePlan())
    assert res.ended
    return res.output, res.steps, batches


def run_chain(chain: tuple[Any, int, list[Any]], seed: int) -> None:
    out, steps, batches = chain
    fp, _ = plan_for(seed, steps)
    check(lambda: tiny_chain_plan()[0], batches, seed, fp, expected=out, pass_rows=PASS_ROWS)


def test_a_chain_with_a_crash_gives_the_same_output_in_short_passes(chain: Any) -> None:
    failed = []
    for seed in range(CHAIN_SEEDS):
        try:
            run_chain(chain, seed)
        except Violation as e:
            failed.append(str(e))
    assert not failed, "\n".join(failed[:5])


@pytest.fixture(scope="module")
def records() -> Any:
    from sparkflux.sim.workload import tiny_union_records
    return tiny_union_records()


def test_a_cut_source_in_short_passes_keeps_the_stable_output_and_the_bound(
        records: Any) -> None:
    bases: dict[Any, Any] = {}
    failed = []
    for seed in range(TENTATIVE_SEEDS):
        base = base_for(bases, "union", records, seed)
        failures, eventual = schedule(seed, base.steps)
        try:
            run_seed("union", records, seed, base, failures, eventual, pass_rows=PASS_ROWS)
        except Violation as e:
            failed.append(str(e))
    assert not failed, "\n".join(failed[:5])


def caught(monkeypatch: pytest.MonkeyPatch, chain: Any, name: str) -> None:
    """The first seed whose run ends with rows left in a merge; it passes unmutated."""
    tiny_runs.caught(monkeypatch, run_chain, chain, MUTATION_SEEDS,
                     ("never saw the end", "did not drain"), name)


def test_mutation_the_held_back_stages_are_forgotten(monkeypatch: pytest.MonkeyPatch,
                                                    chain: Any) -> None:
    real = SiteCore._drive

    def forgetful(self: SiteCore, *stages: int) -> list[Any]:
        out = real(self, *stages)
        self.backlog = set()
        return out

    monkeypatch.setattr(SiteCore, "_drive", forgetful)
    caught(monkeypatch, chain, "held-back stages forgotten")


def test_mutation_a_release_holds_rows_back_silently(monkeypatch: pytest.MonkeyPatch,
                                                    chain: Any) -> None:
    real = consumer_mod.ConsumerSet._chunk

    def silent(self: consumer_mod.ConsumerSet, cap: Any, limit: int) -> Any:
        out = real(self, cap, limit)
        self.backlog = False
        return out

    monkeypatch.setattr(consumer_mod.ConsumerSet, "_chunk", silent)
    caught(monkeypatch, chain, "silent hold-back")
