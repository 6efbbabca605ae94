"""How long recovery waits for a standby before it rebuilds a failed site's replicas on the
surviving sites (``--recovery standby``), measured rather than fixed.

A standby is Spark's retry of the failed site task (or a spare). How soon it comes depends
on the cluster: in local mode a retried task starts in well under a second; on a cluster a
lost executor must first be noticed, and its tasks restarted on another executor or on a
new one the worker launches. A fixed wait either gives up on a standby that was about to
adopt the slot (and loads the survivors with the recovery) or waits idly where none will
come. So the wait is the largest of:

- ``FLOOR_S``, or the user's ``--standby-wait`` when given (then it is the wait, fixed);
- ``START_FACTOR`` times the slowest site task's start at the beginning of the run (job
  submission to registration: scheduling, the Python worker, the imports);
- ``ADOPTION_FACTOR`` times the slowest adoption seen in this run (failure detected to the
  standby adopting the slot): what this cluster's restarts really took;
- on a cluster whose executors' start was timed (a session sparkflux made: from the
  application's start until its executors had registered), ``ADOPTION_FACTOR`` times that
  start plus the sites' start: a lost executor's sites come back only once the worker has
  launched a new executor and Spark has started the tasks on it;

capped at ``CAP_S``.
"""

from __future__ import annotations

FLOOR_S = 5.0
START_FACTOR = 2.0
ADOPTION_FACTOR = 1.5
CAP_S = 60.0


def standby_wait(fixed: float | None, start_s: float | None = None,
                 adoptions_s: list[float] | tuple[float, ...] = (),
                 executor_start_s: float | None = None) -> float:
    """The wait: ``fixed`` if the user gave one, else the measured rule above.

    >>> standby_wait(None)
    5.0
    >>> standby_wait(None, start_s=4.0, adoptions_s=[3.0, 7.0])
    10.5
    >>> standby_wait(2.0, start_s=40.0)
    2.0
    >>> standby_wait(None, start_s=100.0)
    60.0
    >>> standby_wait(None, start_s=2.0, executor_start_s=6.0)
    12.0
    """
    if fixed is not None:
        return fixed
    wait = FLOOR_S
    if start_s is not None:
        wait = max(wait, START_FACTOR * start_s)
    if adoptions_s:
        wait = max(wait, ADOPTION_FACTOR * max(adoptions_s))
    if executor_start_s is not None:
        wait = max(wait, ADOPTION_FACTOR * (executor_start_s + (start_s or 0.0)))
    return min(wait, CAP_S)
