"""WindowTopK and KeyedTopK against models, with watermarks, batch splits and state moves."""

from __future__ import annotations

import doctest
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.topk as topk_mod
from sparkflux.model.batch import child_minor, rank_within_runs
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import ENDED, NO_WATERMARK, Frontier, Progress
from sparkflux.model.schema import MINOR_FANOUT
from sparkflux.operators.base import Operator
from sparkflux.operators.topk import KeyedTopK, WindowTopK
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

ORDER = [("price", "desc"), ("name", "asc")]
PRICE = [("price", "desc")]  # more ties: the stream's prices take six values


def honest(sn: np.ndarray, snm: np.ndarray, t: np.ndarray) -> dict[tuple[int, int], Progress]:
    """After the row (sn, snm): every lower SN is done, and no later row has a time below
    the minimum of the times still to come."""
    future = np.minimum.accumulate(np.r_[t, ENDED.wm][::-1])[::-1]
    after = zip(sn.tolist(), snm.tolist(), future[1:].tolist(),
                np.r_[sn[1:], ENDED.sn].tolist(), strict=True)
    return {(s, m): Progress(nxt - 1, wm) for s, m, wm, nxt in after}


class Stream:
    """Rows with prices and names full of ties, bounded disorder in time, SN majors shared
    by some rows, and their honest progress markers."""

    def __init__(self, seed: int, n: int = 400, string_key: bool = False,
                 auctions: bool = False) -> None:
        rng = np.random.default_rng(seed)
        self.sn = np.cumsum(rng.choice([0, 1, 1, 1], n)) + 5
        snm = rank_within_runs(self.sn) * 3
        self.t = np.arange(n) * 2 + rng.integers(0, 9, n) - 20
        g = rng.integers(0, 4, n)
        columns = {"g": [f"g{x}" for x in g] if string_key else g, "t": self.t,
                   "price": rng.integers(0, 6, n),
                   "name": [f"n{x}" for x in rng.integers(0, 3, n)]}
        if auctions:
            # The key's deadline is the same for all its rows and beyond their times.
            opened = np.arange(n) * 2 - rng.integers(0, 40, n)
            key = opened // 30
            columns["g"] = [f"g{x}" for x in key] if string_key else key
            columns["until"] = key * 30 + 60 + (key % 7) * 13
        self.batch = make_batch(columns, part=rng.integers(0, 3, n), sn=self.sn, snm=snm,
                                types={"price": pa.int16()})
        self.after = honest(self.sn, snm, self.t)

    def progress(self, batch: pa.RecordBatch) -> Progress | None:
        if batch.num_rows == 0:
            return None
        return self.after[(batch.column("_sn")[-1].as_py(), batch.column("_snm")[-1].as_py())]


def best(rows: list[dict], k: int, ties: bool = False,
         order: list[tuple[str, str]] = ORDER) -> list[tuple[int, dict]]:
    """The first k rows by price desc (and name asc, if ``order`` has it), then SN, with
    their 1-based ranks; with ``ties`` also every row equal to the k-th by ``order`` (SQL's
    RANK() <= k: a row's rank is 1 + the number of rows strictly better)."""
    def key(r: dict) -> tuple:
        return (-r["price"], r["name"]) if order == ORDER else (-r["price"],)

    ranked = sorted(rows, key=lambda r: (*key(r), r["_sn"], r["_snm"]))
    if not ties:
        return [(i + 1, r) for i, r in enumerate(ranked[:k])]
    out = []
    for r in ranked:
        rank = 1 + sum(key(o) < key(r) for o in rows)
        if rank <= k:
            out.append((rank, r))
    return out


