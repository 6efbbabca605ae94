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
   a site no longer live, changes nothing (the controller filters those before), and when a
   slot's process fails, every report about its links is forgotten: the slot's next process
   starts clean. A site repeats its report every link timeout while the silence lasts.
2. Reports are collected for ``settle`` seconds after the first of a round, so that both
   ends and the other peers of a cut-off site have reported too.
3. Then, while a broken link joins two live sites, the site in the most broken links is
   excluded (a greedy vertex cover: the cut-off site first); ties go to the site named in
   more reports, then to the higher slot. Its links are struck off with it.
4. A lone broken link (no site in two) says nothing of which end is cut off: the peers of a
   cut-off site may simply not have reported yet (each checks its links on its own clock).
   It waits ``patience`` seconds from its first report for more before rule 3 picks an end.
5. A site that is moving state (the survivor or the new copy of a catch-up) may stall while
   it snapshots or installs: its links are not judged while it does; their reports are
   dropped, and a real cut is reported again (rule 1) once the transfer is over.
6. A site the controller must keep (``keep``: it holds the only live complete copy of a
   partition, once the sites picked before it are gone) is never picked: the other end of
   its broken links is, and when only such sites are left, their links are dropped and the
   run waits for them to heal (a network partition between live sites; they are reported
   again while it lasts).

So a site cut off from its peers is excluded ``link timeout + settle`` after the cut, plus
the sites' and the driver's loop delays, and fails over like a crash; a single broken link
costs one of its two ends after ``patience``. The controller consults the judge only with
replicas to fail over to: with one copy, a silent site is waited for (the watchdog names it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

SETTLE_S = 0.2  # rule 2
PATIENCE_S = 1.0  # rule 4


@dataclass
class LinkJudge:
    settle: float = SETTLE_S
    patience: float = PATIENCE_S
    # link -> (the first report's reason, when it came)
    broken: dict[frozenset[int], tuple[str, float]] = field(default_factory=dict)
    named: Counter[int] = field(default_factory=Counter)  # reports naming a site unreachable
    # the sites the last ``decide`` kept with a broken link (rule 6), each with why
    kept: list[tuple[int, str]] = field(default_factory=list)

    @property
    def since(self) -> float | None:
        """When the oldest report still to judge came (None: nothing to judge)."""
        return min((at for _, at in self.broken.values()), default=None)

    def report(self, by: int, site: int, reason: str, now: float) -> None:
        """Rule 1: ``by`` cannot reach ``site``."""
        if by == site:
            return
        self.broken.setdefault(frozenset((by, site)),
                               (f"site {by} cannot reach site {site}: {reason}", now))
        self.named[site] += 1

    def forget(self, site: int) -> None:
        """Slot ``site``'s process failed: its links' reports concern a process that is gone
        (the slot's next one must not inherit them)."""
        self.broken = {k: v for k, v in self.broken.items() if site not in k}
        self.named.pop(site, None)

    def due(self, now: float) -> bool:
        # (a hair's tolerance: clocks in floats, and a settle that ends exactly at a tick)
        since = self.since
        return since is not None and now - since >= self.settle - 1e-9

    def decide(self, live: set[int], now: float, busy: frozenset[int] = frozenset(),
               keep: Callable[[int, frozenset[int]], bool] | None = None
               ) -> list[tuple[int, str]]:
        """Rules 3-6: the sites to exclude now, each with why; ``busy``: the sites moving
        state (rule 5); ``keep(site, gone)``: whether ``site`` must stay once the sites
        ``gone`` are excluded (rule 6). Links still to judge stay for the next call; the
        sites kept with a broken link are in ``kept`` until the next call."""
        links = {k: v for k, v in self.broken.items() if k <= live and not k & busy}
        out: list[tuple[int, str]] = []
        self.kept = []
        while links:
            degree: Counter[int] = Counter()
            for k in links:
                degree.update(k)
            gone = frozenset(s for s, _ in out)
            kept = {s for s in degree if keep is not None and keep(s, gone)}
            free = [s for s in degree if s not in kept]
            if not free:  # rule 6: every end left must stay; the links wait to heal
                self.kept = [(s, self._why(s, links)) for s in sorted(kept)]
                links = {}
                break
            worst = max(free, key=lambda s: (degree[s], self.named[s], s))
            if degree[worst] < 2 and now - min(at for _, at in links.values()) \
                    < self.patience - 1e-9:
                break  # rule 4: lone links wait for more reports
            out.append((worst, self._why(worst, links)))
            links = {k: v for k, v in links.items() if worst not in k}
        self.broken = links
        self.named = Counter({s: n for s, n in self.named.items() if any(s in k for k in links)})
        return out

    @staticmethod
    def _why(site: int, links: dict[frozenset[int], tuple[str, float]]) -> str:
        peers = sorted(j for k in links if site in k for j in k if j != site)
        first = next(why for k, (why, _) in links.items() if site in k)
        return f"unreachable from {_sites(peers)}, cut off or hung ({first})"


def _sites(sites: list[int]) -> str:
    return f"site {sites[0]}" if len(sites) == 1 else \
        "sites " + ", ".join(map(str, sites[:-1])) + f" and {sites[-1]}"
