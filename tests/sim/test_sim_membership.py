"""The membership and recovery tables (``control/membership.py``) in the simulator: a
controller that breaks the recovery task's rule is caught by a named seed."""

from __future__ import annotations

import re

import pytest

from sparkflux.control.controller import Controller
from sparkflux.control.membership import RecoveryEv


def test_mutation_adopting_while_another_recovery_runs_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that gives an awaiting slot to a standby while another slot is still
    being caught up (two recoveries at once, the first one's catch-ups mixed with the
    second's) is caught by the recovery task's table in the simulator (its
    ``RecoveryError``, reported as a violation): three replicas, two sites fail and two
    standbys come (``test_sim_replicas``' plans). The seed that catches it passes
    unmutated."""
    from sparkflux.sim.run import FailurePlan, Violation, check, simulate
    from sparkflux.sim.workload import tiny_plan
    from tests.sim.test_sim_replicas import PARTITIONS, K, two_failures
    from tests.sim.test_sim_replicas import SITES as SIM_SITES
    from tests.sim.test_sim_replicas import plan as sim_plan

    _, batches = tiny_plan(sites=SIM_SITES, partitions=PARTITIONS)
    expected = simulate(sim_plan(), batches, 0, FailurePlan(), replicas=1).output
    steps = simulate(sim_plan(), batches, 0, FailurePlan(), replicas=K).steps
    real = Controller._next_task

    def eager(self: Controller) -> list:
        if (self.awaiting and self.standbys and not self.moving and not self.finished
                and self.layout is not None and not self.aborted):
            return self._recovery_step(RecoveryEv.ADOPT)  # mutant: whatever the recovery's phase
        return real(self)

    monkeypatch.setattr(Controller, "_next_task", eager)
    caught = None
    for seed in range(200):
        fp = two_failures(seed, steps)
        if len(fp.standbys) != 2:
            continue
        try:
            check(sim_plan, batches, seed, fp, expected=expected, replicas=K)
        except Violation as e:  # the simulator reports the table's RecoveryError
            if re.search(r"recovery \(site slot \d\): no transition from (adopting|catching "
                         r"up) on adopt", str(e)):
                caught = seed
                break
    assert caught is not None, "the mutation survived 200 seeds"
    print(f"mutation 'adopt during a recovery': caught by seed {caught}")
    monkeypatch.undo()  # control: the very same seed passes with the real controller
    check(sim_plan, batches, caught, two_failures(caught, steps), expected=expected,
          replicas=K)