def window_model(batch: pa.RecordBatch, size: int, slide: int, k: int, ties: bool = False,
                 by: tuple[str, ...] = ("g",), order: list[tuple[str, str]] = ORDER
                 ) -> list[tuple]:
    """Every (partition, group, window)'s top rows, per partition in output SN order."""
    windows: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        start = r["t"] // slide * slide
        while start > r["t"] - size:
            windows.setdefault((r["_part"], *(r[c] for c in by), start), []).append(r)
            start -= slide
    stride = MINOR_FANOUT // (size // slide) if ties else k
    out = []
    for (part, *_, start), rs in windows.items():
        last = max(rs, key=lambda r: (r["_sn"], r["_snm"]))
        j = (start // slide) % (size // slide)
        for i, (rank, r) in enumerate(best(rs, k, ties, order)):
            minor = int(child_minor(np.array([last["_snm"]]), np.array([j * stride + i]))[0])
            out.append((part, r["g"], r["t"], r["price"], r["name"], start, start + size,
                        rank, last["_sn"], minor))
    return [r[1:] for r in sorted(out, key=lambda r: (r[0], r[-2], r[-1]))]


def keyed_model(batch: pa.RecordBatch, k: int, ties: bool = False,
                order: list[tuple[str, str]] = ORDER) -> list[tuple]:
    keys: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        keys.setdefault((r["_part"], r["g"]), []).append(r)
    out = []
    for (part, _), rs in keys.items():
        last = max(rs, key=lambda r: (r["_sn"], r["_snm"]))
        for i, (rank, r) in enumerate(best(rs, k, ties, order)):
            minor = int(child_minor(np.array([last["_snm"]]), np.array([i]))[0])
            out.append((part, r["g"], r["t"], r["price"], r["name"], r["until"], rank,
                        last["_sn"], minor))
    return [r[1:] for r in sorted(out, key=lambda r: (r[0], r[-2], r[-1]))]


def windows(size: int, slide: int | None = None, k: int = 2, ties: bool = False,
            by: tuple[str, ...] = ("g",)) -> Callable[[], Operator]:
    """WindowTopK by price and name, or with ``ties`` by price alone (ties are common)."""
    return lambda: WindowTopK(by=list(by), time="t", size=size, order=PRICE if ties else ORDER,
                              k=k, slide=slide, ties=ties)


def keyed(k: int = 2, ties: bool = False) -> Callable[[], Operator]:
    return lambda: KeyedTopK(by=["g"], order=PRICE if ties else ORDER, until="until", k=k,
                             ties=ties)


@pytest.mark.parametrize("by", [("g",), ()], ids=["key", "no_key"])
@pytest.mark.parametrize("ties", [False, True], ids=["exactly_k", "ties"])
@pytest.mark.parametrize(("size", "slide", "k"),
                         [(10, None, 1), (10, 5, 2), (12, 4, 3), (7, 1, 2)])
def test_window_top_k_matches_model(size: int, slide: int | None, k: int, ties: bool,
                                    by: tuple[str, ...]) -> None:
    s = Stream(size + k)
    batches = split(s.batch, np.random.default_rng(size), 12)
    out = run(windows(size, slide, k, ties, by), batches, s.progress, finish=True)
    order = PRICE if ties else ORDER
    expected = window_model(s.batch, size, slide or size, k, ties, by, order)
    assert user_rows(per_partition(out)) == expected
    if ties and not by:  # prices tie often: more than k rows come out of some windows
        assert len(expected) > len(window_model(s.batch, size, slide or size, k, False, by,
                                                order))
    assert_sn_increasing_per_partition(out)
    assert out.schema.names[:7] == ["g", "t", "price", "name", "window_start", "window_end",
                                    "rank"]
    assert out.schema.field("price").type == pa.int16()


@pytest.mark.parametrize("ties", [False, True], ids=["exactly_k", "ties"])
@pytest.mark.parametrize("k", [1, 3])
def test_keyed_top_k_matches_model(k: int, ties: bool) -> None:
    s = Stream(k, auctions=True)
    batches = split(s.batch, np.random.default_rng(k), 15)
    out = run(keyed(k, ties), batches, s.progress, finish=True)
    order = PRICE if ties else ORDER
    expected = keyed_model(s.batch, k, ties, order)
    assert user_rows(per_partition(out)) == expected
    if ties:
        assert len(expected) > len(keyed_model(s.batch, k, False, order))
    assert_sn_increasing_per_partition(out)
    assert out.schema.names[-5:] == ["rank", "_sn", "_snm", "_t0", "_part"]


def test_keys_come_out_before_the_end_and_are_forgotten() -> None:
    s = Stream(5, auctions=True)
    op = keyed()()
    op.bind(s.batch.schema)
    emitted = 0
    for b in split(s.batch, np.random.default_rng(5), 20)[:-1]:
        op.process(b)
        p = s.progress(b)
        if p is not None:
            emitted += op.advance(everywhere(p))[0].num_rows
    assert emitted > 0
    keys = sum(i.keys for i in op.partition_info())
    assert 0 < keys < len(set(s.batch.column("g").to_pylist())) // 2


@pytest.mark.parametrize("make", [windows(12, 4), windows(12, 4, ties=True, by=()), keyed(),
                                  keyed(ties=True)],
                         ids=["window", "window_ties_no_key", "keyed", "keyed_ties"])
def test_progress_claims_are_never_undercut(make: Callable[[], Operator]) -> None:
    """Per partition: no later output has an SN at or below a claimed SN, nor an event time
    (window start, or until) below a claimed watermark."""
    keyed_op = isinstance(make(), KeyedTopK)
    s = Stream(3, auctions=keyed_op)
    when = "until" if keyed_op else "window_start"
    op = make()
    op.bind(s.batch.schema)
    emitted: list[tuple[pa.RecordBatch, Frontier]] = []
    for b in split(s.batch, np.random.default_rng(3), 25):
        assert op.process(b).num_rows == 0
        p = s.progress(b)
        if p is not None:
            out, claim = op.advance(everywhere(p))
            assert (claim.wm <= p.wm).all() and (claim.sn <= p.sn).all()
            emitted.append((out, claim))
    emitted.append(op.advance(everywhere(ENDED)))
    assert (emitted[-1][1].sn == ENDED.sn).all() and (emitted[-1][1].wm == ENDED.wm).all()
    assert sum(o.num_rows for o, _ in emitted[:-1]) > 0
    for i, (rows, claim) in enumerate(emitted):
        part = rows.column("_part").to_numpy()
        assert (rows.column("_sn").to_numpy() <= claim.sn[part]).all()
        for later, _ in emitted[i + 1:]:
            lp = later.column("_part").to_numpy()
            assert (later.column("_sn").to_numpy() > claim.sn[lp]).all()
            assert (later.column(when).to_numpy() >= claim.wm[lp]).all()


def test_a_partition_closes_on_its_own_watermark() -> None:
    batch = make_batch({"g": [1, 1], "t": [3, 5], "price": [1, 2], "name": ["a", "b"]},
                       part=[1, 1])
    op = windows(10, k=1)()
    op.bind(batch.schema)
    op.process(batch)
    out, claim = op.advance(Frontier(np.array([-1, 1]), np.array([NO_WATERMARK, 10])))
    assert out.to_pydict()["price"] == [2] and out.to_pydict()["_part"] == [1]
    assert claim.sn.tolist() == [-1, 1] and claim.wm.tolist() == [NO_WATERMARK, 10]


def test_ranks_break_ties_by_later_keys_then_sn_and_put_nulls_last() -> None:
    batch = make_batch({"g": [1] * 6, "t": [0] * 6, "price": [2.0, None, 2.0, np.nan, 5.0, 2.0],
                        "name": ["b", "a", "a", "a", "z", "a"]})
    for direction, expected in (("desc", [5.0, 2.0, 2.0, 2.0]), ("asc", [2.0, 2.0, 2.0, 5.0])):
        op = WindowTopK(by=["g"], time="t", size=5, k=6,
                        order=[("price", direction), ("name", "asc")])
        out = run(lambda op=op: op, [batch], finish=True).to_pydict()
        assert out["price"][:4] == expected
        assert np.isnan(out["price"][4]) and out["price"][5] is None
        assert out["rank"] == [1, 2, 3, 4, 5, 6]
    tied = [r for r in zip(out["price"], out["name"], out["t"], strict=True) if r[0] == 2.0]
    assert [n for _, n, _ in tied] == ["a", "a", "b"]  # name decides, then the earlier SN


def test_a_late_row_of_an_emitted_key_opens_a_new_group() -> None:
    first = make_batch({"g": [1, 1], "t": [0, 1], "price": [3, 4], "name": ["a", "b"],
                        "until": [10, 10]})
    late = make_batch({"g": [1], "t": [12], "price": [1], "name": ["c"], "until": [10]},
                      sn=[2])
    op = keyed(k=1)()
    op.bind(first.schema)
    op.process(first)
    out, _ = op.advance(everywhere(Progress(1, 11)))
    assert out.to_pydict()["price"] == [4] and op.partition_info() == []
    op.process(late)
    out, _ = op.advance(everywhere(Progress(2, 13)))
    assert out.to_pydict()["price"] == [1] and out.to_pydict()["_sn"] == [2]


@pytest.mark.parametrize("make,auctions", [(windows(10, 5), False),
                                           (windows(10, 5, ties=True), False),
                                           (windows(10, 5, ties=True, by=()), False),
                                           (keyed(), True), (keyed(ties=True), True)],
                         ids=["window", "window_ties", "window_ties_no_key", "keyed",
                              "keyed_ties"])
@pytest.mark.parametrize("string_key", [False, True])
def test_batch_boundaries_do_not_matter(make: Callable[[], Operator], auctions: bool,
                                        string_key: bool) -> None:
    s = Stream(2, string_key=string_key, auctions=auctions)
    whole = per_partition(run(make, [s.batch], s.progress, finish=True))
    assert whole.num_rows > 20
    rng = np.random.default_rng(2)
    for pieces in (3, 17, 80):
        cut = run(make, split(s.batch, rng, pieces), s.progress, finish=True)
        assert untimed(per_partition(cut)).equals(untimed(whole))


@pytest.mark.parametrize("make,auctions", [(windows(12, 4), False),
                                           (windows(12, 4, ties=True), False),
                                           (windows(12, 4, ties=True, by=()), False),
                                           (keyed(), True), (keyed(ties=True), True)],
                         ids=["window", "window_ties", "window_ties_no_key", "keyed",
                              "keyed_ties"])
@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(make: Callable[[], Operator], auctions: bool,
                                         string_key: bool) -> None:
    s = Stream(8, string_key=string_key, auctions=auctions)
    batches = split(s.batch, np.random.default_rng(8), 10)
    whole = per_partition(run(make, batches, s.progress, finish=True))
    for cut in (2, 5, 9):
        for wire in (False, True):
            moved = run_with_move(make, batches, cut, s.progress, finish=True, wire=wire)
            assert per_partition(moved).equals(whole)


def test_partition_info_counts_keys() -> None:
    batch = make_batch({"g": [1, 2, 1], "t": [1, 2, 3], "price": [1, 1, 1],
                        "name": ["a", "b", "c"], "until": [9, 9, 9]}, part=[0, 0, 1])
    for make in (windows(10, 5), keyed()):
        op = make()
        op.bind(batch.schema)
        op.process(batch)
        info = op.partition_info()
        assert {(i.part, i.keys) for i in info} == {(0, 2), (1, 1)}
        assert all(i.nbytes > 0 for i in info)
        op.drop_partition(0)
        assert [i.part for i in op.partition_info()] == [1]


def test_plan_errors_say_what_to_change() -> None:
    schema = Stream(0, n=4, auctions=True).batch.schema
    cases: list[tuple[Callable[[], Operator], str]] = [
        (lambda: WindowTopK(by=["nope"], time="t", size=5, order=ORDER), "'nope'"),
        (lambda: WindowTopK(by=["g"], time="when", size=5, order=ORDER), "'when'"),
        (lambda: WindowTopK(by=["g"], time="t", size=5, order=[("cost", "desc")]), "'cost'"),
        (lambda: WindowTopK(by=["g"], time="name", size=5, order=ORDER), "integer or a time"),
        (lambda: WindowTopK(by=["g"], time="t", size=5, order=ORDER, rank="price"), "twice"),
        (lambda: KeyedTopK(by=["g"], order=ORDER, until="deadline"), "'deadline'"),
        (lambda: KeyedTopK(by=["g"], order=ORDER, until="name"), "integer or a time"),
    ]
    for make, match in cases:
        with pytest.raises(PlanError, match=match):
            make().bind(schema)
    for kwargs, match in (({"size": 10, "slide": 3}, "multiple"), ({"size": 0}, "size"),
                          ({"size": 5, "k": 0}, "k must"), ({"size": 5, "order": "price"},
                                                            "pairs"),
                          ({"size": 5, "order": [("price", "down")]}, "pairs"),
                          ({"size": 5, "order": [("price", "asc"), ("price", "desc")]},
                           "twice"),
                          ({"size": 1 << 12, "slide": 1, "k": 1 << 10}, "lower k")):
        args = {"by": ["g"], "time": "t", "order": ORDER, **kwargs}
        with pytest.raises(PlanError, match=match):
            WindowTopK(**args)


def test_unsortable_order_column_is_a_plan_error() -> None:
    batch = make_batch({"g": [1], "t": [0], "tags": [[1, 2]]})
    with pytest.raises(PlanError, match="cannot be sorted"):
        WindowTopK(by=["g"], time="t", size=5, order=[("tags", "asc")]).bind(batch.schema)


def test_doctests() -> None:
    assert doctest.testmod(topk_mod).failed == 0


def window_rows(out: pa.RecordBatch, *columns: str) -> list[tuple]:
    return list(zip(*(out.column(c).to_pylist() for c in columns), strict=True))


def test_ties_keep_every_row_tied_with_the_kth() -> None:
    """SQL's RANK() <= k: a row's rank is 1 + the rows strictly better; peers share it."""
    batch = make_batch({"g": [1] * 6, "t": [0, 1, 2, 3, 4, 5], "price": [5, 7, 7, 3, 7, 5]})
    cases = {(1, True): [(7, 1, 1), (7, 1, 2), (7, 1, 4)],
             (2, True): [(7, 1, 1), (7, 1, 2), (7, 1, 4)],
             (4, True): [(7, 1, 1), (7, 1, 2), (7, 1, 4), (5, 4, 0), (5, 4, 5)],
             (2, False): [(7, 1, 1), (7, 2, 2)]}
    for (k, ties), expected in cases.items():
        out = run(lambda k=k, ties=ties: WindowTopK(by=["g"], time="t", size=10, order=PRICE,
                                                    k=k, ties=ties), [batch], finish=True)
        assert window_rows(out, "price", "rank", "t") == expected, (k, ties)


def test_nulls_tie_with_nulls_and_nan_with_nan() -> None:
    batch = make_batch({"g": [1] * 5, "t": [0] * 5, "price": [None, np.nan, 2.0, None, np.nan]})
    for k, expected in ((1, [(2.0, 1)]), (2, [(2.0, 1), ("nan", 2), ("nan", 2)]),
                        (4, [(2.0, 1), ("nan", 2), ("nan", 2), (None, 4), (None, 4)])):
        out = run(lambda k=k: WindowTopK(by=["g"], time="t", size=10, order=PRICE, k=k,
                                         ties=True), [batch], finish=True)
        got = [("nan" if p is not None and np.isnan(p) else p, r)
               for p, r in window_rows(out, "price", "rank")]
        assert got == expected


def test_ties_keep_only_the_rows_that_can_still_be_in_the_top() -> None:
    """The state is bounded: a row ranked beyond k is dropped at once, however the input is
    cut; only k rows plus the k-th's peers stay."""
    prices = [*range(100), 98, 98, 98]  # ranks: 99 -> 1, the four 98s -> 2, 97 -> 6, ...
    batch = make_batch({"g": [1] * 103, "t": [0] * 103, "price": prices})
    for pieces in (1, 7, 103):
        op = WindowTopK(by=["g"], time="t", size=10, order=PRICE, k=2, ties=True)
        op.bind(batch.schema)
        for b in split(batch, np.random.default_rng(pieces), pieces):
            op.process(b)
        assert len(op._state().ranked) == 5
        out, _ = op.advance(everywhere(ENDED))
        assert window_rows(out, "price", "rank") == [(99, 1)] + [(98, 2)] * 4


def test_no_key_ranks_every_row_of_the_window() -> None:
    batch = make_batch({"g": [1, 2, 2, 1, 1], "t": [0, 3, 12, 14, 15],
                        "price": [4, 9, 1, 6, 6]})
    out = run(lambda: WindowTopK(by=[], time="t", size=10, order=PRICE, k=1, ties=True),
              [batch], finish=True)
    assert window_rows(out, "g", "price", "window_start", "rank") == [
        (2, 9, 0, 1), (1, 6, 10, 1), (1, 6, 10, 1)]
    assert out.schema.names[:6] == ["g", "t", "price", "window_start", "window_end", "rank"]


def test_timestamp_time_gives_timestamp_bounds() -> None:
    type_ = pa.timestamp("ms", tz="UTC")
    s = Stream(9)
    stamped = with_timestamps(s.batch, "t", type_)
    ints, stamps = (run(windows(12, 4), split(b, np.random.default_rng(9), 6), s.progress,
                        finish=True) for b in (s.batch, stamped))
    assert [stamps.schema.field(c).type for c in ("t", "window_start", "window_end")] == [
        type_] * 3
    assert ints.num_rows > 50
    assert bounds_as_int64(stamps, ["t", "window_start", "window_end"]).equals(ints)


def test_more_ties_than_minors_can_tell_apart_is_an_error() -> None:
    batch = make_batch({"g": [1] * 4, "t": [0] * 4, "price": [3] * 4})
    op = WindowTopK(by=["g"], time="t", size=10, order=PRICE, k=1, ties=True)
    op.bind(batch.schema)
    op._stride = 3  # as if one input could number only 3 outputs
    op.process(batch)
    with pytest.raises(ValueError, match=r"4 rows tie for the top 1 of one group.*rank by one "
                                         r"more order column.*ties=False"):
        op.advance(everywhere(ENDED))


def test_ties_and_keys_plan_errors() -> None:
    with pytest.raises(PlanError, match="ties must be True"):
        WindowTopK(by=["g"], time="t", size=5, order=ORDER, ties="yes")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match=r"KeyedTopK: key columns \(by\) must name at least one"):
        KeyedTopK(by=[], order=ORDER, until="until")
    with pytest.raises(PlanError, match=r"key columns \(by\) must be a list of column names"):
        WindowTopK(by="g", time="t", size=5, order=ORDER)  # type: ignore[arg-type]


def test_a_window_top_k_is_timed_from_its_close() -> None:
    """``_t0`` of a closed window's rows: the newest input's admission when the watermark
    closed it, not its latest row's (the latency from the close)."""
    op = windows(10)()
    first = make_batch({"g": [1, 1], "t": [3, 4], "price": [5, 7], "name": ["a", "b"]},
                       part=[0, 0])
    op.bind(first.schema)
    op.process(first)
    later = make_batch({"g": [2], "t": [25], "price": [1], "name": ["c"]}, part=[0], sn=[7])
    later = later.set_column(later.schema.get_field_index("_t0"), "_t0", pa.array([42.0]))
    op.process(later)
    out, _ = op.advance(Frontier(np.array([7]), np.array([20])))
    rows = out.to_pydict()
    assert rows["price"] == [7, 5] and rows["_t0"] == [42.0, 42.0]
