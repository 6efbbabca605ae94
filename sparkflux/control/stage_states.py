"""Time in each consistency state per stage (``--consistency eventual``), sans I/O.

Borealis keeps the consistency machine (``protocol/consistency.py``) per node: a node is in
UPSTREAM_FAILURE while an input of its is incomplete, in STABILIZATION while it reconciles,
and STABLE again once its stable output has caught up. Here the machine runs once, for the
run's input, and every stage follows it:

- while the input's episode is in UPSTREAM_FAILURE, every stage is: what reaches it is
  incomplete (a merge's episode counts the same, from the stage whose merge waited on);
- once the input heals (STABILIZATION, heal point ``heal``), a stage stabilizes until its
  stable input has passed the heal point on every copy of every partition: the lowest
  input frontier over the live sites' last heartbeats (``lowest`` in the site core) at or
  above ``heal``. Then it is STABLE, while the stages after it may still redo;
- when the episode reconciles, every stage is STABLE.

The seconds are added up on every observation (each heartbeat and each judgment of the
input), so a stage's time in a state is known to the heartbeat (0.1 s).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sparkflux.protocol.consistency import State


class StageStates:
    """Per stage, the current consistency state and the seconds spent in each."""

    def __init__(self, stages: int) -> None:
        self.state = [State.STABLE] * stages
        self.seconds = [{s.value: 0.0 for s in State} for _ in range(stages)]
        self.since: float | None = None

    def observe(self, now: float, episode: State, heal: int | None,
                frontiers: Iterable[np.ndarray]) -> None:
        """At ``now``: the input's state and heal point, and the live sites' last reported
        lowest input frontier per stage (one array per site, ``END_OF_STREAM`` for a stage
        with no copy there)."""
        self._advance(now)
        low: np.ndarray | None = None
        for f in frontiers:
            if f.size == len(self.state):
                low = f.copy() if low is None else np.minimum(low, f)
        for k in range(len(self.state)):
            if episode is not State.STABILIZATION:
                self.state[k] = episode
            elif heal is not None and low is not None and int(low[k]) >= heal:
                self.state[k] = State.STABLE
            elif self.state[k] is not State.STABLE:
                # (a stage once past the heal point stays so until the episode reconciles)
                self.state[k] = State.STABILIZATION

    def time_in(self, now: float) -> list[dict[str, float]]:
        """Per stage, the seconds in each state up to ``now``."""
        out = [dict(s) for s in self.seconds]
        if self.since is not None:
            for k, st in enumerate(self.state):
                out[k][st.value] += max(0.0, now - self.since)
        return out

    def _advance(self, now: float) -> None:
        if self.since is not None:
            dt = max(0.0, now - self.since)
            for k, st in enumerate(self.state):
                self.seconds[k][st.value] += dt
        self.since = now if self.since is None else max(self.since, now)
