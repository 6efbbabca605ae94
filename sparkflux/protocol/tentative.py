"""A site's tentative branches (Borealis' tentative processing, ``consistency.py``).

While a failure episode is open, tentative rows reach the first live copy of each partition
of a stage. The first one that reaches a partition *forks* it: its operators' stable state
is copied into a branch of the stage's program (one per stage per site: a copy of the
program with every partition dropped), and every tentative row of the episode is processed
there. The stable state is never touched by a tentative row: it is the paper's checkpoint
at the last stable bucket, and the stable rows that replay the backlog continue from it
(the paper's redo) without any rollback. The branch's output goes on, tentative, to the
first live copy of each next-stage partition, or to the egress. ``Reconciled`` drops the
episode's branches.

A branch runs on the frontier its senders claim (the lowest claim of every sender heard in
the episode): it does not wait for a sender it has not heard from, which is the point of
processing tentatively. Rows for a partition this site does not hold as its first live copy
(a view that moved on), or holds on disk, are left out: tentative rows are best effort.
"""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.placement import NOWHERE
from sparkflux.dataflow.program import StageProgram
from sparkflux.model.batch import concat, sort_by_sn
from sparkflux.model.progress import Frontier, Progress
from sparkflux.model.schema import PART, SRC
from sparkflux.protocol.consistency import TENTATIVE_BASE
from sparkflux.protocol.messages import Outgoing, Tentative

MERGE = -2  # the sender of rows a site's own merge releases by the delay bound


class Branches:
    """The tentative branches of one site: per stage, a program with the forked partitions."""

    def __init__(self) -> None:
        self.epoch = 0  # the episode the branches belong to
        self.closed = 0  # every episode up to this one is reconciled
        self.programs: dict[int, StageProgram] = {}
        self.forked: dict[int, set[int]] = {}
        self.claims: dict[int, dict[int, tuple[int, int]]] = {}  # stage -> sender -> claim
        self.rows_in = 0  # tentative rows processed here (a statistic)
        # the episode is the input's: its tentative rows are numbered apart (the ingress
        # sends every record tentatively, so the merges add nothing: ``SiteCore.clock``)
        self.from_input = False
        # (stage, site) -> the claim last sent there: a claim alone goes only when it moved,
        # or every copy's claims would multiply along a chain (N sites, N^k messages)
        self.told: dict[tuple[int, int], tuple[int, int]] = {}

    @property
    def open(self) -> bool:
        """Whether a branch of an episode not yet reconciled runs here."""
        return self.epoch > self.closed and bool(self.programs)

    def reconciled(self, epoch: int) -> None:
        """Episode ``epoch`` is over: its branches go."""
        self.closed = max(self.closed, epoch)
        if self.epoch <= self.closed:
            self.programs.clear()
            self.forked.clear()
            self.claims.clear()
            self.told.clear()
            self.from_input = False

    def feed(self, s: int, epoch: int, rows: pa.RecordBatch | None, sn: int, wm: int,
             sender: int, stable: StageProgram, mine: np.ndarray, fork: np.ndarray
             ) -> tuple[pa.RecordBatch, int, int] | None:
        """Rows for stage ``s``'s branch of episode ``epoch`` from ``sender`` (a site, the
        driver, or ``MERGE``: this site's own merge, released by the delay bound), with
        the sender's claim ``(sn, wm)``; the partitions ``fork`` (of ``mine``) are forked
        from the stable state first if they are not yet."""
        return self.feed_many(s, epoch, [(sender, rows, sn, wm)], stable, mine, fork)

    def feed_many(self, s: int, epoch: int,
                  parts: list[tuple[int, pa.RecordBatch | None, int, int]],
                  stable: StageProgram, mine: np.ndarray, fork: np.ndarray
                  ) -> tuple[pa.RecordBatch, int, int] | None:
        """``feed`` of several messages of one pass at once, ``(sender, rows, sn, wm)`` in
        arrival order: every claim is taken, and the branch runs once over all the rows
        (as the stable path runs the operators once per pass: the thesis' FluxPooler),
        in SN order, under the lowest of the claims then known."""
        if epoch <= self.closed:
            return None
        if epoch != self.epoch:
            self.reconciled(self.epoch)
            self.epoch = epoch
        prog = self.programs.get(s)
        if prog is None:  # the stage's program with no partition in it
            prog = self.programs[s] = copy.deepcopy(stable)
            for op in prog.operators:
                for q in range(mine.size):
                    op.drop_partition(q)
        forked = self.forked.setdefault(s, set())
        for q in (int(x) for x in np.flatnonzero(fork & mine)):
            if q not in forked:  # fork: the stable state as the branch's start
                for mine_op, op in zip(prog.operators, stable.operators, strict=True):
                    mine_op.install_partition_state(q, copy.deepcopy(
                        op.get_partition_state(q)))
                forked.add(q)
        claims = self.claims.setdefault(s, {})
        for sender, _, sn, wm in parts:
            claims[sender] = (sn, wm)
            self.from_input |= sn >= TENTATIVE_BASE
        if self.from_input:
            # the input's episode: its claims are in the tentative numbering (the ingress's
            # first, before any row, is the one just below it); a claim in stable SNs (a
            # merge that released rows by the delay bound before the input's rows came)
            # would hold every tentative row back until the reconciliation
            for k in [k for k, c in claims.items() if c[0] < TENTATIVE_BASE - 1]:
                del claims[k]
        if claims:
            sn = min(c[0] for c in claims.values())
            wm = min(c[1] for c in claims.values())
        in_branch = np.zeros(mine.size, dtype=bool)
        in_branch[list(forked)] = True
        in_branch &= mine
        got = [r for _, r, _, _ in parts if r is not None and r.num_rows]
        rows = (got[0] if len(got) == 1 else concat(got)) if got else None
        if rows is not None:
            keep = in_branch[rows.column(PART).to_numpy()]
            rows = rows.filter(pa.array(keep)) if not keep.all() else rows
        if rows is None or not rows.num_rows:
            rows = _empty_input(prog)
        else:
            rows = sort_by_sn(rows.drop_columns([SRC]))
            self.rows_in += rows.num_rows
        out, front = prog.run(rows, Frontier.every(Progress(sn, wm), mine.size))
        held = np.flatnonzero(in_branch)
        if not held.size:
            return out, sn, wm
        return out, int(front.sn[held].min()), int(front.wm[held].min())

    def news(self, sends: list[Outgoing]) -> list[Outgoing]:
        """``sends`` without the claims alone that tell their site nothing new."""
        out = []
        for o in sends:
            m = o.message
            assert isinstance(m, Tentative)
            key, claim = (m.stage, o.site), (m.sn, m.wm)
            if m.rows is None and self.told.get(key) == claim:
                continue
            self.told[key] = claim
            out.append(o)
        return out


def _empty_input(prog: StageProgram) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=prog.in_schema)


def tentative_sends(rows: pa.RecordBatch, first_live: np.ndarray, stage: int, epoch: int,
                    sn: int, wm: int) -> list[Outgoing]:
    """``Tentative`` messages for ``stage``: each row (``_part``: its partition there) to its
    partition's first live copy, every site holding one told the claim ``(sn, wm)``."""
    part = rows.column(PART).to_numpy() if rows.num_rows else np.zeros(0, np.int32)
    dest = first_live[part] if part.size else part
    out: list[Outgoing] = []
    for site in sorted({int(x) for x in first_live if x != NOWHERE}):
        mine = dest == site
        batch = rows.filter(pa.array(mine)) if mine.any() else None
        out.append(Outgoing(site, Tentative(stage, epoch, batch, sn, wm)))
    return out
