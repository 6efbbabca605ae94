"""Emulated site capacity (``--site-cpu``, ``--slow``): a busy-time budget per site.

All sites of the embedded default share this machine's cores, so a site's capacity must be
emulated to make imbalance and lost capacity real (issue: on-line load balancing). A site
may be busy for at most ``cap`` of wall time: it earns ``cap`` seconds of budget per second,
spends what its event loop is busy, and sleeps whenever the budget is spent, so its
throughput is proportional to its cap and the total to the number of live sites. ``--slow``
multiplies one site's cap by a factor from a given moment (the thesis' extra process that
computes 100 us and sleeps 50 us). Pure arithmetic on times it is given: the runtime owns the
clock and the sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CpuCap:
    """Busy-time budget: ``spend`` busy seconds, get back how long to sleep now."""

    cap: float
    burst: float = 0.05  # seconds of busy time that may run ahead of the cap
    _budget: float = 0.0
    _last: float | None = None
    busy: float = 0.0
    slept: float = 0.0
    _window: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0.0 < self.cap <= 1.0:
            raise ValueError(f"--site-cpu must be in (0, 1], got {self.cap}")
        self._budget = self.burst  # a fresh site may start with its burst

    def scale(self, factor: float) -> None:
        """``--slow``: this site now gets ``factor`` times its capacity."""
        if factor <= 0:
            raise ValueError(f"a --slow factor must be positive, got {factor}")
        self.cap = min(1.0, self.cap * factor)

    def spend(self, now: float, busy: float) -> float:
        """Account ``busy`` seconds of work ending at ``now``; the sleep that keeps the cap."""
        if self._last is None:
            self._last = now - busy
        self._budget = min(self.burst, self._budget + (now - self._last) * self.cap) - busy
        self._last = now
        self.busy += busy
        if self._budget >= 0:
            return 0.0
        sleep = -self._budget / self.cap
        self.slept += sleep
        return sleep

    def slept_for(self, now: float) -> None:
        """The runtime slept until ``now``: that time earned budget too."""
        if self._last is not None:
            self._budget = min(self.burst, self._budget + (now - self._last) * self.cap)
        self._last = now
