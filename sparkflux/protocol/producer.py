"""FH-Prod: the output buffers of the producer replicas one site hosts for one exchange.

The paper's buffer (SIGMOD Fig. 3) at batch granularity, vectorized over
every producer replica ``p`` the site hosts, every consumer partition ``q`` and every consumer
replica ``c``:

- ``send[p, q, c]``: stream p -> q goes to consumer replica c (``conn[d] ∋ SEND``). Normally
  only c = r, the *primary* destination in my own dataflow copy.
- ``wait[p, q, c]``: a row may leave the buffer only once c has acknowledged it
  (``del ∋ SEC``). Normally only c = 1 - r, the *secondary* consumer in the dual copy.
- ``acked[p, q, c]``: the cumulative acknowledgement from c: the paper's PRIM/SEC marks as
  offsets. An ack beyond what p has produced is a *dangling* SN: rows produced later at or
  below it are never sent to c (the duplicate filter) and need no further ack.

A row is sent to c when produced if ``send`` and its SN is above ``acked`` (action 2) and is
evicted once every waiting consumer has acknowledged it (``put``/``ack`` with ``del``).
Take-over (SIGMOD §3.2, §5.2): ``fail`` of consumer replica c is ``ack_all``: c neither
receives nor holds rows back any more; ``reverse`` from c is ``reset``: send c every buffered
row above its acknowledgement, then send to it and stop waiting for it (``del += {SEC}`` with
``conn[SEC] := {SEND}``). The ingress is the same buffer with one producer that sends to and
waits for both replicas of every first-stage partition (``del = {PROD, PRIM, SEC}``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import concat
from sparkflux.model.progress import NO_PROGRESS, NO_WATERMARK
from sparkflux.model.schema import PART, SN
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import (
    SRC,
    Ack,
    Data,
    Outgoing,
    Rejoin,
    Rejoined,
    Reverse,
    Streams,
)

FromConsumer = TypeVar("FromConsumer", Ack, Reverse, Rejoin)


class ProducerBuffer:
    """FH-Prod buffers of the hosted producer replicas for the exchange into ``stage``."""

    def __init__(self, stage: int, producers: dict[int, int], consumer_site: np.ndarray,
                 send: np.ndarray, wait: np.ndarray, schema: pa.Schema,
                 hosted: np.ndarray | None = None) -> None:
        self.stage = stage
        self.parts = np.array(sorted(producers), dtype=np.int32)
        self.replica = np.array([producers[p] for p in self.parts], dtype=np.int8)
        n_all = int(self.parts.max()) + 1 if self.parts.size else 0
        self.index = np.full(max(n_all, 1), -1, dtype=np.int32)
        self.index[self.parts] = np.arange(self.parts.size, dtype=np.int32)
        # [Q, C]: the layout's live table (moves change it in place), or the egress' [[-1]]
        self.site = np.asarray(consumer_site, dtype=np.int32)
        self.send = send.astype(bool).copy()  # [Pn, Q, C]
        self.wait = wait.astype(bool).copy()
        self.acked = np.full(self.send.shape, NO_PROGRESS, dtype=np.int64)
        # [Pn]: the producer replicas live here (installed, not moved away). Rows a replica
        # produced before it was dropped may still sit behind the head of the buffer; they
        # wait for nobody and must not be held again for a later consumer's catch-up.
        self.hosted = (np.ones(self.parts.size, dtype=bool) if hosted is None
                       else np.asarray(hosted, dtype=bool).copy())
        self.progress_sn = np.full(self.parts.size, NO_PROGRESS, dtype=np.int64)
        self.progress_wm = np.full(self.parts.size, NO_WATERMARK, dtype=np.int64)
        self.schema = schema  # wire schema: stage input columns + _src
        self.buffer: deque[pa.RecordBatch] = deque()
        # per buffered batch, its streams (p index, q) and the highest SN of each: whether a
        # batch may be evicted depends on those alone, so ``evict`` (run on every batch of
        # acks) need not scan the batch's rows again
        self._streams: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()
        self.rows_sent = 0

    # -- queries -----------------------------------------------------------------------------
    def buffered_rows(self) -> int:
        return sum(b.num_rows for b in self.buffer)

    def pi(self, p: int) -> int:
        i = int(self.index[p]) if 0 <= p < self.index.size else -1
        if i < 0:
            raise ProtocolError(f"exchange into stage {self.stage}: producer {p} not hosted here")
        return i

    # -- action 1 + 2: put produced rows, send them to their current destinations ------------
    def produce(self, batch: pa.RecordBatch | None, progress_sn: np.ndarray,
                progress_wm: np.ndarray) -> list[Outgoing]:
        """Buffer and send ``batch`` (rows with ``_part`` = q and ``_src`` = p); new progress."""
        advanced = bool((progress_sn > self.progress_sn).any())
        np.maximum(self.progress_sn, progress_sn, out=self.progress_sn)
        np.maximum(self.progress_wm, progress_wm, out=self.progress_wm)
        rows: pa.RecordBatch | None = batch if batch is not None and batch.num_rows else None
        per_site: dict[int, list[np.ndarray]] = {}
        if rows is not None:
            pi, q, sn = self._keys(rows)
            for c in range(self.send.shape[2]):
                go = self.send[pi, q, c] & (sn > self.acked[pi, q, c])
                if go.any():
                    idx = np.flatnonzero(go)
                    dest = self.site[q[idx], c]
                    for s in np.unique(dest):
                        per_site.setdefault(int(s), []).append(idx[dest == s])
            # put(): keep a row only while some consumer it waits for has not acknowledged it;
            # a dangling SN (an ack that came first) evicts it at once.
            held = (self.wait[pi, q, :] & (sn[:, None] > self.acked[pi, q, :])).any(axis=1)
            if held.all():
                self.buffer.append(rows)
                self._streams.append(_highest(pi, q, sn, self.send.shape[1]))
            elif held.any():
                self.buffer.append(rows.filter(pa.array(held)))
                self._streams.append(_highest(pi[held], q[held], sn[held], self.send.shape[1]))
        if not per_site and not advanced:
            return []
        out: list[Outgoing] = []
        for s in self._target_sites():
            parts = per_site.get(s)
            data = None
            if parts:
                idx = np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]
                assert rows is not None  # per_site is filled from rows only
                data = rows.take(pa.array(idx))
                self.rows_sent += data.num_rows
            elif not advanced:
                continue
            out.append(Outgoing(s, Data(self.stage, self._streams_to(s), data)))
        return out

    def _keys(self, rows: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = rows.column(SRC).to_numpy()
        pi = self.index[src]
        if (pi < 0).any():
            raise ProtocolError(f"exchange into stage {self.stage}: rows of a producer not hosted")
        return pi, rows.column(PART).to_numpy(), rows.column(SN).to_numpy()

    def _target_sites(self) -> list[int]:
        q, c = np.nonzero(self.send.any(axis=0))
        return sorted({int(s) for s in self.site[q, c]})

    def _streams_to(self, site: int) -> Streams:
        pi, q, c = np.nonzero(self.send & (self.site[None, :, :] == site))
        return Streams(p=self.parts[pi], r=self.replica[pi], q=q.astype(np.int32),
                       sn=self.progress_sn[pi], wm=self.progress_wm[pi])

    # -- action 3: acknowledgements ------------------------------------------------------------
    def from_site(self, msg: FromConsumer, src: int | None) -> FromConsumer:
        """The entries of an ``ack`` / ``reverse`` / ``rejoin`` whose consumer replica (q, c)
        lives on ``src``, the sending site (None: trust all). One from a replica that has been
        moved away since is stale and must not count for, or set the roles of, the replica's
        new incarnation."""
        if src is None:
            return msg
        k = self.site[msg.q, msg.c.astype(np.intp)] == src
        if k.all():
            return msg
        return replace(msg, **{f: getattr(msg, f)[k] for f in msg.__dataclass_fields__
                               if f != "stage"})

    def on_ack(self, ack: Ack, src: int | None = None, evict: bool = True) -> None:
        """Action 3: a consumer's cumulative acknowledgement. ``evict=False`` defers the
        eviction to an ``evict()`` call (a batch of acks, one eviction)."""
        ack = self.from_site(ack, src)
        if ack.p.size and (ack.p.min() < 0 or ack.p.max() >= self.index.size):
            raise ProtocolError(f"ack for stage {self.stage} names producer partitions "
                                f"{sorted(set(ack.p.tolist()))}, outside 0..{self.index.size - 1}")
        pi = self.index[ack.p]
        # an ack for a copy not hosted here (moved away, or not installed yet: ``install``
        # starts from no acknowledgement anyway) is stale
        mine = (pi >= 0) & self.hosted[np.maximum(pi, 0)]
        if not mine.all():
            pi, ack = pi[mine], replace(ack, p=ack.p[mine], q=ack.q[mine], c=ack.c[mine],
                                        upto=ack.upto[mine])
        np.maximum.at(self.acked, (pi, ack.q, ack.c.astype(np.intp)), ack.upto)
        if evict:
            self.evict()

    def evict(self) -> None:
        """Drop buffered batches from the front while every waiting consumer has
        acknowledged all of their rows (a stream's rows are held iff its highest SN is)."""
        while self.buffer:
            pi, q, sn = self._streams[0]
            if (self.wait[pi, q, :] & (sn[:, None] > self.acked[pi, q, :])).any():
                return
            self.buffer.popleft()
            self._streams.popleft()

    # -- take-over -----------------------------------------------------------------------------
    def on_fail(self, dead: np.ndarray) -> None:
        """``ack_all`` for every dead consumer replica: ``dead[q, c]``."""
        self.send[:, dead] = False
        self.wait[:, dead] = False
        self.evict()

    def on_reverse(self, rev: Reverse, src: int | None = None) -> list[Outgoing]:
        """``reset(SEC)``: send each reversing consumer every buffered row above its
        acknowledgement, then keep sending to it and stop waiting for it."""
        rev = self.from_site(rev, src)
        if not rev.p.size:
            return []
        pi = self.index[rev.p]
        if (pi < 0).any():
            raise ProtocolError(f"reverse for stage {self.stage} reached the wrong replica: "
                                f"asked {list(zip(rev.p.tolist(), rev.r.tolist(), strict=True))}")
        # A reverse to a copy that has left this site since (retired, or its partition now
        # lives here in another column) is stale: the consumer reverses again when it learns
        # of the retirement, which every site does before any later move.
        mine = self.hosted[pi] & (self.replica[pi] == rev.r)
        if not mine.all():
            rev = replace(rev, **{f: getattr(rev, f)[mine] for f in rev.__dataclass_fields__
                                  if f != "stage"})
            pi = pi[mine]
            if not rev.p.size:
                return []
        c = rev.c.astype(np.intp)
        rev_c = np.full(self.send.shape[:2], -1, dtype=np.intp)  # [Pn, Q]
        rev_c[pi, rev.q] = c
        np.maximum.at(self.acked, (pi, rev.q, c), rev.floor)
        floor = self.acked[pi, rev.q, c].copy()
        floor_of = np.full(self.send.shape[:2], NO_PROGRESS, dtype=np.int64)
        floor_of[pi, rev.q] = floor
        picked: list[pa.RecordBatch] = []
        for b in self.buffer:
            bpi, bq, bsn = self._keys(b)
            rc = rev_c[bpi, bq]
            m = (rc >= 0) & (bsn > floor_of[bpi, bq])
            if m.any():
                picked.append(b.filter(pa.array(m)))
        self.send[pi, rev.q, c] = True
        self.wait[pi, rev.q, c] = False
        rows = concat(picked, self.schema) if picked else None
        dest_site = self.site[rev.q, c]
        out: list[Outgoing] = []
        row_site = None
        if rows is not None:
            rpi, rq, _ = self._keys(rows)
            row_site = self.site[rq, rev_c[rpi, rq]]
        for s in np.unique(dest_site):
            k = dest_site == s
            streams = Streams(p=rev.p[k].astype(np.int32), r=rev.r[k].astype(np.int8),
                              q=rev.q[k].astype(np.int32), sn=self.progress_sn[pi[k]].copy(),
                              wm=self.progress_wm[pi[k]].copy())
            data = None
            if rows is not None and row_site is not None and (row_site == s).any():
                data = rows.filter(pa.array(row_site == s))
            out.append(Outgoing(int(s), Data(self.stage, streams, data)))
        self.evict()
        return out

    # -- catch-up (retention, fold-in) ---------------------------------------------------------
    def on_retain(self, q: int, c: int) -> None:
        """Keep every row of stream p -> q for the new consumer replica (q, c) until it has
        acknowledged it; send it nothing yet (its state is still on the way). Only for the
        producer replicas hosted here: the new replica's fold-in (``rejoin``) goes to where
        p lives now, so rows left by a replica moved away would wait for it forever, and
        since eviction is from the front, so would everything buffered after them."""
        self.send[:, q, c] = False
        self.wait[self.hosted, q, c] = True
        self.acked[:, q, c] = NO_PROGRESS

    def on_rejoin(self, msg: Rejoin, src: int | None = None) -> list[Outgoing]:
        """Fold-in (``csync``): consumer replica c has stream p -> q up to ``floor``; from now
        on send to it and/or wait for it as told, starting above the floor. Racing copies'
        consumers also send it to collect a stream (no send, still wait: Section V-B of the
        racing-replicas paper) and to revive one (send: what is held above the floor goes
        first)."""
        msg = self.from_site(msg, src)
        if not msg.p.size:
            return []
        pi = self.index[msg.p]
        if (pi < 0).any():
            raise ProtocolError(f"rejoin for stage {self.stage} reached the wrong replica")
        # A rejoin for a copy moved away since (the consumer sent it before the move reached
        # it; or a racing consumer's garbage collection or revival of the stream, sent
        # before it learnt the copy was retired, and another column of p may live here now)
        # is stale: held for it, the rows that copy left here would wait for an
        # acknowledgement that now goes to its new site, and everything behind them too.
        mine = self.hosted[pi] & (self.replica[pi] == msg.r)
        if not mine.all():
            msg = replace(msg, **{f: getattr(msg, f)[mine] for f in msg.__dataclass_fields__
                                  if f != "stage"})
            pi = pi[mine]
            if not msg.p.size:
                return []
        c = msg.c.astype(np.intp)
        np.maximum.at(self.acked, (pi, msg.q, c), msg.floor)
        self.send[pi, msg.q, c] = msg.send
        self.wait[pi, msg.q, c] = msg.wait
        out: list[Outgoing] = []
        k = msg.send.astype(bool)
        if k.any():
            # ``rejoined`` first, ordered with the rows: what the consumer's site gets after
            # it is for the copy that rejoined (``Rejoined``)
            sites = self.site[msg.q[k], c[k]]
            for s in np.unique(sites):
                at = np.flatnonzero(k)[sites == s]
                out.append(Outgoing(int(s), Rejoined(self.stage, p=msg.p[at], r=msg.r[at],
                                                     q=msg.q[at], c=msg.c[at])))
            rev = Reverse(self.stage, p=msg.p[k], r=msg.r[k], q=msg.q[k], c=msg.c[k],
                          floor=msg.floor[k])
            out += self.on_reverse(rev)  # reset(dest): resend what is above the floor
            self.wait[pi[k], msg.q[k], c[k]] = msg.wait[k]
        self.evict()
        return out

    def held(self, p: int) -> pa.RecordBatch | None:
        """The rows of producer p's replica here that the buffer still holds (SN order per
        stream): what moves with its state in a catch-up."""
        i = self.pi(p)
        parts = []
        for b, (bpi, _, _) in zip(self.buffer, self._streams, strict=True):
            if (bpi == i).any():
                mine = self.index[b.column(SRC).to_numpy()] == i
                parts.append(b.filter(pa.array(mine)))
        return concat(parts, self.schema) if parts else None

    def install(self, p: int, progress_sn: int, progress_wm: int, alive: np.ndarray,
                held: pa.RecordBatch | None = None) -> None:
        """A new replica of producer p (catch-up): it has sent nothing; it holds every row it
        produces, and the survivor's buffered rows (``held``), for every live consumer replica
        until that one's fold-in sets the roles. Rows an earlier incarnation of p left here
        are dropped first: a ``reverse`` must find each row of p once."""
        i = self.pi(p)
        self._purge(i)
        if held is not None and held.num_rows:
            pi, q, sn = self._keys(held)
            self.buffer.append(held)
            self._streams.append(_highest(pi, q, sn, self.send.shape[1]))
        self.hosted[i] = True
        self.progress_sn[i] = max(self.progress_sn[i], progress_sn)
        self.progress_wm[i] = max(self.progress_wm[i], progress_wm)
        self.send[i] = False
        self.wait[i] = alive
        self.acked[i] = NO_PROGRESS

    def restore(self, p: int, progress_sn: int, progress_wm: int) -> None:
        """A restart from a checkpoint: producer p has claimed its output up to the
        snapshot's progress, and every consumer has what it sent up to the cut (the cut's
        consumer snapshots say so), so nothing is held and acknowledgements start there."""
        i = self.pi(p)
        self.progress_sn[i] = progress_sn
        self.progress_wm[i] = progress_wm
        self.acked[i] = np.maximum(self.acked[i], progress_sn)

    def _purge(self, i: int) -> None:
        """Remove producer index i's rows from the buffer."""
        if not any((bpi == i).any() for bpi, _, _ in self._streams):
            return
        buffer: deque[pa.RecordBatch] = deque()
        streams: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()
        for b in self.buffer:
            keep = self.index[b.column(SRC).to_numpy()] != i
            if keep.all():
                rows = b
            elif keep.any():
                rows = b.filter(pa.array(keep))
            else:
                continue
            pi, q, sn = self._keys(rows)
            buffer.append(rows)
            streams.append(_highest(pi, q, sn, self.send.shape[1]))
        self.buffer, self._streams = buffer, streams

    def drop(self, p: int) -> None:
        """Forget producer p's replica here (it was moved away): send nothing, hold nothing,
        claim no progress (a later install starts from the snapshot's)."""
        i = self.pi(p)
        self.hosted[i] = False
        self.send[i] = False
        self.wait[i] = False
        self.progress_sn[i] = NO_PROGRESS
        self.progress_wm[i] = NO_WATERMARK
        self.acked[i] = NO_PROGRESS
        self.evict()

    def add(self, p: int, r: int) -> None:
        """Host replica r of producer p from now on: silent until catch-up installs it."""
        self.drop(p)
        self.replica[self.pi(p)] = r


def _highest(pi: np.ndarray, q: np.ndarray, sn: np.ndarray, n_q: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct streams (p index, q) of a batch's rows and each one's highest SN."""
    key = pi.astype(np.int64) * n_q + q
    order = np.lexsort((sn, key))
    key, sn = key[order], sn[order]
    last = np.flatnonzero(np.append(key[1:] != key[:-1], True))
    return (key[last] // n_q).astype(np.intp), (key[last] % n_q).astype(np.intp), sn[last]
