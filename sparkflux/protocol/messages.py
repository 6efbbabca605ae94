"""Messages between sites and the driver (protocol-level; the runtime encodes them on the wire).

Data and acknowledgements travel on the same FIFO connection between two sites; the protocol
depends on that order (an acknowledgement sent before a ``reverse`` arrives before it).

- ``Data``: rows of one exchange from the producer replicas of the sending site. ``streams``
  lists, per stream ``p -> q`` the sender feeds on the receiving site, the producer replica
  ``r`` and the progress of that stream; rows carry ``_part`` = q and ``_src`` = p.
- ``Ack``: cumulative acknowledgements "consumer replica (q, c) received stream p -> q up to
  SN ``upto``", for producer replicas hosted on the receiving site (digest §4.1-4.4).
- ``Reverse``: consumer replicas that lost their sender ask replica ``r`` of producer p to send
  them stream p -> q from the first SN they have not acknowledged (digest §5.2); all the
  reversals one site asks of another travel in one message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

SRC = "_src"


@dataclass(frozen=True, slots=True)
class Streams:
    """Per-stream progress entries (parallel arrays)."""

    p: np.ndarray  # int32 producer partition
    r: np.ndarray  # int8 producer replica
    q: np.ndarray  # int32 consumer partition
    sn: np.ndarray  # int64 progress (all SNs <= sn sent)
    wm: np.ndarray  # int64 watermark

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
    p: np.ndarray  # int32 producer partition (its replica is the one hosted at the receiver)
    q: np.ndarray  # int32 consumer partition
    c: np.ndarray  # int8 consumer replica that received
    upto: np.ndarray  # int64 cumulative SN


@dataclass(frozen=True, slots=True)
class Reverse:
    """Consumer replicas (q[i], c[i]) ask replica r[i] of producer p[i] for stream p -> q."""

    stage: int
    p: np.ndarray  # int32
    r: np.ndarray  # int8
    q: np.ndarray  # int32
    c: np.ndarray  # int8


Message = Data | Ack | Reverse


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Send ``message`` to site ``site`` (``DRIVER`` = -1 for the ingress/egress)."""

    site: int
    message: Message
