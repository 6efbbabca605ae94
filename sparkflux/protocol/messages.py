"""Messages between sites and the driver (protocol-level; the runtime encodes them on the wire).

Data and acknowledgements travel on the same FIFO connection between two sites; the protocol
depends on that order (an acknowledgement sent before a ``reverse`` arrives before it).

- ``Data``: rows of one exchange from the producer replicas of the sending site. ``streams``
  lists, per stream ``p -> q`` the sender feeds on the receiving site, the producer replica
  ``r`` and the progress of that stream; rows carry ``_part`` = q and ``_src`` = p.
- ``Ack``: cumulative acknowledgements "consumer replica (q, c) received stream p -> q up to
  SN ``upto``", for producer replicas hosted on the receiving site (SIGMOD §3).
- ``Reverse``: consumer replicas that lost their sender ask replica ``r`` of producer p to send
  them stream p -> q from the first SN they have not acknowledged (thesis §3.3); all the
  reversals one site asks of another travel in one message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkflux.model.schema import SRC as SRC  # re-exported: the producer partition
from sparkflux.protocol.control_messages import ControlMessage


@dataclass(frozen=True, slots=True)
class Streams:
    """Per-stream progress entries (parallel arrays)."""

    p: npt.NDArray[np.int32]  # producer partition
    r: npt.NDArray[np.int8]  # producer replica
    q: npt.NDArray[np.int32]  # consumer partition
    sn: npt.NDArray[np.int64]  # progress (all SNs <= sn sent)
    wm: npt.NDArray[np.int64]  # watermark

    def __len__(self) -> int:
        return int(self.p.size)


@dataclass(frozen=True, slots=True)
class Data:
    stage: int
    streams: Streams
    batch: pa.RecordBatch | None


@dataclass(frozen=True, slots=True)
class Ack:
    stage: int
    p: npt.NDArray[np.int32]  # producer partition (its replica is the one hosted at the receiver)
    q: npt.NDArray[np.int32]  # consumer partition
    c: npt.NDArray[np.int8]  # consumer replica that received
    upto: npt.NDArray[np.int64]  # cumulative SN


@dataclass(frozen=True, slots=True)
class Reverse:
    """Consumer replicas (q[i], c[i]) ask replica r[i] of producer p[i] for stream p -> q,
    from above ``floor[i]`` (what they have received)."""

    stage: int
    p: npt.NDArray[np.int32]
    r: npt.NDArray[np.int8]
    q: npt.NDArray[np.int32]
    c: npt.NDArray[np.int8]
    floor: npt.NDArray[np.int64]


# -- catch-up (SIGMOD §3.3, §5.3) -----------------------------------------------
@dataclass(frozen=True, slots=True)
class CuStart:
    """Controller -> a survivor replica of partition q (a complete copy the controller
    picks): catch up replica r of partition q."""

    stage: int
    q: int
    r: int
    epoch: int = 0  # the adoption epoch of the new replica's site slot
    # A move's catch-up: every producer site began retaining for (q, r) when it applied the
    # move and sent its ``retaining`` then; the survivor sends no ``retain`` of its own.
    retained: bool = False


@dataclass(frozen=True, slots=True)
class Retain:
    """Survivor -> every site hosting a producer of ``stage``: keep stream p -> q for the new
    replica (q, c) from now on (wait for its acknowledgement, send nothing yet). ``epoch``
    (the paper's version number) names the incarnation of c's site the catch-up is for; a
    producer ignores a retain for an incarnation that is no longer the current one."""

    stage: int
    q: int
    c: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Retaining:
    """Producer site -> survivor, on the data channel: retention for (q, c) is in force; every
    row sent to the survivor before this message is covered by its snapshot. The ``epoch``
    is the retain's: a reply to a stale retain must not complete a newer catch-up."""

    stage: int
    q: int
    c: int
    epoch: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSnapshot:
    """FH-Cons state of one consumer partition q (``ConsumerSet.snapshot``): what the new
    replica's input streams resume from, and the rows received above the frontier that the
    paper buffers inside FH-Cons (at or below the progress: no producer sends them again)."""

    progress_sn: npt.NDArray[np.int64]  # [P]: stream p -> q received up to this SN
    progress_wm: npt.NDArray[np.int64]  # [P]: the watermark that came with it
    released_sn: int  # the frontier already handed to the operators
    released_wm: int
    pending: pa.RecordBatch | None  # received, not yet released (wire schema); None: none
    # an input out of SN order (``ConsumerSet.unordered``): the keys (p, SN, SNM, port) of
    # the rows passed above their stream's progress, which the new copy must not pass again
    seen: npt.NDArray[np.int64] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSnapshot:
    """Partition q of one stage as the survivor takes it for a catch-up (the paper's
    ``getState``): its FH-Cons state, its operators' state, its FH-Prod progress and the
    rows its FH-Prod buffer holds (the buffer moves with the state, as in the paper: a
    consumer that reverses to the new copy later may lack rows the survivor produced before
    the snapshot, and only the buffer has them once the survivor is gone).

    ``ops`` holds what each operator's ``get_partition_state`` returned, in plan order; the
    codec carries it as plain values (numpy arrays of numbers and Arrow tables out of band)
    and refuses anything that would need pickle."""

    cons: ConsumerSnapshot
    ops: tuple[Any, ...]
    out_sn: int  # FH-Prod: the partition's output progress (SN) ...
    out_wm: int  # ... and watermark
    held: pa.RecordBatch | None = None  # FH-Prod: the buffered rows of partition q


@dataclass(frozen=True, slots=True)
class Cut:
    """Checkpoint ``checkpoint`` cuts the input at SN ``sn`` (docs/design.md §9), told to
    the consumers of ``stage`` in-band: on the data connection, after every row at or below
    the cut that its sender sends and before any above it (the ingress for the first stage,
    a site that learnt it for the next), so that no partition can pass the cut unknowing."""

    stage: int
    checkpoint: int
    sn: int


@dataclass(frozen=True, slots=True)
class StoredPartition:
    """Partition q of ``stage`` as written to a snapshot store (``runtime/snapshots.py``),
    not sent to a peer: checkpoint ``checkpoint``'s part, cut at input SN ``cut`` (every row
    at or below it processed, none above), or a partition spilled to disk (``cut`` its
    frontier then). The same typed record as a catch-up's ``State`` carries, so that one
    codec reads both and nothing stored is unpickled."""

    checkpoint: int
    stage: int
    q: int
    cut: int
    snapshot: PartitionSnapshot


SPILL = -1  # a ``StoredPartition``'s checkpoint number when it is a spilled partition


@dataclass(frozen=True, slots=True)
class LoadPartition:
    """Bring partition q of ``stage`` back from the site's spill store (``protocol/memory.py``):
    the runtime reads it and hands it to the core (``Loaded``, with this load's ``seq``: a
    late answer to an earlier load of the same partition is not taken for this one)."""

    stage: int
    q: int
    seq: int = 0


@dataclass(frozen=True, slots=True)
class SpillInput:
    """Rows received for partition q of ``stage`` while it is on disk, to the site's spill
    store beside its state (thesis ch. 4: a spilled partition's pending input goes to disk
    with it). A ``LoadPartition`` brings them back with the state; the next spill of the
    partition's state starts its record on disk afresh."""

    stage: int
    q: int
    rows: pa.RecordBatch


@dataclass(frozen=True, slots=True)
class State:
    """Survivor -> the new replica's site (the StateMover's transfer): partition q of ``stage``,
    taken for incarnation ``epoch`` of replica (q, r)."""

    stage: int
    q: int
    r: int
    snapshot: PartitionSnapshot
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Installed:
    """New replica -> survivor: state installed and input streams rejoined, for the
    incarnation ``epoch`` of the replica (a late one from an earlier incarnation is ignored)."""

    stage: int
    q: int
    r: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class PSync:
    """Survivor -> downstream consumer sites on the data channel (``psync``): replica r of
    producer partition p is back (its incarnation ``epoch``: a late one of an earlier
    incarnation is ignored); acknowledge to it what you receive from me."""

    stage: int
    p: int
    r: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Rejoin:
    """Consumer replicas -> producer replicas (fold-in, ``csync``): set the roles of stream
    p -> q for consumer replica c: ``floor`` is what c already has (rows at or below it are
    never sent to c nor held for it), then ``send`` / ``wait`` as given."""

    stage: int
    p: npt.NDArray[np.int32]
    r: npt.NDArray[np.int8]
    q: npt.NDArray[np.int32]
    c: npt.NDArray[np.int8]
    floor: npt.NDArray[np.int64]
    send: npt.NDArray[np.bool_]
    wait: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Rejoined:
    """Producer replicas -> a consumer site, on the data channel, ordered with the rows:
    the ``Rejoin`` of stream p -> q for consumer replica c is done, and the rows that follow
    are for the copy that sent it. A frame names the consumer partition, not the incarnation
    of its copy: rows sent to a copy retired since, held behind a full connection, may
    reach its site after a new copy of the same column installed there (the controller's
    ``move`` and the snapshot travel on other connections). The consumer takes nothing of
    the stream from that site between its ``Rejoin`` and this."""

    stage: int
    p: npt.NDArray[np.int32]
    r: npt.NDArray[np.int8]
    q: npt.NDArray[np.int32]
    c: npt.NDArray[np.int8]


@dataclass(frozen=True, slots=True)
class CuDone:
    """Survivor -> controller: partition q of ``stage`` has two replicas again."""

    stage: int
    q: int
    r: int
    nbytes: int
    move_s: float = 0.0  # how long the StateMover took to send the state


@dataclass(frozen=True, slots=True)
class Keepalive:
    """Site -> peer on a link that carried nothing for a while: the link is alive. A site
    that waits to read a link and hears nothing on it for the link timeout reports the peer
    unreachable (``protocol/site_boundary.py``); never given to the core."""


@dataclass(frozen=True, slots=True)
class Probe:
    """Site -> peer site or driver, every ``probe_every`` seconds of link checks: the
    sender's own clock reading ``sent``, answered at once with an ``Echo`` of it. Half the
    round trip is the link's measured one-way latency: the heartbeat reports it, and
    latency-aware placement re-deploys copies by it (the racing-replicas paper's Section
    V-C: adaptation to changes). Never given to the core."""

    sent: float


@dataclass(frozen=True, slots=True)
class Echo:
    """The answer to a ``Probe``: its ``sent`` back to the prober. Never given to the core."""

    sent: float


@dataclass(frozen=True, slots=True)
class Tentative:
    """Tentative rows for ``stage`` (Borealis' tentative tuples; ``protocol/consistency.py``):
    input the ingress released without a failed source's records, and whatever the stages
    made of it, numbered apart from the stable SNs. They go to the first live copy of each
    consumer partition only, best effort (no acknowledgement, no replay: the stable rows
    replace them). ``stage`` = the number of stages: to the egress. ``sn``/``wm``: the
    sender's claim, the tentative frontier its rows are complete up to."""

    stage: int
    epoch: int
    rows: pa.RecordBatch | None
    sn: int
    wm: int


@dataclass(frozen=True, slots=True)
class Reconciled:
    """Driver -> every site: failure episode ``epoch`` is over (its stable rows have reached
    the output): drop the tentative branches of that episode and any older one."""

    epoch: int


Message = (Data | Ack | Reverse | CuStart | Retain | Retaining | State | Installed | PSync
           | Rejoin | Rejoined | CuDone | Cut | StoredPartition | LoadPartition | SpillInput
           | Tentative | Reconciled)
# Whatever a connection carries: a protocol message, a controller's message, a keepalive or
# a latency probe.
Frame = Message | ControlMessage | Keepalive | Probe | Echo


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Send ``message`` to site ``site`` (``DRIVER`` = -1 for the ingress/egress; a site's
    ``folded`` goes to the controller this way too)."""

    site: int
    message: Message | ControlMessage
