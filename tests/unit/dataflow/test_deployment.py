"""Latency-aware replica deployment (``dataflow/deployment.py``, ``--placement latency``):
the table it builds over the wide-area model the examples ship, against chained
declustering's, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sparkflux.dataflow.deployment import deploy, latency_bound, network_cost, round_trips
from sparkflux.dataflow.placement import NOWHERE, Domain, Layout
from sparkflux.model.errors import PlanError

ROOT = Path(__file__).resolve().parents[3]
THREE_REGIONS = json.loads((ROOT / "examples/wan/three_regions.json").read_text())["latency_ms"]
PARTS = 32


def chained(k: int) -> np.ndarray:
    return Layout(4, PARTS, k).table()[:, :k].copy()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_copies_load_every_site_as_chained_declustering_does(k: int) -> None:
    t = deploy(THREE_REGIONS, PARTS, k, exchanges=1)
    assert t.shape == (PARTS, k)
    assert all(len(set(row)) == k for row in t.tolist())  # never two copies on one site
    assert np.bincount(t.ravel(), minlength=4).tolist() == \
        np.bincount(chained(k).ravel(), minlength=4).tolist()


def test_no_site_takes_more_than_chained_declusterings_most() -> None:
    # partitions that do not divide over the sites, random matrices: the greedy phases may
    # run into a partition whose only sites with room hold it already; copies are then
    # moved until every site is within ceil(P K / N)
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(3, 7))
        parts, k = int(rng.integers(n, 40)), int(rng.integers(2, n + 1))
        m = rng.integers(1, 100, (n + 1, n + 1)).astype(float)
        np.fill_diagonal(m, 0)
        t = deploy(m.tolist(), parts, k, exchanges=1)
        assert all(len(set(row)) == k for row in t.tolist())
        assert np.bincount(t.ravel(), minlength=n).max() <= -(-parts * k // n), (n, parts, k)
    assert np.bincount(deploy(THREE_REGIONS, 9, 3, 1).ravel()).tolist() == [7, 7, 7, 6]


def test_two_copies_give_every_partition_a_copy_near_the_driver() -> None:
    # the driver with sites 0 and 1 (1 ms), site 2 at 30 ms, site 3 at 60 ms: chained
    # declustering puts a quarter of the partitions on sites 2 and 3 only
    t = deploy(THREE_REGIONS, PARTS, 2, exchanges=1)
    assert latency_bound(chained(2), THREE_REGIONS) == 60.0
    assert latency_bound(t, THREE_REGIONS) == 2.0
    # the other copy far from the first (the paper's d_min): one region down, one up
    assert all({int(a), int(b)} & {0, 1} and {int(a), int(b)} & {2, 3} for a, b in t)
    # same loads, so the paper's network cost is the same: the pairing is what changed
    assert network_cost(t, THREE_REGIONS, 1) == pytest.approx(
        network_cost(chained(2), THREE_REGIONS, 1))


def test_the_nearest_copy_comes_first() -> None:
    # column 0 is the copy Flux-HA's egress reads
    rt = round_trips(THREE_REGIONS)
    for k in (2, 3):
        t = deploy(THREE_REGIONS, PARTS, k, exchanges=2)
        assert (np.diff(rt[t], axis=1) >= 0).all()


def test_failure_domains_come_before_latency() -> None:
    # sites 0 and 2 share an executor: no partition keeps both copies there, though site 0
    # and site 2 would pair by latency alone (one near, one far)
    domains = {0: Domain("h", "e1"), 1: Domain("h", "e2"), 2: Domain("h", "e1"),
               3: Domain("h", "e3")}
    t = deploy(THREE_REGIONS, PARTS, 2, exchanges=1, domains=domains)
    assert not any({int(a), int(b)} == {0, 2} for a, b in t)
    assert latency_bound(t, THREE_REGIONS) == 2.0


def test_deterministic() -> None:
    assert (deploy(THREE_REGIONS, PARTS, 3, 1) == deploy(THREE_REGIONS, PARTS, 3, 1)).all()


def test_a_layout_loads_the_table_with_its_spare_column_free() -> None:
    t = deploy(THREE_REGIONS, PARTS, 2, exchanges=1)
    lay = Layout(4, PARTS, 2)
    lay.place(t)
    assert lay.deployed and lay.copy().deployed
    assert (lay.table()[:, :2] == t).all() and (lay.table()[:, 2] == NOWHERE).all()
    whole = Layout(4, PARTS, 2)
    whole.place(lay.table().copy())  # the view carries the whole table
    assert (whole.table() == lay.table()).all()


def test_what_it_refuses() -> None:
    with pytest.raises(PlanError, match="for 2 sites is 3 x 3 .*not 3 x 4"):
        deploy(np.zeros((3, 4)).tolist(), PARTS, 2, 1)
    with pytest.raises(PlanError, match="does not cover"):
        network_cost(chained(2), [[0, 1, 1], [1, 0, 1], [1, 1, 0]], 1)
    with pytest.raises(PlanError, match="does not cover"):
        latency_bound(chained(2), [[0, 1], [1, 0]])
    with pytest.raises(PlanError, match="3 copies of a partition need 3 sites"):
        deploy([[0, 1, 1], [1, 0, 1], [1, 1, 0]], PARTS, 3, 1)
    lay = Layout(4, PARTS, 2)
    with pytest.raises(PlanError, match="its own"):
        lay.place(np.zeros((PARTS, 2), dtype=np.int32))
    with pytest.raises(PlanError, match="32 x 2"):
        lay.place(np.zeros((PARTS, 1), dtype=np.int32))
