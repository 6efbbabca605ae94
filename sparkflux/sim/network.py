"""Simulated links between nodes (sites and the driver) with a seeded scheduler.

A link is a queue per ordered pair of nodes and channel, FIFO as TCP is per connection
(docs/design.md §4), except where the runtime itself reorders before the socket: on a data
connection, the frames that must keep their place among the rows (``Data``, ``retaining``,
``psync``: ``protocol/channels.py``) may wait in the sender's skew buffer while
every other frame (acknowledgements, ``reverse``, ``rejoin``, ``retain``, ...) is written at
once. So a frame of the second class may overtake frames of the first sent before it, never
the other way round, and each class stays FIFO within itself: the scheduler delivers either
a link's head or its first frame that ``overtakes`` allows to pass what is ahead of it.
Channel ``DATA`` is the pair's data connection; channel
``CONTROL`` is the driver's control connection to a site, which the runtime keeps apart so
that a ``move`` or a ``fail`` never waits behind input the site has not read yet, or between
two sites the StateMover's connection (a snapshot one way, ``installed`` back): nothing
orders the two channels. The scheduler picks, with the seed's random generator, which
non-empty link delivers its head next, so every interleaving the real network allows can
occur, and a seed replays exactly.

Wide-area links (``latency``, the runtime's ``--wan``): a frame from ``src`` to ``dst`` can
be delivered only ``latency(src, dst)`` steps after it was sent (the model may add a random
jitter); a link whose head is not due yet is not busy, and a frame that may overtake must be
due itself. Links stay FIFO per class as above, so a far copy's frames arrive late but in
order, and the scheduler still picks among the due links at random.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparkflux.protocol.control_messages import CONTROL_TYPES

DATA, CONTROL = 0, 1


def _never(message: Any) -> bool:
    return False


def _open(src: int, dst: int) -> bool:
    return False


@dataclass
class Network:
    rng: np.random.Generator
    # the frames that the runtime may write ahead of data held for the same connection
    overtakes: Callable[[Any], bool] = _never
    # whether nothing crosses from src to dst now (a hung reader, a cut link): such a link
    # keeps its frames until it opens again
    blocked: Callable[[int, int], bool] = _open
    links: dict[tuple[int, int, int], deque[Any]] = field(default_factory=dict)
    delivered: int = 0
    overtaken: int = 0  # deliveries that passed an earlier frame (the runtime's reordering)
    # the steps a frame takes from src to dst (None: none); ``now``: the simulator's step
    latency: Callable[[int, int], int] | None = None
    now: int = 0
    due: dict[tuple[int, int, int], deque[int]] = field(default_factory=dict)  # per frame

    def send(self, src: int, dst: int, message: Any, channel: int = DATA) -> None:
        key = (src, dst, channel)
        self.links.setdefault(key, deque()).append(message)
        wait = self.latency(src, dst) if self.latency is not None else 0
        self.due.setdefault(key, deque()).append(self.now + wait)

    def _ready(self, k: tuple[int, int, int]) -> bool:
        return bool(self.links[k]) and self.due[k][0] <= self.now \
            and not self.blocked(k[0], k[1])

    def busy(self) -> list[tuple[int, int, int]]:
        return [k for k in self.links if self._ready(k)]

    def in_flight(self) -> bool:
        """Whether some open link holds a frame that is not due yet (time must go on)."""
        return any(q and self.due[k][0] > self.now and not self.blocked(k[0], k[1])
                   for k, q in self.links.items())

    def pop(self) -> tuple[int, int, Any] | None:
        """Deliver the head of a randomly chosen non-empty link."""
        busy = self.busy()
        if not busy:
            return None
        link = busy[int(self.rng.integers(len(busy)))]
        self.delivered += 1
        return link[0], link[1], self._take(link)

    def _take(self, link: tuple[int, int, int]) -> Any:
        """The link's head, or (at random) its first frame that may pass the frames ahead
        of it: those are all of the class the runtime holds back (data, ``retaining``,
        ``psync``)."""
        q, due = self.links[link], self.due[link]
        # (a link's set-up, a tuple, comes before anything on it: nothing overtakes it)
        if link[2] == DATA and len(q) > 1 and not self.overtakes(q[0]) \
                and not isinstance(q[0], tuple) and self.rng.random() < 0.5:
            for i in range(1, len(q)):
                if due[i] > self.now:
                    break
                if self.overtakes(q[i]):
                    m = q[i]
                    del q[i]
                    del due[i]
                    self.overtaken += 1
                    return m
        due.popleft()
        return q.popleft()

    def pop_to(self, dst: int) -> tuple[int, Any] | None:
        """Deliver the head of a random non-empty link into ``dst`` whose head is a protocol
        message (not a control frame of the driver's, nor the simulator's own ``hello``),
        or None."""
        busy = [k for k, q in self.links.items()
                if k[1] == dst and self._ready(k)
                and not isinstance(q[0], (tuple, *CONTROL_TYPES))]
        if not busy:
            return None
        link = busy[int(self.rng.integers(len(busy)))]
        self.delivered += 1
        return link[0], self._take(link)  # control frames and tuples never overtake

    def drop_to(self, node: int) -> None:
        """A crashed node receives nothing more."""
        for k, q in self.links.items():
            if k[1] == node:
                q.clear()
                self.due[k].clear()

    def forget(self, node: int) -> None:
        """A new process takes the node's place: nothing of the old one's traffic remains."""
        for k, q in self.links.items():
            if node in (k[0], k[1]):
                q.clear()
                self.due[k].clear()

    def drop_some_from(self, node: int) -> None:
        """A crash loses a random suffix of what the node had sent but not yet delivered."""
        for k, q in self.links.items():
            if k[0] == node and q:
                keep = int(self.rng.integers(len(q) + 1))
                while len(q) > keep:
                    q.pop()
                    self.due[k].pop()
