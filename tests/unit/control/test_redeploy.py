"""Re-deploying copies by measured latencies (``control/redeploy.py``): the measured matrix,
the moves that turn one table into another, the gain a re-deployment needs, and the
balancing rounds that carry it out (sans-I/O, exact actions).

Four sites, 8 partitions, two copies, two stages. At first the driver and sites 0 and 1
are near (1 ms one way), sites 2 and 3 far (60 ms). The deployment pairs sites 0 and 2, and
1 and 3. ``FLIPPED``: the driver near sites 0 and 2, so that the partitions on 1 and 3 have
no copy near it.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import Collect, Move, Registered, SiteAddress, SiteReady, Stats, Tick
from sparkflux.control.policy import PolicyConfig
from sparkflux.control.redeploy import GAIN, MIN_GAIN_MS, align, measured, plan
from sparkflux.dataflow.deployment import deploy, latency_bound
from sparkflux.dataflow.placement import NOWHERE, Layout

P, SITES = 8, 4


def matrix(near: set[int], near_ms: float = 1.0, far_ms: float = 60.0) -> np.ndarray:
    """One-way ms between the driver (index 0) and the sites (i + 1): nodes in ``near``
    (matrix indices, the driver's 0 always) are ``near_ms`` from each other, the rest
    ``far_ms`` from everything."""
    near = near | {0}
    return np.array([[0.0 if a == b else near_ms if a in near and b in near else far_ms
                      for b in range(SITES + 1)] for a in range(SITES + 1)])


START = matrix({1, 2})  # sites 0, 1 near the driver
FLIPPED = matrix({1, 3})  # sites 0, 2 near the driver


def reports(m: np.ndarray) -> dict[int, tuple[float, ...]]:
    """What every site measures of ``m``: its row, -1 for itself."""
    return {j: tuple(-1.0 if b == j + 1 else float(m[j + 1, b]) for b in range(SITES + 1))
            for j in range(SITES)}


def test_the_measured_matrix_is_the_mean_of_both_ends_over_the_placement_s() -> None:
    base = START.copy()
    got = measured({0: (5.0, -1.0, 7.0, -1.0, -1.0), 1: (-1.0, 9.0, -1.0, -1.0, -1.0)}, base)
    assert got[0, 1] == got[1, 0] == 5.0  # the driver's link to site 0: site 0 alone
    assert got[1, 2] == got[2, 1] == 8.0  # sites 0 and 1: the mean of 7 and 9
    assert got[0, 3] == base[0, 3] and got[3, 4] == base[3, 4]  # unmeasured: the base's
    assert (base == START).all()  # not changed in place


def test_align_keeps_the_copies_the_new_table_keeps() -> None:
    table = np.array([[0, 2, NOWHERE], [1, NOWHERE, 3]])
    new = np.array([[2, 1], [3, 2]])
    rt = np.array([120.0, 2.0, 2.0, 120.0])
    # partition 0: the copy on site 2 stays, the one on 0 goes to 1; partition 1: the copy
    # on 3 stays (column 2), the one on 1 (column 0) goes to 2
    assert align(table, new, rt) == [(0, 0, 1), (1, 0, 2)]


def test_align_moves_the_farthest_copy_to_the_nearest_site_first() -> None:
    table = np.array([[0, 3, NOWHERE]])
    new = np.array([[1, 2]])
    rt = np.array([120.0, 2.0, 4.0, 180.0])
    assert align(table, new, rt) == [(0, 1, 1), (0, 0, 2)]


def test_a_change_that_placement_cannot_help_moves_nothing() -> None:
    table = np.column_stack([deploy(START, P, 2, 1), np.full(P, NOWHERE)])
    assert plan(table, START, 2, 1) is None  # the same latencies: already the deployment
    slower = START * 1.5  # every link slower alike: no table is better
    assert plan(table, slower, 2, 1) is None


def test_a_flipped_region_is_redeployed_and_the_bound_falls() -> None:
    table = np.column_stack([deploy(START, P, 2, 1), np.full(P, NOWHERE)])
    re = plan(table, FLIPPED, 2, 1)
    assert re is not None
    assert re.bound_ms == latency_bound(table[:, :2], FLIPPED) == 120.0
    assert re.new_bound_ms == 2.0
    new = np.array(re.table)
    assert (new == deploy(FLIPPED, P, 2, 1)).all()
    for q, r, dst in re.moves:  # each move takes a copy the new table drops to a site it adds
        assert table[q, r] not in new[q] and dst in new[q] and dst not in table[q]


@pytest.mark.parametrize("gain_ms", [MIN_GAIN_MS - 1, MIN_GAIN_MS + 1])
def test_the_gain_must_reach_both_limits(gain_ms: float) -> None:
    """A small absolute gain is no reason to move, however large a fraction it is."""
    near = (gain_ms + 0.5) / 2  # the far table's round trip minus the near one's: gain_ms
    m = matrix({1, 3}, near_ms=0.25, far_ms=near)
    table = np.column_stack([deploy(START, P, 2, 1), np.full(P, NOWHERE)])
    bound = latency_bound(table[:, :2], m)
    re = plan(table, m, 2, 1)
    assert bound - 0.5 == pytest.approx(gain_ms)
    assert gain_ms >= GAIN * bound
    assert (re is not None) == (gain_ms >= MIN_GAIN_MS)


# -- the balancing rounds --------------------------------------------------------------------
def started(race: bool = True) -> Controller:
    policy = PolicyConfig(delta_start=1.0, delta_min=0.25, window_s=4.0)
    c = Controller(SITES, ha=True, layout=Layout(SITES, P, 2, race=race), stages=2,
                   options=ControlOptions(balance=True, policy=policy, placement="latency",
                                          heartbeat_timeout=1e9,
                                          latencies=tuple(map(tuple, START.tolist()))))
    for s in range(SITES):
        c.handle(Registered(address=SiteAddress(site=s, attempt=0, host="h", port=s, pid=s),
                            now=0.0))
    for s in range(SITES):
        c.handle(SiteReady(site=s, attempt=0))
    return c


def round_with(c: Controller, now: float, m: np.ndarray) -> list:
    """One balancing round from ``now``, every site measuring ``m`` and equally loaded; the
    actions at its end."""
    acts = c.handle(Tick(now=now))
    assert [type(a) for a in acts] == [Collect]
    rnd = acts[0].round

    def sample(rnd: int, at: float) -> list:
        out = []
        for j in range(SITES):
            out += c.handle(Stats(site=j, attempt=0, round=rnd, busy_s=0.3 * at,
                                  capacity_s=at, counts=(int(100 * at),) * P, now=at,
                                  link_ms=reports(m)[j]))
        return out

    assert sample(rnd, now) == []
    end = now + c.delta
    assert [type(a) for a in c.handle(Tick(now=end))] == [Collect]
    return sample(rnd + 1, end)


def test_rounds_that_measure_the_flip_for_the_settle_time_redeploy() -> None:
    c = started()
    assert c.layout is not None
    before = c.layout.table().copy()
    assert round_with(c, 1.0, START) == []  # placed by these: nothing to gain
    assert round_with(c, 3.0, FLIPPED) == []  # rule 4: planned from the end of this round
    assert round_with(c, 5.0, FLIPPED) == []  # ... for less than SETTLE_S so far
    acts = round_with(c, 7.0, FLIPPED)
    moves = [a for a in acts if isinstance(a, Move)]
    want = align(before, deploy(FLIPPED, P, 2, 1), FLIPPED[0, 1:] + FLIPPED[1:, 0])
    # the group starts one move per partition (make before break: into the free column)
    firsts = {q: (r, dst) for q, r, dst in reversed(want)}
    assert [(m.q, m.dst) for m in moves] == [(q, dst) for q, (_, dst) in sorted(firsts.items())]
    assert all(m.src == NOWHERE for m in moves)
    assert c.rounds[-1]["policy"] == "latency"
    assert c.rounds[-1]["why"] == "measured latencies: bound 120 -> 2"
    assert c.placement["redeploys"] == [{"at": c.rounds[-1]["at"], "round": 8,
                                         "bound_ms": 120.0, "new_bound_ms": 2.0,
                                         "moves": len(want)}]
    assert [m[3] for m in c.pending_moves] == ["latency"] * (len(want) - len(moves))


def test_a_round_that_finds_nothing_worth_it_starts_the_settle_time_afresh() -> None:
    """The rounds' plans may differ (many tables are about as good under noisy measures);
    what must last is that each finds one worth its moves."""
    c = started()
    assert round_with(c, 1.0, FLIPPED) == []
    assert round_with(c, 3.0, matrix({1, 3}, far_ms=70.0)) == []  # other measures, worth it
    assert round_with(c, 5.0, START) == []  # nothing to gain: the settle time starts afresh
    assert round_with(c, 7.0, FLIPPED) == []
    assert round_with(c, 9.0, FLIPPED) == []  # worth it since 7 s only
    assert "redeploys" not in c.placement
    assert any(isinstance(a, Move) for a in round_with(c, 11.0, FLIPPED))  # settled at last
    assert len(c.placement["redeploys"]) == 1


def test_flux_ha_is_not_redeployed() -> None:
    """Flux-HA's egress reads column 0's copy; a move builds in the free column, so the far
    copy would stay the one read: nothing is moved for latency."""
    c = started(race=False)
    for now in (1.0, 3.0, 5.0, 7.0, 9.0):
        assert round_with(c, now, FLIPPED) == []
    assert "redeploys" not in c.placement
