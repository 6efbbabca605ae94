"""Acknowledgements of one pass to one site merge into one frame (``coalesce_acks``)."""

from __future__ import annotations

import numpy as np

from sparkflux.protocol.messages import Ack, Outgoing, Reverse
from sparkflux.protocol.site import coalesce_acks


def ack(stage: int, p: int, q: int, upto: int) -> Ack:
    return Ack(stage, p=np.array([p], np.int32), q=np.array([q], np.int32),
               c=np.array([0], np.int8), upto=np.array([upto], np.int64))


def test_acks_to_one_site_merge_into_the_first_ones_place() -> None:
    outs = [Outgoing(1, ack(1, 0, 3, 10)), Outgoing(2, ack(1, 0, 4, 5)),
            Outgoing(1, ack(1, 2, 3, 12)), Outgoing(1, ack(2, 0, 3, 7))]
    got = coalesce_acks(outs)
    assert [(o.site, o.message.stage) for o in got] == [(1, 1), (2, 1), (1, 2)]
    first = got[0].message
    assert isinstance(first, Ack)
    assert first.p.tolist() == [0, 2] and first.upto.tolist() == [10, 12]


def test_no_ack_moves_past_another_message_to_the_same_site() -> None:
    """An ack after a ``reverse`` to the same site stays after it (order among control
    frames is kept); to other sites order never mattered."""
    rev = Reverse(1, p=np.array([0], np.int32), r=np.array([0], np.int8),
                  q=np.array([3], np.int32), c=np.array([1], np.int8),
                  floor=np.array([0], np.int64))
    outs = [Outgoing(1, ack(1, 0, 3, 10)), Outgoing(1, rev), Outgoing(1, ack(1, 0, 3, 11))]
    got = coalesce_acks(outs)
    assert [type(o.message).__name__ for o in got] == ["Ack", "Reverse", "Ack"]
    assert got[2].message.upto.tolist() == [11]  # type: ignore[union-attr]
