"""Replica placement: chained declustering over mini-partitions (thesis §3.1, digest §3).

Replica ``r`` of mini-partition ``q`` (the same for every stage) lives on site ``(q + r) mod N``:
the primary of partition k on site k, its copy on k+1. Two replicas of a partition never share
a site, and with N = 4 one site failure produces all four survival cases of a partition-pair
quartet. The driver (ingress and egress) is site ``DRIVER``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparkflux.operators.base import PlanError

DRIVER = -1


@dataclass(frozen=True)
class Layout:
    """Where every replica of every mini-partition lives."""

    sites: int
    partitions: int
    replicas: int  # 1 (--ha none) or 2 (--ha flux)

    def __post_init__(self) -> None:
        if self.replicas not in (1, 2):
            raise PlanError(f"replicas must be 1 or 2 (got {self.replicas})")
        if self.replicas == 2 and self.sites < 2:
            raise PlanError("--ha flux keeps two replicas on different sites: use --sites >= 2")

    def site_of(self, part: int, replica: int) -> int:
        return (part + replica) % self.sites

    def table(self) -> np.ndarray:
        """``site[q, r]`` for every partition and replica (int32)."""
        q = np.arange(self.partitions)[:, None]
        r = np.arange(self.replicas)[None, :]
        return ((q + r) % self.sites).astype(np.int32)

    def hosted(self, site: int) -> dict[int, int]:
        """The partitions site ``site`` holds a replica of, as {partition: replica}."""
        out: dict[int, int] = {}
        for r in range(self.replicas):
            for q in range(self.partitions):
                if self.site_of(q, r) == site:
                    out[q] = r
        return out
