"""FH-Cons: the input side of the consumer replicas one site hosts for one stage.

For every hosted consumer replica (q, c) and every input stream p -> q (SIGMOD §3; thesis §3.3):

- ``sender[q, p]``: the producer replica c takes stream p -> q from: normally c itself (its
  *primary* producer, in the same dataflow copy); after that one fails, the next live copy
  whose ``psync`` it has had (``reverse``; for two replicas, the other one).
- ``ack_to[q, p, r]``: the producer replicas c acknowledges to, *before processing* anything
  it received: normally every r != c (the secondary producers), less those that died or that
  c now receives from.
- ``progress[q, p]``: the cumulative progress received on the stream.

``on_data`` takes a ``Data`` message, keeps only what comes from current senders, updates the
progress and returns the acknowledgements to send at once. ``release`` hands over, per
consumer partition, every buffered row at or below the minimum progress over its input
streams, in SN order: the order-preserving merge that keeps replicas identical. ``on_fail``
is the take-over of the egress / FH-Cons (SIGMOD Fig. 4 action 1): a dead sender means
``reverse`` to a surviving producer replica; a dead acknowledgement target stops acks. The
egress is this class with one consumer and the last stage's partitions as producers.

Racing replicas (``sender`` = ``RACE`` everywhere, ``roles.py``): a consumer copy takes
stream p -> q from every complete copy of p it acknowledges to, and passes the first copy of
each row to arrive: the duplicate filter of Hwang et al. (Algorithm 1). The copies' streams
carry the same rows under the same ``(SN, SNM)``. A frame's claim is the paper's
punctuation, and it covers every row in the frame (``_first_copies``), so the stream's
progress, the highest claim any copy made, decides alone: a row at or below it came already,
from this copy's earlier frames or another's; a row above it is new. The filter keeps no
keys. A dead copy is only struck off (no ``reverse``); a rebuilt one is raced again from its
``psync`` on, when its buffer holds everything above what the consumer has.

``keep``: garbage collection of stream replicas (the racing-replicas paper's Section V-B),
0 for none. Each consumer copy counts, per input stream p -> q and producer copy, the frames
whose claim came first (raised the stream's progress: that copy's punctuation arrived
before the others'). Every ``GC_CLAIMS`` first claims it keeps the ``keep`` copies that won
most and asks the others to stop sending (a ``Rejoin`` without send: the producer stops
sending, and still holds every row until this copy acknowledges it, as it does for every
consumer copy of racing replicas). A collected stream is revived (Section V-C) as soon as
fewer than ``keep`` complete live copies send it (one of them failed, was moved or retired):
a ``Rejoin`` with send makes the producer resend what it holds above this copy's progress,
then send on; and when a collected stream stands still for ``stall`` seconds (the host's
clock, ``on_tick``) while the copy's other streams move (its senders hang or fell behind:
the paper's delay threshold). A rebuilt producer copy sends again from its ``psync``, a
rebuilt consumer copy takes every stream again, and the next window judges them anew.

``unordered``: the producer stage runs its rows as they arrive (``PhysicalPlan.arrival``, an
order-insensitive stage of racing copies), so its streams come out of SN order, and a frame
may carry rows above its claim. The filter is then Algorithm 1 with its per-tuple counts: a
row at or below the stream's progress (the highest punctuation) came already; above it, a row
passes once, its key ``(SN, SNM, port)`` kept until the progress covers it (``seen_keys.py``; a
catch-up's snapshot carries the keys). ``release_arrived`` is the consuming side's Algorithm
2: a stage of order-insensitive operators takes every row that passed, in arrival order; an
order-sensitive one keeps the merge, which sorts what the punctuations cover (Algorithm 4).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkflux.dataflow.ports import sort_rows
from sparkflux.model.batch import concat
from sparkflux.model.progress import END_OF_STREAM, NO_PROGRESS, NO_WATERMARK
from sparkflux.model.schema import PART, PORT, SN, SNM
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import (
    SRC,
    Ack,
    ConsumerSnapshot,
    Data,
    Outgoing,
    PSync,
    Rejoin,
    Rejoined,
    Reverse,
    Streams,
)
from sparkflux.protocol.roles import RACE
from sparkflux.protocol.seen_keys import SeenKeys


class PartitionLost(ProtocolError):
    """Both replicas of a producer partition failed: the dataflow cannot go on."""


# ``rejoining``: no ``Rejoined`` awaited (a value no site, the driver nor the store has)
NO_SITE = int(np.iinfo(np.int32).min)
CLAIMS = 4  # claims not yet covered by the frontier, kept per input stream (``frontier``)
_EMPTY = np.iinfo(np.int64).max  # an unused claim slot: never covered
PENDING_BATCHES = 256  # pending batches kept apart at most; beyond, they are joined into one
GC_CLAIMS = 16  # first claims of an input stream between two garbage collections of it
STALL_S = 0.3  # a stream standing still this long behind its copy's others revives (V-C)


class ConsumerSet:
    """FH-Cons of the hosted consumer replicas of ``stage``.

    ``name``: what the consumers are called in error messages, ``stage s`` as the plan lists
    the stages unless given (the egress is no stage the user knows of)."""

    def __init__(self, stage: int, consumers: dict[int, int], producer_site: np.ndarray,
                 sender: np.ndarray, ack_to: np.ndarray, schema: pa.Schema,
                 installed: bool | np.ndarray = True, name: str | None = None,
                 unordered: bool = False, keep: int = 0, stall: float = STALL_S) -> None:
        self.stage = stage
        self.name = name or f"stage {stage}"
        # what the producers are called: the previous stage, or the ingress for stage 0
        self.producers = f"stage {stage - 1}" if stage > 0 else "the input (ingress)"
        self.parts = np.array(sorted(consumers), dtype=np.int32)
        self.replica = np.array([consumers[q] for q in self.parts], dtype=np.int8)
        n_all = int(self.parts.max()) + 1 if self.parts.size else 1
        self.index = np.full(n_all, -1, dtype=np.int32)
        self.index[self.parts] = np.arange(self.parts.size, dtype=np.int32)
        # [P, R]: the layout's live table (moves change it in place), or the driver's [[-1]]
        self.producer_site = np.asarray(producer_site, dtype=np.int32)
        self.sender = sender.astype(np.int8).copy()  # [Qn, P]
        self.race = bool(self.sender.size) and bool((self.sender == RACE).all())
        self.duplicates = 0  # racing replicas: rows dropped, another copy brought them first
        # racing copies of a stage run in arrival order: the streams come out of SN order, and
        # the filter keeps the keys (qi * P + p, SN, SNM, port) of the rows passed above their
        # stream's progress; ``early``: rows released above their partition's frontier
        self.unordered = unordered
        self.seen = SeenKeys(self.sender.shape[1])
        self.early = 0
        self.ack_to = _ack_mask(ack_to, self.producer_site.shape[1])  # [Qn, P, R]
        # racing copies' garbage collection of stream replicas (``keep``, 0: none): per
        # stream and producer copy, the first claims since the last collection, and the
        # copies asked to stop sending; ``collected``/``revived``: how many times so far
        self.keep = keep if self.race and keep < self.ack_to.shape[2] else 0
        self.wins = np.zeros(self.ack_to.shape, dtype=np.int64)
        self.pruned = np.zeros(self.ack_to.shape, dtype=bool)
        self.collected = 0
        self.revived = 0
        # revival on delay (``on_tick``): the progress each stream had at the last tick, and
        # when it last moved (NaN: not seen yet)
        self.stall = stall
        self._tick_sn = np.full(self.ack_to.shape[:2], NO_PROGRESS, dtype=np.int64)
        self._moved_at = np.full(self.ack_to.shape[:2], np.nan)
        # [Qn, P, R]: the site a ``Rejoined`` of producer copy (p, r) is awaited from (sent a
        # ``Rejoin`` with send): until it comes, that site's frames of the stream are for a
        # copy of this column retired since, not for this one (``Rejoined``)
        self.rejoining = np.full(self.ack_to.shape, NO_SITE, dtype=np.int32)
        self.progress_sn = np.full(self.sender.shape, NO_PROGRESS, dtype=np.int64)
        self.progress_wm = np.full(self.sender.shape, NO_WATERMARK, dtype=np.int64)
        # per stream: its claims the SN frontier does not cover yet, oldest first (at most
        # CLAIMS: a newer one merges into the last), and the watermark its covered claims
        # have given so far (``frontier``)
        self.claims_sn = np.full((*self.sender.shape, CLAIMS), _EMPTY, dtype=np.int64)
        self.claims_wm = np.full((*self.sender.shape, CLAIMS), NO_WATERMARK, dtype=np.int64)
        self.claims_n = np.zeros(self.sender.shape, dtype=np.int64)
        self.safe_wm = np.full(self.sender.shape, NO_WATERMARK, dtype=np.int64)
        self.schema = schema  # wire schema (with _src)
        self.pending: list[pa.RecordBatch] = []
        self.backlog = False  # the last release held ready rows back (its ``limit``)
        self._held: int | None = None  # ... at this SN (``_chunk``)
        # per pending batch (by identity): its partitions and each one's lowest SN, so that a
        # batch with nothing below the frontier is passed over without touching its rows
        self._lowest: dict[int, tuple[pa.RecordBatch, np.ndarray, np.ndarray]] = {}
        self.released_sn = np.full(self.parts.size, NO_PROGRESS, dtype=np.int64)
        self.released_wm = np.full(self.parts.size, NO_WATERMARK, dtype=np.int64)
        self.rows_in = 0
        # A standby's replicas exist only once catch-up has installed their state.
        # Replicas this site does not host stay uninstalled (a move may add them later).
        self.installed = np.broadcast_to(np.asarray(installed, dtype=bool),
                                         (self.parts.size,)).copy()
        # [P, R]: producer replicas that hold their whole stream (not being caught up). A
        # take-over reverses only to one of them: with more than two replicas a live copy may
        # be a new one whose buffer starts at its snapshot. ``psync`` completes a copy.
        self.complete = np.ones(self.producer_site.shape, dtype=bool)

    # -- receive: acknowledge before processing ------------------------------------------------
    def on_data(self, msg: Data, src: int | None = None, more: Sequence[Data] = ()
                ) -> list[Outgoing]:
        """``src``: the site the message came from. Streams of a producer replica that no
        longer lives there (it was moved away) are ignored, like a failed site's.

        ``more``: later frames of the same link and stage, with nothing but acknowledgements
        from ``src`` between them (``link_runs``), handled as one: a site's pass takes a
        link's queued frames together, so the stream bookkeeping and the acknowledgement are
        paid once per link and pass, not once per frame (most of what a slowed site with few
        replicas spends). Each frame's rows are checked against the progress before it, the
        earlier frames' claims included."""
        frames = (msg, *more)
        st = msg.streams if not more else Streams(
            *(np.concatenate([getattr(f.streams, k) for f in frames])
              for k in ("p", "r", "q", "sn", "wm")))
        qi = self._qi(st.q)
        ok = qi >= 0
        ok[ok] &= self.installed[qi[ok]]
        if src is not None:  # the copy's site, and not rows for a copy retired since
            ok &= self.producer_site[st.p, st.r] == src
            ok[ok] &= self.rejoining[qi[ok], st.p[ok], st.r[ok]] != src
        if self.race:  # every complete copy raced: those acknowledged to
            ok[ok] &= self.ack_to[qi[ok], st.p[ok], st.r[ok]] & self.complete[st.p[ok], st.r[ok]]
        else:
            ok[ok] &= self.sender[qi[ok], st.p[ok]] == st.r[ok]
        # which frame each accepted stream entry came from (a single frame needs no index)
        frame = np.repeat(np.arange(len(frames)), [len(f.streams) for f in frames])[ok] \
            if more else None
        qi, p, sn = qi[ok], st.p[ok], st.sn[ok]
        if any(f.batch is not None and f.batch.num_rows for f in frames):
            self._accept_rows(frames, qi, p, sn, frame)
        if self.keep:  # a claim above the stream's progress came first: its copy won
            won = sn > self.progress_sn[qi, p]
            np.add.at(self.wins, (qi[won], p[won], st.r[ok][won].astype(np.intp)), 1)
        np.maximum.at(self.progress_sn, (qi, p), sn)
        np.maximum.at(self.progress_wm, (qi, p), st.wm[ok])
        if len(self.seen):
            self.seen.prune(self.progress_sn)
        if (more or qi.size > 1) and qi.size:  # one acknowledgement (and claim) per stream
            _, first = np.unique(qi.astype(np.int64) * self.sender.shape[1] + p,
                                 return_index=True)
            qi, p = qi[first], p[first]
        self._remember_claims(qi, p)
        if self.keep:
            return self._acks(qi, p) + self._collect(qi, p)
        return self._acks(qi, p)

    def _qi(self, q: np.ndarray) -> np.ndarray:
        """Each consumer partition's index here, -1 for one not among this set's."""
        return np.where(q < self.index.size, self.index[np.minimum(q, self.index.size - 1)], -1)

    def _remember_claims(self, qi: np.ndarray, p: np.ndarray) -> None:
        """Queue the streams' latest claims (sn, wm). A full queue merges the new claim into
        its last entry as (new sn, that entry's wm): what it promises still holds (rows below
        the older wm have SNs at or below the older sn, so below the newer), the older
        entries keep their place near the frontier."""
        if not qi.size:
            return
        n = self.claims_n[qi, p]
        slot = np.minimum(n, CLAIMS - 1)
        merged = n >= CLAIMS
        self.claims_sn[qi, p, slot] = self.progress_sn[qi, p]
        self.claims_wm[qi, p, slot] = np.where(merged, self.claims_wm[qi, p, slot],
                                               self.progress_wm[qi, p])
        self.claims_n[qi, p] = np.minimum(n + 1, CLAIMS)

    def _accept_rows(self, frames: Sequence[Data], qi: np.ndarray, p: np.ndarray,
                     sn_claimed: np.ndarray, frame: np.ndarray | None) -> None:
        """Keep the rows of streams that come from their current sender; a row at or below
        its stream's progress (what earlier frames, of this run too, claimed) is a
        duplicate: a protocol bug, reported."""
        # A row is accepted when its stream p -> q is listed as coming from its current sender.
        key_ok = np.zeros((self.parts.size, self.sender.shape[1]), dtype=bool)
        key_ok[qi, p] = True
        floor = np.full(key_ok.shape, NO_PROGRESS, dtype=np.int64)
        floor[qi, p] = self.progress_sn[qi, p]
        for k, f in enumerate(frames):
            if k:  # the claims of the run's earlier frames
                assert frame is not None
                done = frame == k - 1
                np.maximum.at(floor, (qi[done], p[done]), sn_claimed[done])
            batch = f.batch
            if batch is None or not batch.num_rows:
                continue
            src = batch.column(SRC).to_numpy()
            q = batch.column(PART).to_numpy()
            sn = batch.column(SN).to_numpy()
            rqi = self._qi(q)
            keep = rqi >= 0
            keep[keep] &= key_ok[rqi[keep], src[keep]]
            if keep.any() and self.race and self.unordered:  # per row, out of order
                keep[keep] = self._first_arrivals(batch, keep, rqi[keep], src[keep], sn[keep],
                                                  floor[rqi[keep], src[keep]])
            elif keep.any() and self.race:  # another copy's rows came first: dropped
                keep[keep] = self._first_copies(f, rqi[keep], src[keep], sn[keep],
                                                floor[rqi[keep], src[keep]])
            elif keep.any():
                dup = sn[keep] <= floor[rqi[keep], src[keep]]
                if dup.any():
                    streams = sorted(set(zip(src[keep][dup].tolist(), q[keep][dup].tolist(),
                                             strict=True)))
                    raise ProtocolError(
                        f"FH-Cons of {self.name}: duplicate input (SN at or below the "
                        f"stream's progress) on streams (p, q) {streams[:3]}: SNs "
                        f"{sn[keep][dup][:3].tolist()}")
            if keep.all():
                self.pending.append(batch)
            elif keep.any():
                self.pending.append(batch.filter(pa.array(keep)))
            self.rows_in += int(keep.sum())

    def _first_copies(self, f: Data, qi: np.ndarray, p: np.ndarray, sn: np.ndarray,
                      floor: np.ndarray) -> np.ndarray:
        """Racing replicas' duplicate filter: the rows of frame ``f`` (of streams (qi, p))
        above their stream's progress before it (``floor``) pass; the others came first
        from another copy, or from this one's earlier frames.

        It rests on every row a copy sends being covered by the claim of its frame (an
        operator holds rows above its progress back: ``HeldRows``): the claims alone then
        tell which rows came already. A row above its frame's claim is a protocol bug,
        reported."""
        st = f.streams
        claim = np.full((self.parts.size, self.sender.shape[1]), NO_PROGRESS, dtype=np.int64)
        sqi = self._qi(st.q)
        mine = sqi >= 0
        np.maximum.at(claim, (sqi[mine], st.p[mine]), st.sn[mine])
        above = sn > claim[qi, p]
        if above.any():
            streams = sorted(set(zip(p[above].tolist(), self.parts[qi[above]].tolist(),
                                     strict=True)))
            raise ProtocolError(
                f"FH-Cons of {self.name}: racing copies need every row covered by its "
                f"frame's claim; rows of streams (p, q) {streams[:3]} came above it "
                f"(SNs {sn[above][:3].tolist()})")
        first: np.ndarray = sn > floor
        self.duplicates += int(first.size - first.sum())
        return first

    def _first_arrivals(self, batch: pa.RecordBatch, keep: np.ndarray, qi: np.ndarray,
                        p: np.ndarray, sn: np.ndarray, floor: np.ndarray) -> np.ndarray:
        """The duplicate filter of streams out of SN order (Algorithm 1): a row at or below
        its stream's progress before the frame (``floor``, the highest punctuation any copy
        gave) came already; above it, the first copy of each ``(SN, SNM, port)`` passes and
        its key is kept (``seen``) until the progress covers it. Each copy sends a row
        once (a rebuilt one resends above the floor only), so a count per key is 0 or 1."""
        first: np.ndarray = sn > floor
        if first.any():
            at = np.flatnonzero(keep)[first]
            snm = batch.column(SNM).to_numpy()[at]
            port = batch.column(PORT).to_numpy()[at] if batch.schema.get_field_index(PORT) >= 0 \
                else np.zeros(at.size, dtype=np.int64)
            keys = np.stack([qi[first].astype(np.int64) * self.sender.shape[1] + p[first],
                             sn[first], snm.astype(np.int64), port.astype(np.int64)], axis=1)
            first[first] = self.seen.first(keys)
        self.duplicates += int(first.size - first.sum())
        return first

    def _acks(self, qi: np.ndarray, p: np.ndarray) -> list[Outgoing]:
        k, target = np.nonzero(self.ack_to[qi, p])
        if not k.size:
            return []
        qi, p = qi[k], p[k]
        sites = self.producer_site[p, target]
        out = []
        for s in np.unique(sites):
            k = sites == s
            out.append(Outgoing(int(s), Ack(
                self.stage, p=p[k].astype(np.int32), q=self.parts[qi[k]],
                c=self.replica[qi[k]], upto=self.progress_sn[qi[k], p[k]].copy())))
        return out

    # -- garbage collection of stream replicas (Section V-B) and their revival (V-C) ------------
    def _collect(self, qi: np.ndarray, p: np.ndarray) -> list[Outgoing]:
        """Streams (qi, p) (distinct) whose copies made ``GC_CLAIMS`` first claims since the
        last look: keep the ``keep`` live complete copies that won most (the lower copy on
        a tie), stop the others. A stream with a live copy still rejoining (its frames
        ignored until its ``Rejoined``: it cannot win yet) waits for the next window."""
        ripe = self.wins[qi, p].sum(axis=1) >= GC_CLAIMS
        if not ripe.any():
            return []
        entries: list[tuple[int, int, int, bool, bool, int]] = []
        for i, pp in zip(qi[ripe].tolist(), p[ripe].tolist(), strict=True):
            wins = self.wins[i, pp].copy()
            self.wins[i, pp] = 0
            live = self.ack_to[i, pp] & self.complete[pp] & ~self.pruned[i, pp]
            # (a copy struck off while rejoining keeps its mark until it rejoins again)
            if live.sum() <= self.keep or (live & (self.rejoining[i, pp] != NO_SITE)).any():
                continue
            ranked = [r for r in np.argsort(-wins, kind="stable").tolist() if live[r]]
            for r in ranked[self.keep:]:
                self.pruned[i, pp, r] = True
                entries.append((int(self.producer_site[pp, r]), pp, r, False, True, i))
        self.collected += len(entries)
        return self._rejoins_rows(entries) if entries else []

    def _revive(self) -> list[Outgoing]:
        """Every installed copy's streams sent by fewer than ``keep`` live complete copies
        (one failed, was moved or retired) take collected copies back, each resending what
        it holds above this copy's progress (``Rejoin`` with send)."""
        if not self.keep or not self.pruned.any():
            return []
        can = self.ack_to & self.complete[None, :, :] & self.installed[:, None, None]
        need = np.minimum(self.keep, can.sum(axis=2)) - (can & ~self.pruned).sum(axis=2)
        collected = can & self.pruned
        # per stream, its first ``need`` collected copies
        return self._take_back(collected & (np.cumsum(collected, axis=2) <= need[:, :, None]))

    def _take_back(self, back: np.ndarray) -> list[Outgoing]:
        """Revive the collected copies ``back[qi, p, r]``: each gets a ``Rejoin`` with send
        (and wait), so it resends what it holds above this copy's progress, then sends on."""
        if not back.any():
            return []
        self.pruned[back] = False
        entries = [(int(self.producer_site[p, r]), int(p), int(r), True, True, int(i))
                   for i, p, r in zip(*np.nonzero(back), strict=True)]
        self.revived += len(entries)
        return self._rejoins_rows(entries)

    def on_tick(self, now: float) -> list[Outgoing]:
        """The host's clock (every heartbeat): revival on delay (Section V-C). A stream of an
        installed copy with collected producer copies that has not moved for ``stall`` while
        another stream of the same copy has, past it (so the input flows, and its senders
        are hung or so far behind that they stand still), takes every collected live
        complete copy back at once. A kept sender that slows down but keeps moving is not
        replaced, and a copy with one input stream (or whose every kept sender is on the
        hung site) has nothing to compare with: it waits for the failure. The next
        window judges the copies again: a hung one then wins nothing and is collected."""
        if not self.keep:
            return []
        moved = self.progress_sn > self._tick_sn
        self._tick_sn = self.progress_sn.copy()
        self._moved_at[moved | np.isnan(self._moved_at)] = now
        latest = self._moved_at.max(axis=1, initial=-np.inf)[:, None]
        behind = (latest - self._moved_at >= self.stall) & (now - self._moved_at >= self.stall) \
            & (self.progress_sn < self.progress_sn.max(axis=1, initial=NO_PROGRESS)[:, None])
        can = self.ack_to & self.complete[None, :, :] & self.pruned
        stalled = behind & can.any(axis=2) & self.installed[:, None] \
            & (self.progress_sn < END_OF_STREAM)
        self.wins[stalled] = 0
        return self._take_back(can & stalled[:, :, None])

    # -- the order-preserving merge --------------------------------------------------------------
    def frontier(self, cap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per consumer partition: the SN frontier (the lowest claim over its input streams)
        and the watermark that holds for the rows up to it.

        ``cap`` (per partition): a checkpoint's cut (docs/design.md §9): the frontier goes no
        further, and its watermark is the one that holds up to the cut, as if the streams'
        claims stopped there. A call moves the streams' watermarks on (``safe_wm``, the
        covered claims), so every caller passes the cap the merge has: one call without it
        would give a held partition a watermark past the rows it holds.

        A stream's claim (sn, wm) says that its rows with an event time below wm have SNs
        at or below sn. Rows above the SN frontier wait, and one of them may be behind
        another stream's latest watermark; so each stream lends the watermark of its latest
        claim the frontier covers (``sn`` at most the frontier), not of its latest claim."""
        f_sn = self.progress_sn.min(axis=1)
        if cap is not None:
            f_sn = np.minimum(f_sn, cap)
        if self._held is not None:
            f_sn = np.minimum(f_sn, self._held)
        covered = self.claims_sn <= f_sn[:, None, None]  # a prefix of each queue
        n_cov = covered.sum(axis=2)
        best = np.where(covered, self.claims_wm, NO_WATERMARK).max(axis=2)
        latest = np.where(self.progress_sn <= f_sn[:, None], self.progress_wm, NO_WATERMARK)
        np.maximum(self.safe_wm, np.maximum(best, latest), out=self.safe_wm)
        if n_cov.any():  # the covered claims leave their queues
            idx = np.arange(CLAIMS) + n_cov[:, :, None]
            at = np.minimum(idx, CLAIMS - 1)
            keep = idx < CLAIMS
            self.claims_sn = np.where(keep, np.take_along_axis(self.claims_sn, at, 2), _EMPTY)
            self.claims_wm = np.where(keep, np.take_along_axis(self.claims_wm, at, 2),
                                      NO_WATERMARK)
            self.claims_n -= n_cov
        return f_sn, self.safe_wm.min(axis=1)

    def take_arrived(self) -> pa.RecordBatch | None:
        """Every row received and not released yet, in arrival order, or None
        (``--unordered-output``: the egress hands rows on once they passed the duplicate
        filter, without the SN-ordered merge; ``release_arrived``). Each passed the filter,
        so it is the first copy of its row; the frontier (``release``) moves on as before,
        over no rows."""
        if not self.pending:
            return None
        out = concat(self.pending, self.schema)
        self.pending, self._lowest = [], {}
        return out

    def release_arrived(self, cap: np.ndarray | None = None
                        ) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray] | None:
        """An order-insensitive stage's input (the racing-replicas paper's Algorithm 2):
        every row that passed the filter, in arrival order, with each partition's frontier
        as ``release`` gives it; None when neither rows came nor the frontier moved. The
        stage's operators give the same rows whatever the order, and claim the frontier.
        ``cap`` (a partition on disk, a checkpoint's cut: ``release``'s): rows above it
        stay, and the frontier goes no further."""
        f_sn, f_wm = self.frontier(cap)
        rows = self.take_arrived()
        if rows is not None and cap is not None:
            over = rows.column(SN).to_numpy() > cap[self.index[rows.column(PART).to_numpy()]]
            if over.any():
                self.pending = [rows.filter(pa.array(over))]
                rows = rows.filter(pa.array(~over)) if not over.all() else None
        moved = bool((f_sn > self.released_sn).any() or (f_wm > self.released_wm).any())
        if rows is None and not moved:
            return None
        if rows is not None:
            part = self.index[rows.column(PART).to_numpy()]
            self.early += int((rows.column(SN).to_numpy() > f_sn[part]).sum())
        self.released_sn, self.released_wm = f_sn, f_wm
        return (rows if rows is not None else concat([], self.schema)), f_sn, f_wm

    def release(self, cap: np.ndarray | None = None, limit: int | None = None
                ) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray] | None:
        """Rows at or below each partition's frontier (held at ``cap``, a checkpoint's cut,
        where given), in SN order; None when nothing moved.

        ``limit``: about how many rows one release may hand over (a pass's budget, ``SiteCore
        .pass_rows``): beyond it the frontier stops at the SN of the ``limit``-th lowest ready
        row, as at a cut, and ``backlog`` says that more is ready. A long backlog (the redo
        after a cut input heals, a producer's resent rows) then goes in several passes, and
        the site reads its links between them: tentative rows, heartbeats and take-over do
        not wait for the whole backlog."""
        self.backlog, self._held = False, None
        if limit is not None and sum(b.num_rows for b in self.pending) > limit:
            self._held = self._chunk(cap, max(1, limit))
        f_sn, f_wm = self.frontier(cap)
        moved = bool((f_sn > self.released_sn).any() or (f_wm > self.released_wm).any())
        if not moved:
            return None
        out = None
        if self.pending:
            # Only batches with a row at or below the frontier are opened: behind a lagging
            # producer the pending rows pile up, and re-filtering all of them on every pass
            # made a pass's cost grow with the lag (the rate then fell as the lag grew).
            ready: list[pa.RecordBatch] = []
            kept: list[pa.RecordBatch] = []
            lowest: dict[int, tuple[pa.RecordBatch, np.ndarray, np.ndarray]] = {}
            for b in self.pending:
                uq, low = self._lowest_of(b)
                if not (low <= f_sn[uq]).any():
                    kept.append(b)
                    lowest[id(b)] = (b, uq, low)
                    continue
                r = b.column(SN).to_numpy() <= f_sn[self.index[b.column(PART).to_numpy()]]
                if r.all():
                    ready.append(b)
                else:
                    ready.append(b.filter(pa.array(r)))
                    kept.append(b.filter(pa.array(~r)))
            if len(kept) > PENDING_BATCHES:  # many small batches: one, to keep passes short
                kept, lowest = [concat(kept, self.schema)], {}
            self.pending, self._lowest = kept, lowest
            out = concat(ready, self.schema) if ready else None
        if out is not None and out.num_rows > 1:
            out = sort_rows(out)  # (_sn, _snm, _port): rows of one input on two ports tie
        self.released_sn, self.released_wm = f_sn, f_wm
        return (out if out is not None else concat([], self.schema)), f_sn, f_wm

    def _chunk(self, cap: np.ndarray | None, limit: int) -> int | None:
        """The SN where the merge holds so that about ``limit`` of the rows ready
        under ``cap`` go (every row of the SN that reaches it), or None; ``backlog`` set when
        that holds some back. It stays in force (``_held``) until the next release: every
        frontier asked of the merge meanwhile (a checkpoint, the delay bound) stops there
        too, as its watermark moves on only with what was released."""
        f_sn = self.progress_sn.min(axis=1)
        if cap is not None:
            f_sn = np.minimum(f_sn, cap)
        ready = []
        for b in self.pending:
            sn = b.column(SN).to_numpy()
            ready.append(sn[sn <= f_sn[self.index[b.column(PART).to_numpy()]]])
        sns = np.concatenate(ready) if ready else np.zeros(0, np.int64)
        if sns.size <= limit:
            return None
        last = int(np.partition(sns, limit - 1)[limit - 1])
        self.backlog = True
        return last

    def _lowest_of(self, b: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """The partitions (indexes) of a pending batch's rows and each one's lowest SN."""
        hit = self._lowest.get(id(b))
        if hit is not None and hit[0] is b:
            return hit[1], hit[2]
        qi = self.index[b.column(PART).to_numpy()]
        uq, inv = np.unique(qi, return_inverse=True)
        low = np.full(uq.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(low, inv, b.column(SN).to_numpy())
        return uq, low

    # -- what the merge holds (eventual consistency's delay bound, ``merge_waits.py``) ------
    def holding(self) -> np.ndarray:
        """Per consumer partition: whether rows wait above its frontier."""
        out = np.zeros(self.parts.size, dtype=bool)
        for b in self.pending:
            uq, _ = self._lowest_of(b)
            out[uq] = True
        return out

    def peek(self, low: np.ndarray, high: np.ndarray) -> pa.RecordBatch | None:
        """The held rows of each partition ``i`` with ``low[i] < SN <= high[i]``, in SN order,
        still held (the stable release takes them in its turn); None if none."""
        parts: list[pa.RecordBatch] = []
        for b in self.pending:
            qi = self.index[b.column(PART).to_numpy()]
            sn = b.column(SN).to_numpy()
            go = (sn > low[qi]) & (sn <= high[qi])
            if go.all():
                parts.append(b)
            elif go.any():
                parts.append(b.filter(pa.array(go)))
        if not parts:
            return None
        out = concat(parts, self.schema)
        return sort_rows(out) if out.num_rows > 1 else out

    # -- take-over -------------------------------------------------------------------------------
    def on_fail(self, dead: np.ndarray) -> list[Outgoing]:
        """``dead[p, r]``: producer replicas that failed. Returns the ``reverse`` messages."""
        if self.race:
            self._race_fail(dead)
            return self._revive()
        asks: list[tuple[int, int, int, int]] = []  # (p, alt, q, c)
        n_rep = dead.shape[1]
        pp = np.arange(self.sender.shape[1])
        for i in np.flatnonzero(self.installed):
            if not (dead[pp, self.sender[i]] | (self.ack_to[i] & dead).any(axis=1)).any():
                continue  # none of this replica's senders or ack targets failed
            self.ack_to[i] &= ~dead  # ``ack_all`` on their side: no more acks to the dead
            for p in range(self.sender.shape[1]):
                s = int(self.sender[i, p])
                if not dead[p, s]:
                    continue
                # the next live, complete replica after the dead sender (for two replicas:
                # the other)
                alive = [(s + k) % n_rep for k in range(1, n_rep)
                         if not dead[p, (s + k) % n_rep] and self.complete[p, (s + k) % n_rep]]
                if not alive:
                    self._lost(p, dead)
                alt = alive[0]
                self.sender[i, p] = alt
                self.rejoining[i, p, alt] = NO_SITE
                self.ack_to[i, p, alt] = False  # it sends to us now and waits for us no more
                asks.append((p, alt, int(self.parts[i]), int(self.replica[i])))
        by_site: dict[int, list[tuple[int, int, int, int]]] = {}
        for a in asks:
            by_site.setdefault(int(self.producer_site[a[0], a[1]]), []).append(a)
        out: list[Outgoing] = []
        for site, rows in sorted(by_site.items()):
            p_, r_, q_, c_ = (np.array(col) for col in zip(*rows, strict=True))
            qi = self.index[q_]
            floor = self.progress_sn[qi, p_]
            out.append(Outgoing(site, Reverse(self.stage, p=p_.astype(np.int32),
                                              r=r_.astype(np.int8), q=q_.astype(np.int32),
                                              c=c_.astype(np.int8), floor=floor.copy())))
        return out

    def _lost(self, p: int, dead: np.ndarray) -> None:
        """Raise ``PartitionLost`` for producer partition p: no complete copy is left."""
        gone = [int(x) for x in np.flatnonzero(dead.all(axis=1))]
        if p not in gone:  # a live copy is left, but it is still being rebuilt
            raise PartitionLost(
                f"every complete replica of partition {p} of {self.producers} "
                f"failed; the one left is still being caught up (its fold-in, "
                f"psync, has not reached {self.name}), so it lacks rows "
                f"{self.name} has not received")
        they, them, their = ("they", "them", "their") if len(gone) > 1 else ("it", "it", "its")
        raise PartitionLost(
            f"every replica of {_partitions(gone)} of {self.producers} failed "
            f"before {they} could be recovered; {self.name} reads from {them} "
            f"and cannot go on without losing {their} state")

    def _race_fail(self, dead: np.ndarray) -> None:
        """Racing replicas: the dead copies are struck off; the live ones were sending all
        along. A stream with no complete live copy left loses rows: ``PartitionLost``."""
        for i in np.flatnonzero(self.installed):
            hit = (self.ack_to[i] & dead).any(axis=1)
            if not hit.any():
                continue
            self.ack_to[i] &= ~dead
            for p in np.flatnonzero(hit & ~(self.ack_to[i] & self.complete).any(axis=1)):
                self._lost(int(p), dead)

    def _forget_claims(self, i: int, safe: int) -> None:
        self.claims_sn[i] = _EMPTY
        self.claims_wm[i] = NO_WATERMARK
        self.claims_n[i] = 0
        self.safe_wm[i] = safe

    def restore(self, q: int, snap: ConsumerSnapshot) -> None:
        """A restart from a checkpoint (docs/design.md §9), before any input: this site's
        replica of q starts at the snapshot's progress, every stream at the cut, with the
        roles of a run's start (every party starts together, so no rejoin is needed)."""
        i = int(self.index[q])
        self.progress_sn[i] = snap.progress_sn
        self.progress_wm[i] = snap.progress_wm
        self._forget_claims(i, snap.released_wm)
        self.released_sn[i] = snap.released_sn
        self.released_wm[i] = snap.released_wm

    # -- moves -----------------------------------------------------------------------------------
    def drop(self, q: int) -> None:
        """Forget this site's replica of q (it was moved away): no input, no progress."""
        i = int(self.index[q])
        self.installed[i] = False
        self.rejoining[i] = NO_SITE
        self.pruned[i] = False
        self.wins[i] = 0
        self.progress_sn[i] = NO_PROGRESS
        self.progress_wm[i] = NO_WATERMARK
        self._forget_claims(i, NO_WATERMARK)
        self.seen.forget(i)
        self.released_sn[i] = NO_PROGRESS
        self.released_wm[i] = NO_WATERMARK
        if self.pending:
            rows = concat(self.pending, self.schema)
            keep = rows.column(PART).to_numpy() != q
            self.pending = [rows.filter(pa.array(keep))] if keep.any() else []

    def take_pending(self, qs: set[int]) -> dict[int, pa.RecordBatch]:
        """The pending rows of the partitions ``qs``, taken out (a spilled partition's input
        goes to disk; ``put_pending`` brings it back). Their progress stays: the rows were
        received and acknowledged."""
        if not self.pending or not qs:
            return {}
        rows = concat(self.pending, self.schema)
        part = rows.column(PART).to_numpy()
        mine = np.isin(part, np.fromiter(qs, dtype=part.dtype, count=len(qs)))
        if not mine.any():
            return {}
        self.pending = [rows.filter(pa.array(~mine))] if not mine.all() else []
        self._lowest = {}
        taken = rows.filter(pa.array(mine))
        tp = part[mine]
        return {int(q): taken.filter(pa.array(tp == q)) for q in np.unique(tp)}

    def put_pending(self, rows: pa.RecordBatch) -> None:
        """Rows ``take_pending`` took, back among the pending rows (above their partitions'
        frontier: a spilled partition's merge held where it stood)."""
        if rows.num_rows:
            self.pending.append(rows)

    def add(self, q: int, r: int) -> None:
        """Host replica r of q from now on: empty until catch-up installs its state."""
        self.drop(q)
        self.replica[int(self.index[q])] = r

    # -- catch-up --------------------------------------------------------------------------------
    def snapshot(self, q: int) -> ConsumerSnapshot:
        """FH-Cons state of consumer partition q: stream progress and the in-flight rows
        received above its frontier (the paper buffers them inside FH-Cons)."""
        i = int(self.index[q])
        rows = None
        if self.pending:
            allrows = concat(self.pending, self.schema)
            mine = allrows.column(PART).to_numpy() == q
            if mine.any():
                rows = allrows.filter(pa.array(mine))
        return ConsumerSnapshot(progress_sn=self.progress_sn[i].copy(),
                                progress_wm=self.progress_wm[i].copy(),
                                released_sn=int(self.released_sn[i]),
                                released_wm=int(self.released_wm[i]), pending=rows,
                                seen=(self.seen.of(i, self.progress_sn) if self.unordered
                                      else None))

    def install(self, q: int, snap: ConsumerSnapshot, dead: np.ndarray) -> list[Outgoing]:
        """Install a snapshot as this site's replica of q and rejoin its input streams:
        the sender feeds it from above the snapshot's progress, the other producer replica
        holds rows for it (the normal roles of SIGMOD §3, given the dead replicas)."""
        i = int(self.index[q])
        c = int(self.replica[i])
        self.progress_sn[i] = snap.progress_sn
        self.progress_wm[i] = snap.progress_wm
        self._forget_claims(i, snap.released_wm)  # what the survivor's frontier had reached
        self.released_sn[i] = snap.released_sn
        self.released_wm[i] = snap.released_wm
        if snap.pending is not None and snap.pending.num_rows:
            self.pending.append(snap.pending)
        self.seen.forget(i)
        if snap.seen is not None and snap.seen.shape[0]:  # what the survivor passed above
            keys = snap.seen.astype(np.int64)                # its progress: no second time
            keys[:, 0] += i * self.sender.shape[1]
            self.seen.add(keys)
        self.installed[i] = True
        n_rep = self.producer_site.shape[1]
        entries: list[tuple[int, int, int, bool, bool]] = []  # (site, p, r, send, wait)
        for p in range(self.sender.shape[1]):
            if n_rep == 1:  # the ingress: it sends to and waits for every replica
                self.sender[i, p] = 0
                self.ack_to[i, p] = True
                entries.append((int(self.producer_site[p, 0]), p, 0, True, True))
                continue
            # its own producer copy c if it lives, else the next live one after it
            live = [(c + k) % n_rep for k in range(n_rep)
                    if not dead[p, (c + k) % n_rep] and self.complete[p, (c + k) % n_rep]]
            if not live:
                what = (f"the copy of partition {q} of {self.name}"
                        if self.name.startswith("stage ") else self.name)
                raise PartitionLost(f"every replica of partition {p} of {self.producers} "
                                    f"failed; {what}, which reads from it, cannot be caught "
                                    f"up")
            if self.race:  # raced from every complete copy, each resending above the floor
                self.pruned[i, p] = False
                self.wins[i, p] = 0
                self.ack_to[i, p] = False
                self.ack_to[i, p, live] = True
                entries += [(int(self.producer_site[p, r]), p, r, True, True) for r in live]
                continue
            sender = live[0]
            self.sender[i, p] = sender
            self.ack_to[i, p] = False
            self.ack_to[i, p, live[1:]] = True
            entries.append((int(self.producer_site[p, sender]), p, sender, True, False))
            entries += [(int(self.producer_site[p, r]), p, r, False, True) for r in live[1:]]
        return self._rejoins(i, entries)

    def on_psync(self, msg: PSync) -> list[Outgoing]:
        """``psync`` from the survivor of producer p: its replica r is back, so acknowledge
        to r what arrives from the survivor (r holds its output until then)."""
        self.complete[msg.p, msg.r] = True
        entries = []
        for i in range(self.parts.size):
            if self.installed[i] and (self.race or self.sender[i, msg.p] != msg.r):
                self.ack_to[i, msg.p, msg.r] = True
                self.pruned[i, msg.p, msg.r] = False
                # racing: r sends too, from above what this copy has (r has held its whole
                # output for it, and this copy has had the survivor's up to r's start)
                entries.append((int(self.producer_site[msg.p, msg.r]), msg.p, msg.r,
                                self.race, True, i))
        return self._rejoins_rows(entries) if entries else []

    def on_rejoined(self, msg: Rejoined, src: int | None = None) -> None:
        """A producer site answered this site's ``Rejoin``: what it sends of those streams
        from now on is for the copies that rejoined."""
        qi = self._qi(msg.q)
        ok = qi >= 0
        ok[ok] &= self.replica[qi[ok]] == msg.c[ok]
        qi, p, r = qi[ok], msg.p[ok], msg.r[ok].astype(np.intp)
        if src is not None:
            mine = self.rejoining[qi, p, r] == src
            qi, p, r = qi[mine], p[mine], r[mine]
        self.rejoining[qi, p, r] = NO_SITE

    def rebuilding(self, copies: np.ndarray) -> None:
        """``copies[p, r]``: producer replicas that start over empty (a standby adopted their
        slot, or a move re-placed them); complete again at their ``psync``."""
        self.complete[copies] = False

    def _rejoins(self, i: int, entries: list[tuple[int, int, int, bool, bool]]) -> list[Outgoing]:
        return self._rejoins_rows([(*e, i) for e in entries])

    def _rejoins_rows(self, rows: list[tuple[int, int, int, bool, bool, int]]) -> list[Outgoing]:
        by_site: dict[int, list[tuple[int, int, int, bool, bool, int]]] = {}
        for e in rows:
            by_site.setdefault(e[0], []).append(e)
            if e[3]:  # it sends: nothing of it until its ``Rejoined``
                self.rejoining[e[5], e[1], e[2]] = e[0]
        out = []
        for site, es in sorted(by_site.items()):
            p = np.array([e[1] for e in es], dtype=np.int32)
            qi = np.array([e[5] for e in es], dtype=np.int64)
            out.append(Outgoing(site, Rejoin(
                self.stage, p=p, r=np.array([e[2] for e in es], dtype=np.int8),
                q=self.parts[qi], c=self.replica[qi], floor=self.progress_sn[qi, p].copy(),
                send=np.array([e[3] for e in es]), wait=np.array([e[4] for e in es]))))
        return out


def _ack_mask(ack_to: np.ndarray, replicas: int) -> npt.NDArray[np.bool_]:
    """``ack_to`` as a mask ``[Qn, P, R]``; a ``[Qn, P]`` array of one target each (-1: none)
    is accepted too."""
    ack_to = np.asarray(ack_to)
    if ack_to.ndim == 3:
        return ack_to.astype(bool).copy()
    mask: npt.NDArray[np.bool_] = ack_to[:, :, None] == np.arange(replicas)[None, None, :]
    return mask


def _partitions(parts: Sequence[int], at_most: int = 8) -> str:
    """``partition 1``, ``partitions 1, 5, 9`` or ``partitions 1, 5, ... (12 in all)``."""
    shown = ", ".join(map(str, parts[:at_most]))
    more = f", ... ({len(parts)} in all)" if len(parts) > at_most else ""
    return f"partition{'s' if len(parts) > 1 else ''} {shown}{more}"
