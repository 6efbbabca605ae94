"""Which side of a broken link the controller excludes: partial partitions as membership events.

A site that cannot reach a peer (its dial failed, or the link has been silent longer than the
link timeout while the site waited to read it) reports ``unreachable``; so does the peer, of
it, if its own report gets through. A report says only that the link between the two is
broken, not which end is at fault: a site cut off from every peer reports each of them, and
each of them reports it. Failing whichever site a report names would, on the first report of
the cut-off site, exclude a healthy one.

The rules:

1. A report (``by`` cannot reach ``site``) marks the link {by, site} broken, once both are
   live members; a report about a process that is no longer the slot's current one, or from
   a site no longer live, changes nothing (the controller filters those before).
2. Reports are collected for ``settle`` seconds after the first of a round, so both ends and
   every peer of a cut-off site have reported (each detects the same silence within one link
   check of the others).
3. Then, while a broken link joins two live sites, the site in the most broken links is
   excluded (a greedy vertex cover: the cut-off site first); ties go to the site named in more
   reports, then to the higher slot. Its links are struck off with it.

So a site cut off from its peers is excluded ``link timeout + settle`` after the cut at most,
and fails over like a crash; a single broken link costs one of its two ends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SETTLE_S = 0.2  # rule 2


@dataclass
class LinkJudge:
    settle: float = SETTLE_S
    broken: dict[frozenset[int], str] = field(default_factory=dict)  # link -> first reason
    named: Counter[int] = field(default_factory=Counter)  # reports naming a site unreachable
    since: float | None = None  # the first report of the round

    def report(self, by: int, site: int, reason: str, now: float) -> None:
        """Rule 1: ``by`` cannot reach ``site``."""
        if by == site:
            return
        self.broken.setdefault(frozenset((by, site)), f"site {by} cannot reach site {site}: "
                                                      f"{reason}")
        self.named[site] += 1
        if self.since is None:
            self.since = now

    def due(self, now: float) -> bool:
        # (a hair's tolerance: clocks in floats, and a settle that ends exactly at a tick)
        return self.since is not None and now - self.since >= self.settle - 1e-9

    def decide(self, live: set[int]) -> list[tuple[int, str]]:
        """Rule 3: the sites to exclude, each with why, and a fresh round."""
        links = {k: why for k, why in self.broken.items() if k <= live}
        out: list[tuple[int, str]] = []
        while links:
            degree: Counter[int] = Counter()
            for k in links:
                degree.update(k)
            worst = max(degree, key=lambda s: (degree[s], self.named[s], s))
            peers = sorted(j for k in links if worst in k for j in k if j != worst)
            first = next(why for k, why in links.items() if worst in k)
            out.append((worst, f"unreachable from {_sites(peers)}, cut off or hung ({first})"))
            links = {k: why for k, why in links.items() if worst not in k}
        self.broken.clear()
        self.named.clear()
        self.since = None
        return out


def _sites(sites: list[int]) -> str:
    return f"site {sites[0]}" if len(sites) == 1 else \
        "sites " + ", ".join(map(str, sites[:-1])) + f" and {sites[-1]}"
