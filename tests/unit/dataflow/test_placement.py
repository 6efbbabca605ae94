"""Chained declustering over failure domains (``dataflow/placement.py``): the ring of site
slots ``choose_ring`` lays over the executors and hosts the sites registered with, the table a
ring gives, and how a site finds its executor (``runtime/failure_domain.py``).

The rule: no K consecutive ring positions (the copies of one partition) in one executor, nor,
where the sites are on more than one host, on one host; hosts first. Exact rings for small
cases; for random assignments the invariant whenever it can hold (no host, or executor, with
more than N // K sites) and, up to seven sites, the fewest conflicts any ring has, checked
against every ring.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from sparkflux.control.policy import PolicyConfig, plan_moves, recovery_site
from sparkflux.dataflow.placement import (
    NOWHERE,
    Domain,
    Layout,
    choose_ring,
    clash,
    ring_conflicts,
    table_conflicts,
)
from sparkflux.model.errors import PlanError
from sparkflux.protocol import control_messages as cm
from sparkflux.runtime import failure_domain
from sparkflux.runtime.frames import FRAME_HEADER, MSG, decode, encode

RANDOM_CASES = 150


def execs(*names: str, host: str = "h") -> list[Domain]:
    return [Domain(host, e) for e in names]


def best_by_brute_force(domains: list[Domain], k: int) -> tuple[int, int]:
    n = len(domains)
    return min(ring_conflicts([0, *p], domains, k) for p in itertools.permutations(range(1, n)))


# -- exact rings -------------------------------------------------------------------------------
def test_four_sites_two_sharing_an_executor() -> None:
    doms = execs("a", "a", "b", "c")
    assert ring_conflicts([0, 1, 2, 3], doms, 2) == (0, 1)
    assert choose_ring(doms, 2) == [0, 2, 1, 3]
    lay = Layout(4, 8, 2, ring=[0, 2, 1, 3])
    # replica r of q on ring[(q + r) mod 4]: sites 0 and 1 never hold one partition
    # (and a free column, NOWHERE, where a move builds its new copy: make before break)
    assert lay.table().tolist() == [[0, 2, NOWHERE], [2, 1, NOWHERE], [1, 3, NOWHERE],
                                    [3, 0, NOWHERE]] * 2
    assert all({0, 1} != set(row) for row in lay.table()[:, :2].tolist())


def test_two_hosts_of_three_alternate() -> None:
    doms = [Domain("A", f"A:{i}") for i in range(3)] + [Domain("B", f"B:{i}") for i in range(3)]
    assert choose_ring(doms, 2) == [0, 3, 1, 4, 2, 5]


def test_hosts_come_before_executors() -> None:
    """Host A has sites 0-3 in two executors, host B sites 4-7: a ring that only separates
    executors (0, 2, 1, 3, ...) would still put a pair on one host."""
    doms = [Domain("A", "A:1"), Domain("A", "A:1"), Domain("A", "A:2"), Domain("A", "A:2"),
            Domain("B", "B:1"), Domain("B", "B:1"), Domain("B", "B:2"), Domain("B", "B:2")]
    ring = choose_ring(doms, 2)
    assert ring_conflicts(ring, doms, 2) == (0, 0)
    hosts = [doms[j].host for j in ring]
    assert all(hosts[i] != hosts[(i + 1) % 8] for i in range(8)), ring


@pytest.mark.parametrize("doms", [
    execs("", "", "", ""),  # unknown: every site a domain of its own
    execs("a", "b", "c", "d"),
    execs("jvm", "jvm", "jvm", "jvm"),  # local mode: one JVM
    [Domain("127.0.0.1", "")] * 5,
], ids=["unknown", "distinct", "one-jvm", "one-host-unknown"])
def test_nothing_changes_when_domains_are_unknown_or_all_alike(doms: list[Domain]) -> None:
    assert choose_ring(doms, 2) == list(range(len(doms)))
    assert Layout(len(doms), 8, 2, ring=choose_ring(doms, 2)).table().tolist() == \
        Layout(len(doms), 8, 2).table().tolist()


def test_one_executor_with_too_many_sites_gets_the_fewest_conflicts() -> None:
    doms = execs("a", "a", "a", "b", "c")  # 3 > 5 // 2: some pair must share
    ring = choose_ring(doms, 2)
    assert ring_conflicts(ring, doms, 2) == (0, 1) == best_by_brute_force(doms, 2)


def test_three_replicas() -> None:
    doms = execs("a", "a", "b", "b", "c", "c")  # every 3 consecutive in 3 executors
    ring = choose_ring(doms, 3)
    assert ring_conflicts(ring, doms, 3) == (0, 0)
    lay = Layout(6, 12, 3, ring=ring)
    for row in lay.table()[:, :3].tolist():
        assert len({doms[s].executor for s in row}) == 3


# -- random assignments ------------------------------------------------------------------------
def random_domains(rng: np.random.Generator, n: int, k: int, spread: bool) -> list[Domain]:
    """Sites on up to four hosts, up to three executors each, one in ten unknown; ``spread``:
    dealt round-robin (in a random order) over more hosts, or executors of one host, than k,
    so that the rule can mostly hold."""
    if spread:
        colours = k + int(rng.integers(0, 3))
        multi = rng.random() < 0.5
        order = rng.permutation(n)
        out = [Domain("h", "")] * n
        for i, j in enumerate(order):
            c = i % colours
            e = int(rng.integers(2))
            out[int(j)] = Domain(f"h{c}", f"h{c}:{e}") if multi else Domain("h", f"h:{c}")
        return out
    hosts = int(rng.integers(1, 5))
    per_host = int(rng.integers(1, 4))
    out = []
    for _ in range(n):
        h = int(rng.integers(hosts))
        e = int(rng.integers(per_host))
        unknown = rng.random() < 0.1
        out.append(Domain(f"h{h}", "" if unknown else f"h{h}:{e}"))
    return out


def achievable(doms: list[Domain], k: int) -> bool:
    """No ring can do better than no conflicts; this one can when no colour (host where
    hosts differ, else executor) has more than N // K sites."""
    n = len(doms)
    hosts = {d.host for d in doms}
    if len(hosts) > 1:
        return max(sum(d.host == h for d in doms) for h in hosts) <= n // k
    known = [d.executor for d in doms if d.executor]
    return not known or max(known.count(e) for e in set(known)) <= n // k


