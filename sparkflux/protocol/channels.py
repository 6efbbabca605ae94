"""Which connection every message travels on, and which messages keep their place behind data.

One table, read by the runtime (the DTSB in ``runtime/outbox.py``, the site host's StateMover,
the driver host) and by the simulator's links (``sim/network.py``), so the simulator delivers
exactly the orders the runtime can produce, no fewer.

The rules (thesis §3.2-3.3, our names):

1. Between two sites there is one multiplexed data connection (``LINK``) and, for state, the
   StateMover's connection (``STATE``: a snapshot one way, ``installed`` back), so a snapshot
   never queues ahead of data frames nor behind them (Fig. 3.9). A site has two connections
   to the driver: ``LINK`` (the ingress's input, the egress's output and their
   acknowledgements, and the set-up: ``register``, ``view``, ``standby``, ``adopt``,
   ``ready``) and ``CONTROL`` (the controller's ``fail``, ``move``, ``avail``, ``cu-start``,
   ``slow``, ``kill``, ``stop``; the site's heartbeats, ``moved``, ``folded``, ``unreachable``
   and error reports), which nothing on the data connection can delay. Nothing orders two
   connections.
2. On a ``LINK``, ``ORDERED`` frames (``Data``; a checkpoint's ``Cut``: no row above it may
   pass it; ``retaining``: the survivor's snapshot counts on every row sent before it;
   ``psync``: the consumers' fold-in counts on the same; ``rejoined``: the rows after it are
   for the copy that rejoined, those before it perhaps for one retired since; ``cu-done``:
   the controller counts a copy as back only once the egress, on the same connection, has
   its ``psync``) go through the sender's skew buffer (DTSB) and may wait there while the
   connection is full.
   Every other frame (acknowledgements, ``reverse``, ``rejoin``, ``retain``, keepalives,
   latency probes and their echoes, and an episode's ``Tentative`` rows and claims) is
   written at once and so may overtake held
   ordered frames, never the other way round. Each class is FIFO within itself. Tentative
   rows are the answer while the stable ones wait: behind the skew buffer they would queue
   after the redo's stable rows at every hop, which the delay bound forbids. So a branch
   may fork before stable rows sent earlier arrive (its tentative answer then lacks them
   until the corrections; the stable output is never touched), and ``Reconciled``, ordered,
   still comes after its episode's tentative rows.

   A ``StoredPartition`` (a checkpoint's part, or a spilled partition), a ``SpillInput`` and
   a ``LoadPartition`` take no connection: they go to the run's snapshot store or the site's
   spill store (``STORE``), which carries them out in order.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import (
    Ack,
    CuDone,
    CuStart,
    Cut,
    Data,
    Echo,
    Installed,
    Keepalive,
    LoadPartition,
    Probe,
    PSync,
    Reconciled,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Reverse,
    SpillInput,
    State,
    StoredPartition,
    Tentative,
)


class Channel(Enum):
    """A connection between two parties (rule 1)."""

    LINK = "link"  # site-site data connection; a site's data connection to the driver
    STATE = "state"  # the StateMover's connection between two sites
    CONTROL = "control"  # the controller's connection to a site
    STORE = "store"  # no connection: a write to the run's snapshot store (``snapshots.py``)


# message type -> (channel, ordered with data on it: rule 2)
ROUTES: dict[type, tuple[Channel, bool]] = {
    Data: (Channel.LINK, True),
    Cut: (Channel.LINK, True),  # a checkpoint's cut keeps its place among the rows
    Tentative: (Channel.LINK, False),  # the answer while stable rows wait: never behind them
    Reconciled: (Channel.LINK, True),  # after the tentative rows of its episode
    Retaining: (Channel.LINK, True),
    PSync: (Channel.LINK, True),
    CuDone: (Channel.LINK, True),
    Ack: (Channel.LINK, False),
    Reverse: (Channel.LINK, False),
    Rejoin: (Channel.LINK, False),
    Rejoined: (Channel.LINK, True),  # after the rows sent to the copy before it
    Retain: (Channel.LINK, False),
    Keepalive: (Channel.LINK, False),
    Probe: (Channel.LINK, False),  # latency probes: written at once, as keepalives
    Echo: (Channel.LINK, False),
    State: (Channel.STATE, False),
    StoredPartition: (Channel.STORE, False),
    LoadPartition: (Channel.STORE, False),
    SpillInput: (Channel.STORE, False),
    Installed: (Channel.STATE, False),
    CuStart: (Channel.CONTROL, False),
    # set-up, on the data connection to the driver
    cm.Register: (Channel.LINK, False),
    cm.View: (Channel.LINK, False),
    cm.Standby: (Channel.LINK, False),
    cm.Adopt: (Channel.LINK, False),
    cm.Ready: (Channel.LINK, False),
    # the controller's own connection
    cm.OpenControl: (Channel.CONTROL, False),
    cm.Heartbeat: (Channel.CONTROL, False),
    cm.Moved: (Channel.CONTROL, False),
    cm.Folded: (Channel.CONTROL, False),
    cm.PartStored: (Channel.CONTROL, False),
    cm.SiteError: (Channel.CONTROL, False),
    cm.Unreachable: (Channel.CONTROL, False),
    cm.Avail: (Channel.CONTROL, False),
    cm.Fail: (Channel.CONTROL, False),
    cm.Move: (Channel.CONTROL, False),
    cm.Slow: (Channel.CONTROL, False),
    cm.Squeeze: (Channel.CONTROL, False),
    cm.Kill: (Channel.CONTROL, False),
    cm.Stop: (Channel.CONTROL, False),
}

# The frames that keep their place behind data on a link (rule 2), derived from ``ROUTES``.
ORDERED_WITH_DATA: tuple[type, ...] = tuple(t for t, (_, o) in ROUTES.items() if o)


def route(message: Any) -> tuple[Channel, bool]:
    """The channel ``message`` travels on and whether it is ordered with data there."""
    try:
        return ROUTES[type(message)]
    except KeyError:
        raise TypeError(f"no route for a {type(message).__name__}") from None


def channel_of(message: Any) -> Channel:
    return route(message)[0]


def ordered_with_data(message: Any) -> bool:
    """Whether ``message`` waits behind data the sender holds for the same connection."""
    return route(message)[1]
