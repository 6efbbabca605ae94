"""Eventual consistency (Borealis' DPC): tentative rows while an input is cut, then corrections.

Strict consistency (the default) waits for every input: when a source stops, SUnion at the
ingress (``sequencer.py``) holds every other source's records until it speaks again, and the
output stands still for as long. With ``--consistency eventual --max-delay X`` the run keeps
answering: a record that waited X for a silent source is processed without it, and what is
made of it is *tentative*; when the source is back, the stable rows replace the tentative
ones, so the stable output is exactly what a run without the failure gives.

The failure episode follows Borealis' state machine (``TRANSITIONS``), kept for the run's
input by the ingress:

- ``STABLE``: every input speaks; nothing tentative.
- ``UPSTREAM_FAILURE``: a held record waited X for sources that have not passed it
  (``blocked``, SUnion's rule; in an open episode: while a source was silent for X).
  The episode opens at the last stable SN ``base``: the egress holds every stable row
  above it from now on (a correction, delivered whole at the end). The records
  of the other sources go on, in SUnion's order, as tentative rows (numbered apart,
  ``TENTATIVE_BASE`` up) to the first live copy of each first-stage partition, which forks
  its stable state into a tentative branch (``tentative.py``). The stable state is the
  paper's checkpoint: it is never touched by a tentative row.
- ``STABILIZATION``: the silent source spoke again and the stable release has reached
  everything sent tentatively (``healed``): the stable rows flow from the checkpoint on
  (the paper's redo), and ``heal`` is the last stable SN the backlog ends at. New input
  keeps going tentatively as well (``process``, ``delay``), so the output goes on while the
  stages work through the backlog, which is what the paper's staggered replicas provide;
  ``suspend`` sends nothing tentative here, as the paper's counter-example does.
- Back to ``STABLE`` once the stable output has passed ``heal`` (``caught-up``): the egress
  delivers an ``undo`` (every tentative row so far is retracted), the held stable rows, and
  ``rec_done``; every site drops the episode's branches (``Reconciled``).

A failure during stabilization returns to ``UPSTREAM_FAILURE`` in the same episode.

Modes (``--tentative-mode``): ``process`` sends a record tentatively as soon as the episode
is open; ``delay`` holds each one until it has waited X (as much as the bound allows);
``suspend`` is ``process`` in upstream failure and nothing during stabilization.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

import numpy as np

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition

# Tentative rows are numbered from here up, apart from every stable SN a run hands out.
TENTATIVE_BASE = 1 << 52

Mode = Literal["process", "delay", "suspend"]
MODES: tuple[Mode, ...] = ("process", "delay", "suspend")


class ConsistencyError(ProtocolError):
    """An impossible transition of the consistency machine."""


class State(Enum):
    STABLE = "stable"
    UPSTREAM_FAILURE = "upstream-failure"
    STABILIZATION = "stabilization"


class Ev(Enum):
    BLOCKED = "blocked"  # a held record waited the delay bound for sources behind it
    HEALED = "healed"  # the stable release reached everything released tentatively
    CAUGHT_UP = "caught-up"  # the stable output passed the heal point


OPEN, SEND, HEAL, RECONCILE = "open-episode", "send-tentative", "set-heal-point", "reconcile"

TRANSITIONS: dict[tuple[State, Ev], tuple[State, tuple[str, ...]]] = {
    (State.STABLE, Ev.BLOCKED): (State.UPSTREAM_FAILURE, (OPEN, SEND)),
    (State.STABLE, Ev.HEALED): (State.STABLE, ()),
    (State.STABLE, Ev.CAUGHT_UP): (State.STABLE, ()),
    (State.UPSTREAM_FAILURE, Ev.BLOCKED): (State.UPSTREAM_FAILURE, (SEND,)),
    (State.UPSTREAM_FAILURE, Ev.HEALED): (State.STABILIZATION, (HEAL, SEND)),
    # the output passed an earlier heal point while the input failed again: wait for the next
    (State.UPSTREAM_FAILURE, Ev.CAUGHT_UP): (State.UPSTREAM_FAILURE, ()),
    (State.STABILIZATION, Ev.BLOCKED): (State.UPSTREAM_FAILURE, (SEND,)),
    (State.STABILIZATION, Ev.HEALED): (State.STABILIZATION, (SEND,)),
    (State.STABILIZATION, Ev.CAUGHT_UP): (State.STABLE, (RECONCILE,)),
}


@dataclass(frozen=True, slots=True)
class Eventual:
    """``--consistency eventual``: ``max_delay`` (X, seconds) and the mode."""

    max_delay: float
    mode: Mode = "process"


@dataclass
class Episode:
    """The ingress's consistency machine and what the open failure episode holds."""

    config: Eventual
    state: State = State.STABLE
    epoch: int = 0  # the open (or last) episode; 0: none yet
    base: int = -1  # the last stable SN when it opened: stable rows above it are corrections
    heal: int | None = None  # the last stable SN of the backlog (STABILIZATION on)
    failed: frozenset[int] = frozenset()  # the silent sources
    sent_to: tuple[int, int] = (0, 0)  # the merged order's (et, stream) sent tentatively
    certain: tuple[int, int] = (0, 0)  # the highest bound the speaking sources have made
    next_tsn: int = TENTATIVE_BASE
    since: float | None = None  # when the current state began (None: before the first event)
    seconds: dict[str, float] = field(default_factory=lambda: {s.value: 0.0 for s in State})
    history: list[tuple[float, str]] = field(default_factory=list)  # (when, state entered)

    def on(self, event: Ev, now: float) -> tuple[str, ...]:
        """Move the machine; returns the actions the ingress carries out, in order."""
        nxt, actions = transition(TRANSITIONS, self.state, event, ConsistencyError,
                                  f"the input's consistency (episode {self.epoch})")
        if self.since is None:
            self.since = now
        if nxt is not self.state:
            self.seconds[self.state.value] += max(0.0, now - self.since)
            self.state, self.since = nxt, now
            self.history.append((now, nxt.value))
        return actions

    def time_in(self, now: float) -> dict[str, float]:
        """Seconds spent in each state so far."""
        out = dict(self.seconds)
        out[self.state.value] += max(0.0, now - (now if self.since is None else self.since))
        return out

    def sends(self) -> bool:
        """Whether new input goes tentatively too in the current state."""
        if self.state is State.UPSTREAM_FAILURE:
            return True
        return self.state is State.STABILIZATION and self.config.mode != "suspend"

    def number(self, n: int) -> np.ndarray:
        """Tentative SNs for ``n`` rows."""
        out = np.arange(self.next_tsn, self.next_tsn + n, dtype=np.int64)
        self.next_tsn += n
        return out


def silent(heard_at: np.ndarray, ended: np.ndarray, now: float, delay: float) -> frozenset[int]:
    """The open sources not heard from for ``delay`` seconds."""
    quiet = (now - heard_at >= delay) & ~ended
    return frozenset(int(j) for j in np.flatnonzero(quiet))
