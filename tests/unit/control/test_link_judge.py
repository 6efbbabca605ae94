"""The link judge: which end of a broken link is excluded (``control/link_judge.py``)."""

from __future__ import annotations

from sparkflux.control.link_judge import PATIENCE_S, SETTLE_S, LinkJudge

ALL = {0, 1, 2, 3}


def test_a_site_cut_off_from_its_peers_is_the_one_excluded_whoever_reports_first() -> None:
    j = LinkJudge()
    # the cut-off site 2's own reports come first: failing the site they name would exclude
    # healthy sites
    for peer in (0, 1, 3):
        j.report(2, peer, "link silent", now=1.0)
    for peer in (0, 1, 3):
        j.report(peer, 2, "link silent", now=1.05)
    assert not j.due(1.0 + SETTLE_S / 2)
    assert j.due(1.0 + SETTLE_S)
    [(site, why)] = j.decide(ALL, 1.0 + SETTLE_S)
    assert site == 2
    assert why.startswith("unreachable from sites 0, 1 and 3, cut off or hung "
                          "(site 2 cannot reach site 0")
    assert not j.due(10.0)  # nothing left to judge


def test_a_lone_link_waits_for_the_other_reports_of_a_cut() -> None:
    """Site 0 is cut off, but by the settle time only one link of it is reported from both
    ends (the others check their links later): a 1-1 tie would pick the higher slot, a
    healthy site 1. The lone link waits; the next reports name site 0."""
    j = LinkJudge()
    j.report(0, 1, "silent", now=0.0)
    j.report(1, 0, "silent", now=0.05)
    assert j.due(SETTLE_S) and j.decide(ALL, SETTLE_S) == []
    j.report(2, 0, "silent", now=0.3)
    assert [s for s, _ in j.decide(ALL, 0.35)] == [0]


def test_one_broken_link_costs_one_end_after_the_patience() -> None:
    j = LinkJudge()
    j.report(0, 3, "refused", now=0.0)
    assert j.decide(ALL, SETTLE_S) == []
    assert j.decide(ALL, PATIENCE_S) == [
        (3, "unreachable from site 0, cut off or hung (site 0 cannot reach site 3: refused)")]
    j.report(0, 3, "silent", now=5.0)
    j.report(3, 0, "silent", now=5.0)
    assert [s for s, _ in j.decide(ALL, 5.0 + PATIENCE_S)] == [3]  # a tie: the higher slot


def test_two_cut_off_sites_are_both_excluded_and_reports_of_dead_sites_are_dropped() -> None:
    j = LinkJudge()
    for a, b in [(0, 1), (0, 3), (2, 1), (2, 3), (4, 1), (4, 3)]:
        j.report(a, b, "silent", now=0.0)
    assert sorted(s for s, _ in j.decide({0, 1, 2, 3, 4}, SETTLE_S)) == [1, 3]
    j.report(0, 1, "silent", now=0.0)
    assert j.decide({0, 2, 3}, 9.0) == []  # site 1 is no live member any more
    assert not j.due(9.0)


def test_a_site_moving_state_is_not_judged_and_its_reports_are_dropped() -> None:
    j = LinkJudge()
    for peer in (0, 1, 3):
        j.report(peer, 2, "silent", now=0.0)
    assert j.decide(ALL, 1.0, busy=frozenset({2})) == []
    assert not j.due(5.0)  # dropped: a real cut is reported again after the transfer


def test_a_failed_slots_reports_do_not_pass_to_its_next_process() -> None:
    """Site 2 saw its link to the crashed site 1 reset before the driver noticed the crash;
    slot 1's next process, adopted within the patience, must not inherit that report."""
    j = LinkJudge()
    j.report(2, 1, "the link closed", now=0.0)
    j.forget(1)  # site 1's process failed
    assert j.decide(ALL, PATIENCE_S) == [] and not j.due(PATIENCE_S)


def test_sites_that_must_stay_are_never_picked_and_their_links_wait_to_heal() -> None:
    """Rule 6. A split 0,1 / 2,3 where each side holds both copies of some partition: a site
    must stay once its pair (0-1, 2-3) is gone (``keep``, as the controller's last-copy
    rule says with the sites failed so far). The cover picks 3 first; then 2 must stay, and
    its links to 0 and 1 are lone ones: after the patience the free end 1 goes, then 0 and 2
    must both stay: their link is dropped (reported again while the split lasts) and both
    are named as kept."""
    j = LinkJudge()
    for a in (0, 1):
        for b in (2, 3):
            j.report(a, b, "link silent", now=1.0)
            j.report(b, a, "link silent", now=1.0)
    dead: set[int] = set()
    pair = {0: 1, 1: 0, 2: 3, 3: 2}

    def keep(site: int, gone: frozenset[int]) -> bool:
        return pair[site] in dead | gone

    assert [s for s, _ in j.decide(ALL, 1.0 + SETTLE_S, keep=keep)] == [3]
    assert j.kept == []  # the lone links 0-2 and 1-2 wait for the patience
    dead.add(3)
    assert [s for s, _ in j.decide(ALL - dead, 1.0 + PATIENCE_S, keep=keep)] == [1]
    assert [s for s, _ in j.kept] == [0, 2]
    assert j.kept[0][1].startswith("unreachable from site 2")
    assert not j.due(10.0)


def test_the_other_end_of_a_link_is_picked_when_one_end_must_stay() -> None:
    """A lone broken link 1-2 (reset, never reported again): site 2 holds a partition's only
    complete copy, so site 1 goes, whatever the tie-break would say."""
    j = LinkJudge()
    j.report(1, 2, "link closed", now=1.0)
    j.report(2, 1, "link closed", now=1.0)
    picked = j.decide(ALL, 1.0 + PATIENCE_S, keep=lambda s, gone: s == 2)
    assert [s for s, _ in picked] == [1] and j.kept == []
