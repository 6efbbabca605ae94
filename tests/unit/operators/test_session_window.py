"""SessionWindowAggregate against a model, with watermarks, batch splits and state moves."""

from __future__ import annotations

import doctest
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.session_window as session_window_mod
from sparkflux.model.batch import rank_within_runs
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import ENDED, NO_WATERMARK, Frontier, Progress
from sparkflux.operators.base import Operator
from sparkflux.operators.session_window import SessionWindowAggregate
from tests.support.op_helpers import (
    assert_sn_increasing_per_partition,
    bounds_as_int64,
    everywhere,
    make_batch,
    per_partition,
    run,
    run_with_move,
    split,
    untimed,
    user_rows,
    with_timestamps,
)

AGGS = {"hi": "max", "lo": "min", "total": "sum", "n": "count", "mean": "avg"}


def factory(gap: int, aggs: dict[str, str] = AGGS) -> Callable[[], Operator]:
    return lambda: SessionWindowAggregate(by=["u"], time="t", gap=gap, value="v", aggs=aggs)


class Stream:
    """Users active in bursts, times in bounded disorder, and honest progress markers."""

    def __init__(self, seed: int, n: int = 500, string_key: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.sn = np.cumsum(rng.choice([0, 1, 1, 1], n)) + 5
        snm = rank_within_runs(self.sn) * 3
        self.t = np.arange(n) * 2 + rng.integers(0, 25, n) - 20
        u = rng.integers(0, 6, n)
        u[(np.arange(n) // 40) % 3 == 0] = 0  # user 0 is busy in some stretches only
        self.batch = make_batch({"u": [f"u{x}" for x in u] if string_key else u, "t": self.t,
                                 "v": rng.integers(-100, 100, n)},
                                part=rng.integers(0, 3, n), sn=self.sn, snm=snm,
                                types={"v": pa.int16()})
        future = np.minimum.accumulate(np.r_[self.t, ENDED.wm][::-1])[::-1]
        after = zip(self.sn.tolist(), snm.tolist(), future[1:].tolist(),
                    np.r_[self.sn[1:], ENDED.sn].tolist(), strict=True)
        self.after = {(s, m): Progress(nxt - 1, wm) for s, m, wm, nxt in after}

    def progress(self, batch: pa.RecordBatch) -> Progress | None:
        if batch.num_rows == 0:
            return None
        return self.after[(batch.column("_sn")[-1].as_py(), batch.column("_snm")[-1].as_py())]


def model(batch: pa.RecordBatch, gap: int) -> list[tuple]:
    """Every (partition, user)'s sessions, per partition in SN order of their latest row."""
    users: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        users.setdefault((r["_part"], r["u"]), []).append(r)
    out = []
    for (part, u), rs in users.items():
        rs = sorted(rs, key=lambda r: r["t"])
        sessions = [[rs[0]]]
        for r in rs[1:]:
            if r["t"] < max(x["t"] for x in sessions[-1]) + gap:
                sessions[-1].append(r)
            else:
                sessions.append([r])
        for s in sessions:
            vs = [r["v"] for r in s]
            last = max(s, key=lambda r: (r["_sn"], r["_snm"]))
            out.append((part, u, s[0]["t"], max(r["t"] for r in s) + gap, max(vs), min(vs),
                        sum(vs), len(vs), sum(vs) / len(vs), last["_sn"], last["_snm"]))
    return [r[1:] for r in sorted(out, key=lambda r: (r[0], r[-2], r[-1]))]


@pytest.mark.parametrize("gap", [1, 5, 15, 40])
def test_matches_model_with_watermarks(gap: int) -> None:
    s = Stream(gap)
    out = run(factory(gap), split(s.batch, np.random.default_rng(gap), 12), s.progress,
              finish=True)
    expected = model(s.batch, gap)
    assert user_rows(per_partition(out)) == expected
    assert 10 < len(expected) < s.batch.num_rows
    assert_sn_increasing_per_partition(out)
    assert out.schema.names[:3] == ["u", "session_start", "session_end"]
    assert out.schema.field("hi").type == pa.int64()


def test_a_row_between_two_sessions_merges_them() -> None:
    batch = make_batch({"u": [1, 1, 1], "t": [0, 16, 8], "v": [1, 2, 3]})
    op = factory(10)()
    op.bind(batch.schema)
    op.process(batch.slice(0, 2))
    assert [i.nbytes > 0 for i in op.partition_info()] == [True]
    op.process(batch.slice(2))
    out, claim = op.advance(everywhere(ENDED))
    rows = out.to_pydict()
    assert (rows["session_start"], rows["session_end"], rows["n"], rows["_sn"]) == (
        [0], [26], [3], [2])


def test_progress_claims_are_never_undercut() -> None:
    s = Stream(3)
    op = factory(15)()
    op.bind(s.batch.schema)
    emitted: list[tuple[pa.RecordBatch, Frontier]] = []
    for b in split(s.batch, np.random.default_rng(3), 30):
        assert op.process(b).num_rows == 0
        p = s.progress(b)
        if p is not None:
            out, claim = op.advance(everywhere(p))
            assert (claim.wm <= p.wm).all() and (claim.sn <= p.sn).all()
            emitted.append((out, claim))
    emitted.append(op.advance(everywhere(ENDED)))
    assert (emitted[-1][1].sn == ENDED.sn).all()
    assert sum(o.num_rows for o, _ in emitted[:-1]) > 0
    for i, (rows, claim) in enumerate(emitted):
        part = rows.column("_part").to_numpy()
        assert (rows.column("_sn").to_numpy() <= claim.sn[part]).all()
        for later, _ in emitted[i + 1:]:
            lp = later.column("_part").to_numpy()
            assert (later.column("_sn").to_numpy() > claim.sn[lp]).all()
            assert (later.column("session_start").to_numpy() >= claim.wm[lp]).all()


def test_a_partition_closes_on_its_own_watermark() -> None:
    batch = make_batch({"u": [1, 1], "t": [3, 5], "v": [1, 2]}, part=[1, 1])
    op = factory(4)()
    op.bind(batch.schema)
    op.process(batch)
    out, claim = op.advance(Frontier(np.array([-1, 1]), np.array([NO_WATERMARK, 9])))
    assert out.to_pydict()["total"] == [3] and out.to_pydict()["_part"] == [1]
    assert claim.sn.tolist() == [-1, 1] and claim.wm.tolist() == [NO_WATERMARK, 9]


@pytest.mark.parametrize("string_key", [False, True])
def test_batch_boundaries_do_not_matter(string_key: bool) -> None:
    s = Stream(2, string_key=string_key)
    whole = per_partition(run(factory(12), [s.batch], s.progress, finish=True))
    rng = np.random.default_rng(2)
    for pieces in (3, 17, 120):
        cut = run(factory(12), split(s.batch, rng, pieces), s.progress, finish=True)
        assert untimed(per_partition(cut)).equals(untimed(whole))


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    s = Stream(8, string_key=string_key)
    batches = split(s.batch, np.random.default_rng(8), 10)
    whole = per_partition(run(factory(20), batches, s.progress, finish=True))
    for cut in (2, 5, 9):
        for wire in (False, True):
            moved = run_with_move(factory(20), batches, cut, s.progress, finish=True,
                                  wire=wire)
            assert per_partition(moved).equals(whole)


def test_partition_info_counts_keys() -> None:
    batch = make_batch({"u": [1, 2, 1, 1], "t": [1, 2, 3, 50], "v": [1, 1, 1, 1]},
                       part=[0, 0, 1, 0])
    op = factory(10)()
    op.bind(batch.schema)
    op.process(batch)
    assert {(i.part, i.keys) for i in op.partition_info()} == {(0, 2), (1, 1)}


def test_plan_errors_say_what_to_change() -> None:
    schema = Stream(0, n=4).batch.schema
    for kwargs, match in (({"by": ["nope"]}, "'nope'"), ({"time": "when"}, "'when'"),
                          ({"value": "x"}, "'x'"), ({"aggs": {"u": "max"}}, "twice"),
                          ({"names": ("u", "end")}, "twice")):
        args = {"by": ["u"], "time": "t", "gap": 5, "value": "v", **kwargs}
        with pytest.raises(PlanError, match=match):
            SessionWindowAggregate(**args).bind(schema)
    for kwargs, match in (({"gap": 0}, "gap must"), ({"aggs": {"m": "median"}}, "median"),
                          ({"names": ("a",)}, "two column names")):
        args = {"by": ["u"], "time": "t", "gap": 5, "value": "v", **kwargs}
        with pytest.raises(PlanError, match=match):
            SessionWindowAggregate(**args)


def test_doctests() -> None:
    assert doctest.testmod(session_window_mod).failed == 0


def test_timestamp_time_gives_timestamp_bounds() -> None:
    """With a timestamp ``time`` the session bounds come out as that timestamp type, with
    the numbers an integer ``time`` gives."""
    type_ = pa.timestamp("ms", tz="UTC")
    s = Stream(6)
    stamped = with_timestamps(s.batch, "t", type_)
    ints, stamps = (run(factory(7), split(b, np.random.default_rng(6), 8), s.progress,
                        finish=True) for b in (s.batch, stamped))
    assert [stamps.schema.field(c).type for c in ("session_start", "session_end")] == [type_] * 2
    assert ints.num_rows > 20
    assert bounds_as_int64(stamps, ["session_start", "session_end"]).equals(ints)


def test_a_session_is_timed_from_its_close() -> None:
    """``_t0`` of a closed session's row: the newest input's admission when the watermark
    closed it, not its latest row's."""
    op = factory(5)()
    first = make_batch({"u": [1, 1], "t": [3, 4], "v": [1, 2]}, part=[0, 0])
    op.bind(first.schema)
    op.process(first)
    later = make_batch({"u": [2], "t": [40], "v": [5]}, part=[0], sn=[7])
    later = later.set_column(later.schema.get_field_index("_t0"), "_t0", pa.array([42.0]))
    op.process(later)
    out, _ = op.advance(Frontier(np.array([7]), np.array([20])))
    rows = out.to_pydict()
    assert rows["n"] == [2] and rows["_t0"] == [42.0]
