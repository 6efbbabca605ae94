"""A site's pass (``protocol/site.py``): ``link_runs`` gathers a link's data frames (and its
acknowledgements) of one stage at the first one's place, and any other message of the link
closes its runs; ``merge_acks`` and ``coalesce_acks`` keep every entry. (The site's core in
full: ``test_site_boundary.py``, ``test_catchup.py``, ``test_link_runs.py``.)"""

from __future__ import annotations

import numpy as np

from sparkflux.protocol.messages import Ack, Data, Outgoing, PSync, Reverse, Streams
from sparkflux.protocol.site import coalesce_acks, link_runs, merge_acks


def data(stage: int, sn: int) -> Data:
    one = np.zeros(1, np.int32)
    return Data(stage, Streams(p=one, r=np.zeros(1, np.int8), q=one, sn=np.array([sn]),
                               wm=np.array([sn])), None)


def ack(stage: int, upto: int) -> Ack:
    one = np.zeros(1, np.int32)
    return Ack(stage, p=one, q=one, c=np.zeros(1, np.int8), upto=np.array([upto]))


def test_a_links_frames_of_one_stage_are_gathered_at_the_first_ones_place() -> None:
    d1, d2, d3, a1, a2 = data(1, 1), data(1, 2), data(1, 3), ack(1, 5), ack(1, 6)
    other = data(2, 9)
    runs = link_runs([(1, d1), (2, other), (1, a1), (1, d2), (1, a2), (1, d3)])
    assert runs == [(1, [d1, d2, d3]), (2, [other]), (1, [a1, a2])]


def test_another_kind_of_message_closes_only_its_links_runs() -> None:
    d1, d2, d3 = data(1, 1), data(1, 2), data(1, 3)
    ps = PSync(stage=1, p=0, r=1)
    runs = link_runs([(1, d1), (2, d3), (1, ps), (1, d2), (2, data(1, 4))])
    assert [(src, [type(m).__name__ for m in ms]) for src, ms in runs] == [
        (1, ["Data"]), (2, ["Data", "Data"]), (1, ["PSync"]), (1, ["Data"])]
    assert runs[3][1] == [d2]  # after the psync, never before it


def test_merge_acks_keeps_every_entry_in_order() -> None:
    a, b = ack(1, 5), ack(1, 6)
    assert merge_acks([a]) is a
    m = merge_acks([a, b])
    assert m.stage == 1 and m.upto.tolist() == [5, 6] and m.p.tolist() == [0, 0]


def test_coalesce_merges_consecutive_acks_to_a_site_but_never_across_another_message() -> None:
    rev = Reverse(1, *(np.zeros(1, t) for t in (np.int32, np.int8, np.int32, np.int8, np.int64)))
    outs = [Outgoing(3, ack(1, 1)), Outgoing(4, ack(1, 2)), Outgoing(3, ack(1, 3)),
            Outgoing(3, ack(2, 4)), Outgoing(3, rev), Outgoing(3, ack(1, 5))]
    got = coalesce_acks(outs)
    assert [(o.site, type(o.message).__name__, o.message.stage) for o in got] == [
        (3, "Ack", 1), (4, "Ack", 1), (3, "Ack", 2), (3, "Reverse", 1), (3, "Ack", 1)]
    assert got[0].message.upto.tolist() == [1, 3] and got[4].message.upto.tolist() == [5]
