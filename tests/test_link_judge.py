"""The link judge: which end of a broken link the controller excludes (``link_judge.py``)."""

from __future__ import annotations

from sparkflux.control.link_judge import SETTLE_S, LinkJudge


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
    [(site, why)] = j.decide({0, 1, 2, 3})
    assert site == 2
    assert why.startswith("unreachable from sites 0, 1 and 3, cut off or hung "
                          "(site 2 cannot reach site 0")
    assert not j.due(10.0)  # a fresh round


def test_one_broken_link_costs_the_end_named_unreachable() -> None:
    j = LinkJudge()
    j.report(0, 3, "refused", now=0.0)
    assert j.decide({0, 1, 2, 3}) == [(3, "unreachable from site 0, cut off or hung (site 0 "
                                          "cannot reach site 3: refused)")]
    j.report(0, 3, "silent", now=0.0)
    j.report(3, 0, "silent", now=0.0)
    assert [s for s, _ in j.decide({0, 1, 2, 3})] == [3]  # a tie: the higher slot


def test_two_cut_off_sites_are_both_excluded_and_reports_of_dead_sites_are_dropped() -> None:
    j = LinkJudge()
    for a, b in [(0, 1), (0, 3), (2, 1), (2, 3), (4, 1), (4, 3)]:
        j.report(a, b, "silent", now=0.0)
    assert sorted(s for s, _ in j.decide({0, 1, 2, 3, 4})) == [1, 3]
    j.report(0, 1, "silent", now=0.0)
    assert j.decide({0, 2, 3}) == []  # site 1 is no live member any more
