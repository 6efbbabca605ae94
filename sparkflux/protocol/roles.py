"""Initial connection roles of every FH-Prod / FH-Cons (digest §4.4), from the layout.

- Ingress -> first stage: send to and wait for both replicas (``del = {PROD, PRIM, SEC}``).
- FH-Prod replica r -> consumer partition q: send to (q, r), wait for (q, 1 - r).
- Last stage -> egress: replica 0 sends (S-Prod^P), replica 1 only buffers until the egress
  acknowledges (S-Prod^S, the duplicate-elimination buffer).
- FH-Cons replica c: take stream p -> q from (p, c), acknowledge to (p, 1 - c); first-stage
  consumers take from and acknowledge to the ingress; the egress takes from replica 0 and
  acknowledges to replica 1.

With one replica (``--ha none``) nobody waits and nobody acknowledges.
"""

from __future__ import annotations

import numpy as np

from sparkflux.dataflow.placement import DRIVER, Layout


def producer_roles(layout: Layout, producers: dict[int, int], to_egress: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(consumer_site[Q, C], send[Pn, Q, C], wait[Pn, Q, C]) for hosted producer replicas."""
    rep = np.array([producers[p] for p in sorted(producers)], dtype=np.int8)
    two = layout.replicas == 2
    if to_egress:
        site = np.full((1, 1), DRIVER, dtype=np.int32)
        send = (rep == 0)[:, None, None]
        wait = ((rep == 1) & two)[:, None, None]
        return site, send, wait
    c = np.arange(layout.replicas)[None, None, :]
    r = rep[:, None, None]
    send = np.broadcast_to(c == r, (rep.size, layout.partitions, layout.replicas))
    wait = np.broadcast_to((c == 1 - r) & two, send.shape)
    return layout.table(), send, wait


def ingress_roles(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = (1, layout.partitions, layout.replicas)
    send = np.ones(shape, dtype=bool)
    wait = np.full(shape, layout.replicas == 2)
    return layout.table(), send, wait


def consumer_roles(layout: Layout, consumers: dict[int, int], first_stage: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(producer_site[P, R], sender[Qn, P], ack_to[Qn, P]) for hosted consumer replicas."""
    rep = np.array([consumers[q] for q in sorted(consumers)], dtype=np.int8)
    two = layout.replicas == 2
    if first_stage:
        site = np.full((1, 1), DRIVER, dtype=np.int32)
        sender = np.zeros((rep.size, 1), dtype=np.int8)
        ack_to = np.full((rep.size, 1), 0 if two else -1, dtype=np.int8)
        return site, sender, ack_to
    sender = np.repeat(rep[:, None], layout.partitions, axis=1)
    ack_to = (1 - sender) if two else np.full(sender.shape, -1, dtype=np.int8)
    return layout.table(), sender, ack_to.astype(np.int8)


def egress_roles(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sender = np.zeros((1, layout.partitions), dtype=np.int8)
    ack_to = np.full((1, layout.partitions), 1 if layout.replicas == 2 else -1, dtype=np.int8)
    return layout.table(), sender, ack_to