@pytest.mark.parametrize("part", range(3))
def test_random_assignments_hold_the_invariant_whenever_it_can(part: int) -> None:
    rng = np.random.default_rng((part, 11))
    checked = 0
    for case in range(RANDOM_CASES // 3):
        n = int(rng.integers(3, 25))
        k = int(rng.integers(2, min(4, n) + 1))
        doms = random_domains(rng, n, k, spread=case % 2 == 0)
        ring = choose_ring(doms, k)
        where = f"case {part}/{case}: k={k} domains {doms} ring {ring}"
        assert sorted(ring) == list(range(n)), where
        cost = ring_conflicts(ring, doms, k)
        assert cost <= ring_conflicts(list(range(n)), doms, k), where  # never worse
        if achievable(doms, k):
            assert cost == (0, 0), where
            checked += 1
            lay = Layout(n, 2 * n, k, ring=ring)
            multi = len({d.host for d in doms}) > 1
            for row in lay.table()[:, :k].tolist():
                ex = [doms[s].executor for s in row if doms[s].executor]
                assert len(ex) == len(set(ex)), where
                if multi:
                    assert len({doms[s].host for s in row}) == k, where
        if n <= 7:
            assert cost == best_by_brute_force(doms, k), where
    assert checked >= RANDOM_CASES // 12, "too few achievable cases: the test checks little"


# -- the layout of a ring ----------------------------------------------------------------------
def test_a_ring_must_order_every_slot_once() -> None:
    with pytest.raises(PlanError, match="every site slot"):
        Layout(4, 8, 2, ring=[0, 1, 1, 3])
    lay = Layout(4, 8, 2, ring=[3, 2, 1, 0])
    table = lay.table()
    lay.set_ring([0, 2, 1, 3])  # in place: role arrays that hold the table see it
    assert table is lay.table() and lay.site_of(0, 1) == 2
    assert lay.copy().ring == (0, 2, 1, 3)


def test_clash_counts_shared_domains_hosts_where_they_differ() -> None:
    doms = {0: Domain("A", "A:1"), 1: Domain("A", "A:1"), 2: Domain("A", "A:2"),
            3: Domain("B", "B:1")}
    assert clash(0, [1], doms) == (1, 1)
    assert clash(0, [2], doms) == (1, 0)
    assert clash(0, [3], doms) == (0, 0)
    one_host = {j: Domain("A", d.executor) for j, d in doms.items()}
    assert clash(0, [2], one_host) == (0, 0)
    assert clash(0, [1], {}) == (0, 0)


# -- recovery onto survivors and the policy ----------------------------------------------------
def test_recovery_site_prefers_a_site_in_another_domain() -> None:
    table = Layout(4, 8, 2, ring=[0, 2, 1, 3]).table().copy()
    # site 1 failed; partition 1 (sites 2, 1): replica 1 goes to 0 or 3, 0 holds fewer
    live = [0, 2, 3]
    assert recovery_site(1, 1, table, live) == 0
    doms = {0: Domain("h", "x"), 2: Domain("h", "x"), 3: Domain("h", "y")}
    assert recovery_site(1, 1, table, live, doms) == 3  # 0 shares site 2's executor


def test_the_policy_moves_no_copy_into_its_partners_domain() -> None:
    table = Layout(4, 8, 2).table().copy()  # identity: q on q, q+1
    util = {0: 1.0, 1: 0.2, 2: 0.6, 3: 0.6}
    counts = {j: np.where((table == j).any(axis=1), 100 - np.arange(8), 0) for j in util}
    free = plan_moves(util, counts, table, PolicyConfig(hysteresis=False))
    assert [(m.q, m.donor, m.receiver) for m in free][:1] == [(3, 0, 1)]
    # site 1 shares an executor with site 3: partition 3's other copy (and 7's) is there
    doms = {0: Domain("h", "a"), 1: Domain("h", "b"), 2: Domain("h", "c"), 3: Domain("h", "b")}
    moves = plan_moves(util, counts, table, PolicyConfig(hysteresis=False), domains=doms)
    for m in moves:
        others = [int(s) for c, s in enumerate(table[m.q]) if c != m.r]
        assert clash(m.receiver, others, doms) <= clash(m.donor, others, doms), m
    assert moves and (3, 0, 1) not in [(m.q, m.donor, m.receiver) for m in moves]


# -- on the wire and on the machine --------------------------------------------------------------
def roundtrip(msg: object) -> object:
    body = b"".join(bytes(p) for p in encode(msg))[FRAME_HEADER.size:]
    return decode(MSG, body, {})


def test_domains_and_the_ring_travel_typed() -> None:
    reg = cm.Register(site=1, attempt=0, host="10.0.0.5", port=7, pid=9, token="t",
                      executor="w1:4242", machine="w1")
    assert roundtrip(reg) == reg
    view = cm.View(number=1, members={0: cm.Member(host="h", port=1, attempt=0, registered=0)},
                   ring=(0, 2, 1, 3))
    assert roundtrip(view) == view


def fake_proc(root: Path, procs: dict[int, tuple[str, int]]) -> Path:
    for pid, (comm, ppid) in procs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        (root / str(pid) / "stat").write_text(f"{pid} ({comm} (x)) S {ppid} 1 1 0\n")
    return root


def test_the_executor_is_the_nearest_java_ancestor(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {1: ("init", 0), 50: ("java", 1), 60: ("python3", 50),
                                70: ("python3", 60), 80: ("python3", 1)})
    assert failure_domain.java_ancestor(70, proc) == 50  # worker -> pyspark daemon -> JVM
    assert failure_domain.java_ancestor(80, proc) is None  # no JVM above: unknown
    assert failure_domain.java_ancestor(99, proc) is None  # no such process
    assert failure_domain.parent_of(70, proc) == 60


def test_this_process_reports_a_domain() -> None:
    d = failure_domain.of_this_process()
    assert d.host and (d.executor == "" or d.executor.startswith(f"{d.host}:"))


@pytest.mark.parametrize(("sites", "k"), [(4, 2), (5, 2), (6, 3), (7, 3), (8, 2)])
def test_a_chained_tables_conflicts_are_its_rings(sites: int, k: int) -> None:
    """``table_conflicts`` counts the pairs of sites that share a partition; over chained
    declustering's table (a ring of at least 2K sites) that is ``ring_conflicts``."""
    rng = np.random.default_rng(sites * 10 + k)
    for _ in range(20):
        domains = [Domain(f"h{rng.integers(2)}", f"e{rng.integers(3)}") for _ in range(sites)]
        ring = [int(x) for x in rng.permutation(sites)]
        layout = Layout(sites, sites * 3, k)
        layout.set_ring(ring)
        assert table_conflicts(layout.table()[:, :k], domains) == ring_conflicts(
            ring, domains, k)
