"""TimeWindowAggregate against a model, with watermarks, batch splits and state moves."""

from __future__ import annotations

import doctest
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.operators.time_window as time_window_mod
from sparkflux.model.batch import child_minor, concat, rank_within_runs
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import ENDED, NO_WATERMARK, Frontier, Progress
from sparkflux.model.schema import T0
from sparkflux.operators.time_window import TimeWindowAggregate
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


def factory(size: int, slide: int | None = None, by: tuple[str, ...] = ("g",)):
    return lambda: TimeWindowAggregate(by=list(by), time="t", value="v", size=size,
                                       slide=slide, aggs=AGGS)


class Stream:
    """A random input with bounded disorder in event time, and its honest progress markers."""

    def __init__(self, seed: int, n: int = 400, string_key: bool = False) -> None:
        rng = np.random.default_rng(seed)
        # Some inputs share a major SN (as after an upstream 1:many operator).
        self.sn = np.cumsum(rng.choice([0, 1, 1, 1], n)) + 5
        snm = rank_within_runs(self.sn) * 3
        self.t = np.arange(n) * 2 + rng.integers(0, 9, n) - 20
        g = rng.integers(0, 4, n)
        self.batch = make_batch(
            {"g": [f"g{x}" for x in g] if string_key else g, "t": self.t,
             "v": rng.integers(-100, 100, n)},
            part=rng.integers(0, 3, n), sn=self.sn, snm=snm,
            types={"v": pa.int16()},
        )
        # After the row with SN s: everything with a lower SN is done, and no later row has
        # a time below the minimum of the times still to come.
        future = np.minimum.accumulate(np.r_[self.t, ENDED.wm][::-1])[::-1]
        after = zip(self.sn.tolist(), snm.tolist(), future[1:].tolist(),
                    np.r_[self.sn[1:], ENDED.sn].tolist(), strict=True)
        self.after = {(s, m): Progress(nxt - 1, wm) for s, m, wm, nxt in after}

    def progress(self, batch: pa.RecordBatch) -> Progress | None:
        if batch.num_rows == 0:
            return None
        return self.after[(batch.column("_sn")[-1].as_py(), batch.column("_snm")[-1].as_py())]


def model(batch: pa.RecordBatch, size: int, slide: int) -> list[tuple]:
    """Every (mini-partition, group, window) with its aggregates, in output SN order."""
    windows: dict[tuple, list[dict]] = {}
    for r in batch.to_pylist():
        start = r["t"] // slide * slide
        while start > r["t"] - size:
            windows.setdefault((r["_part"], r["g"], start), []).append(r)
            start -= slide
    out = []
    for (_, g, start), rs in windows.items():
        last = max(rs, key=lambda r: (r["_sn"], r["_snm"]))
        vs = [r["v"] for r in rs]
        j = (start // slide) % (size // slide)
        minor = int(child_minor(np.array([last["_snm"]]), np.array([j]))[0])
        out.append((g, start, start + size, max(vs), min(vs), sum(vs), len(vs),
                    sum(vs) / len(vs), last["_sn"], minor))
    return sorted(out, key=lambda r: (r[-2], r[-1]))


@pytest.mark.parametrize(("size", "slide"), [(10, None), (10, 5), (12, 4), (7, 1)])
def test_matches_model_with_watermarks(size: int, slide: int | None) -> None:
    s = Stream(size)
    batches = split(s.batch, np.random.default_rng(size), 12)
    out = run(factory(size, slide), batches, s.progress, finish=True)
    rows = user_rows(out)
    assert sorted(rows, key=lambda r: (r[-2], r[-1])) == model(s.batch, size, slide or size)
    assert_sn_increasing_per_partition(out)
    assert out.schema.names[:3] == ["g", "window_start", "window_end"]
    assert out.schema.field("hi").type == pa.int64()


def test_progress_claims_are_never_undercut() -> None:
    """Per partition: no later output row has an SN at or below a claimed SN, nor a
    window_start below a claimed watermark (the watermark is held back with the rows)."""
    s = Stream(3)
    op = factory(12, 4)()
    op.bind(s.batch.schema)
    emitted: list[tuple[pa.RecordBatch, Frontier]] = []
    for b in split(s.batch, np.random.default_rng(3), 25):
        assert op.process(b).num_rows == 0  # process itself emits nothing
        p = s.progress(b)
        if p is not None:
            out, claim = op.advance(everywhere(p))
            assert (claim.wm <= p.wm).all() and (claim.sn <= p.sn).all()
            emitted.append((out, claim))
    out, claim = op.advance(everywhere(ENDED))
    emitted.append((out, claim))
    assert (claim.sn == ENDED.sn).all() and (claim.wm == ENDED.wm).all()
    assert sum(o.num_rows for o, _ in emitted[:-1]) > 0  # windows close before the end
    assert any((c.wm[:3] < everywhere(s.progress(s.batch)).wm[:3]).any() for _, c in emitted)
    for k, (rows, claim_k) in enumerate(emitted):
        part = rows.column("_part").to_numpy()
        assert (rows.column("_sn").to_numpy() <= claim_k.sn[part]).all()
        for later, _ in emitted[k + 1:]:
            lp = later.column("_part").to_numpy()
            assert (later.column("_sn").to_numpy() > claim_k.sn[lp]).all()
            assert (later.column("window_start").to_numpy() >= claim_k.wm[lp]).all()


def test_a_partition_closes_on_its_own_watermark() -> None:
    """A site hosts some partitions; the others never progress there. Partition 1's window
    closes on partition 1's watermark although partition 0's stays at the start."""
    batch = make_batch({"g": [1, 1], "t": [3, 5], "v": [1, 2]}, part=[1, 1])
    op = factory(10, None)()
    op.bind(batch.schema)
    op.process(batch)
    f = Frontier(np.array([-1, 1]), np.array([NO_WATERMARK, 10]))
    out, claim = op.advance(f)
    assert out.to_pydict()["hi"] == [2] and out.to_pydict()["_part"] == [1]
    assert claim.sn.tolist() == [-1, 1] and claim.wm.tolist() == [NO_WATERMARK, 10]


def test_an_open_window_holds_the_watermark_at_its_start() -> None:
    batch = make_batch({"g": [1, 2], "t": [3, 14], "v": [1, 2]}, part=[0, 0])
    op = factory(10, 5)()  # windows [-5, 5), [0, 10) for t=3; [5, 15), [10, 20) for t=14
    op.bind(batch.schema)
    op.process(batch)
    out, claim = op.advance(Frontier(np.array([1]), np.array([12])))
    assert out.to_pydict()["window_start"] == [0, -5]  # minors: (start // slide) % 2
    assert claim.wm.tolist() == [5]  # [5, 15) is still open


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_boundaries_do_not_matter(seed: int) -> None:
    """The rows are the same however the input is cut into batches (their ``_t0``, the
    close's time, follows the passes: timing, in no digest)."""
    s = Stream(seed, string_key=seed == 2)
    make = factory(10, 5)
    whole = per_partition(run(make, [s.batch], s.progress, finish=True))
    rng = np.random.default_rng(seed)
    for pieces in (3, 17, 80):
        cut = run(make, split(s.batch, rng, pieces), s.progress, finish=True)
        assert untimed(per_partition(cut)).equals(untimed(whole))


def test_a_window_is_timed_from_its_close_not_its_latest_tuple() -> None:
    """``_t0`` of a window's row: the admission of the newest input the operator had seen
    when the watermark closed it (the latency from the close), not its own latest tuple's."""
    op = factory(10, None)()
    first = make_batch({"g": [1, 1], "t": [3, 4], "v": [1, 2]}, part=[0, 0])
    op.bind(first.schema)
    op.process(first)  # window [0, 10), its latest tuple admitted at t0 0.001
    later = make_batch({"g": [2], "t": [25], "v": [5]}, part=[0], sn=[7])
    later = later.set_column(later.schema.get_field_index(T0), T0, pa.array([42.0]))
    op.process(later)  # the input whose watermark closes it, admitted at 42.0
    out, _ = op.advance(Frontier(np.array([7]), np.array([20])))
    rows = out.to_pydict()
    assert rows["window_start"] == [0] and rows["_sn"] == [1]  # numbered after its latest
    assert rows[T0] == [42.0]


def of_partition(batch: pa.RecordBatch, q: int) -> pa.RecordBatch:
    return batch.filter(pa.array(batch.column("_part").to_numpy() == q))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_input_in_arrival_order_gives_the_same_rows(seed: int) -> None:
    """Algorithm 3 (``arrival_input``): a copy that folds rows above its claim early, in any
    order, emits the rows the SN-ordered copy emits, numbered alike; at each claim at least
    as far (an open window it holds carries a later SN, so it holds the claim less), and
    never at or below a claim it made."""
    s = Stream(seed, string_key=seed == 4)
    rng = np.random.default_rng(seed)
    steps = [b for b in split(s.batch, rng, 15) if b.num_rows]
    make = factory(10, 5)
    ordered, arrived = make(), make()
    ordered.bind(s.batch.schema)
    arrived.bind(s.batch.schema)
    assert arrived.arrival_input
    n, done = s.batch.num_rows, np.zeros(s.batch.num_rows, dtype=bool)
    end = 0
    claimed = np.full(3, -1)
    want: list[pa.RecordBatch] = []
    got: list[pa.RecordBatch] = []
    for b in steps:
        end += b.num_rows
        claim = s.progress(b)
        assert claim is not None
        want.append(ordered.process(b))
        # the rows up to the claim not run yet, with some of the later ones, shuffled
        early = rng.random(n) < 0.3
        early[:end] = True
        take = np.flatnonzero(early & ~done)
        done[take] = True
        for piece in np.array_split(rng.permutation(take), 3):
            got.append(arrived.process(s.batch.take(pa.array(piece, pa.int64()))))
        w_rows, w_front = ordered.advance(everywhere(claim))
        a_rows, a_front = arrived.advance(everywhere(claim))
        part, sn = a_rows.column("_part").to_numpy(), a_rows.column("_sn").to_numpy()
        assert (sn > claimed[part]).all()
        claimed = np.maximum(claimed, a_front.sn[:3])
        assert (a_front.sn[:3] >= w_front.sn[:3]).all()
        assert (a_front.wm[:3] >= w_front.wm[:3]).all()
        want.append(w_rows)
        got.append(a_rows)
        for q in range(3):  # each partition's stream
            mine, ran = (user_rows(of_partition(concat(b, ordered.output_schema), q))
                         for b in (want, got))
            assert ran[:len(mine)] == mine
    want.append(ordered.advance(everywhere(ENDED))[0])
    got.append(arrived.advance(everywhere(ENDED))[0])
    assert untimed(per_partition(concat(got, arrived.output_schema))).equals(
        untimed(per_partition(concat(want, ordered.output_schema))))


@pytest.mark.parametrize("string_key", [False, True])
def test_state_moves_to_a_fresh_operator(string_key: bool) -> None:
    s = Stream(8, string_key=string_key)
    batches = split(s.batch, np.random.default_rng(8), 10)
    make = factory(12, 4)
    whole = per_partition(run(make, batches, s.progress, finish=True))
    for cut in (2, 5, 9):
        moved = run_with_move(make, batches, cut, s.progress, finish=True)
        assert per_partition(moved).equals(whole)


def test_partition_info_counts_groups() -> None:
    batch = make_batch({"g": [1, 2, 1], "t": [1, 2, 3], "v": [1, 1, 1]}, part=[0, 0, 1])
    op = factory(10, 5)()
    op.bind(batch.schema)
    op.process(batch)
    assert {(i.part, i.keys) for i in op.partition_info()} == {(0, 2), (1, 1)}


def test_unknown_column_and_bad_sizes_are_plan_errors() -> None:
    schema = Stream(0, n=4).batch.schema
    for kwargs, match in (({"by": ["nope"]}, "'nope'"), ({"time": "when"}, "'when'"),
                          ({"value": "x"}, "'x'")):
        args = {"by": ["g"], "time": "t", "value": "v", "size": 10, **kwargs}
        with pytest.raises(PlanError, match=match):
            TimeWindowAggregate(**args).bind(schema)
    with pytest.raises(PlanError, match="multiple"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=10, slide=3)
    with pytest.raises(PlanError, match="size"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=0)
    with pytest.raises(PlanError, match="median"):
        TimeWindowAggregate(by=["g"], time="t", value="v", size=4, aggs={"m": "median"})


def test_default_aggregate_is_count() -> None:
    batch = make_batch({"g": [1, 1], "t": [0, 3], "v": [1.5, 2.5]})
    out = run(lambda: TimeWindowAggregate(by=["g"], time="t", value="v", size=5), [batch],
              finish=True)
    assert out.to_pydict()["count"] == [2]


def test_doctests() -> None:
    assert doctest.testmod(time_window_mod).failed == 0


def test_a_count_needs_no_value_column() -> None:
    """A click stream has no numeric column to count: ``value`` may be left out when every
    aggregate is a count; the counts equal those over any value column."""
    from sparkflux.model.progress import Frontier, Progress

    batch = pa.RecordBatch.from_pydict({
        "page": ["/", "/a", "/", "/"], "t": [1, 2, 3, 14], "v": [1.0, 2.0, 3.0, 4.0],
        "_sn": [0, 1, 2, 3], "_snm": [0] * 4, "_t0": [0.0] * 4,
        "_part": pa.array([0] * 4, pa.int32())})
    outs = []
    for kw in ({}, {"value": "v"}):
        op = TimeWindowAggregate(by=["page"], time="t", size=10, aggs={"n": "count"}, **kw)
        schema = op.bind(batch.schema)
        assert schema.field("n").type == pa.int64()
        op.process(batch)
        out, _ = op.advance(Frontier.every(Progress(sn=3, wm=20), 1))
        outs.append(sorted(zip(out.to_pydict()["page"], out.to_pydict()["window_start"],
                               out.to_pydict()["n"], strict=True)))
    assert outs[0] == outs[1] == [("/", 0, 2), ("/", 10, 1), ("/a", 0, 1)]


def test_an_aggregate_of_values_without_a_column_names_the_fix() -> None:
    with pytest.raises(PlanError, match=r"""aggregate 'total' = 'sum' reads a column: write """
                                        r"""'total': \("sum", "<column>"\) \(only "count" """):
        TimeWindowAggregate(by=["g"], time="t", size=10,
                            aggs={"n": "count", "total": "sum", "top": "max"})


def test_a_second_window_step_keyed_by_the_first_ones_window_names_the_fix() -> None:
    """Chaining two window aggregates, the second keyed by the first one's window start:
    the error says how to rename this step's window columns (``names=``)."""
    schema = pa.schema([pa.field("window_start", pa.int64()), pa.field("n", pa.int64()),
                        pa.field("_sn", pa.int64()), pa.field("_snm", pa.int64()),
                        pa.field("_t0", pa.float64()), pa.field("_part", pa.int32())])
    op = TimeWindowAggregate(by=["window_start"], time="window_start", value="n", size=100)
    with pytest.raises(PlanError, match=r"output column 'window_start' appears twice; a key "
                                        r"column \(by\) has that name too .*names=\("
                                        r"\"window_start2\", \"window_end2\"\)"):
        op.bind(schema)
    renamed = TimeWindowAggregate(by=["window_start"], time="window_start", value="n",
                                  size=100, names=("top_start", "top_end"))
    assert renamed.bind(schema).names[:3] == ["window_start", "top_start", "top_end"]


@pytest.mark.parametrize("type_", [pa.timestamp("us"), pa.timestamp("ms", tz="UTC")])
def test_timestamp_time_gives_timestamp_bounds(type_: pa.DataType) -> None:
    """With a timestamp ``time`` the bounds come out as that timestamp type (unit and zone),
    with the numbers an integer ``time`` gives; the rest of the output is the same."""
    s = Stream(4)
    stamped = with_timestamps(s.batch, "t", type_)
    pieces = [split(b, np.random.default_rng(4), 9) for b in (s.batch, stamped)]
    ints, stamps = (run(factory(12, 4), p, s.progress, finish=True) for p in pieces)
    assert stamps.schema.field("window_start").type == type_
    assert stamps.schema.field("window_end").type == type_
    assert ints.schema.field("window_start").type == pa.int64()
    assert ints.num_rows > 50
    assert bounds_as_int64(stamps, ["window_start", "window_end"]).equals(ints)
    first = stamps.to_pylist()[0]
    assert first["window_end"] - first["window_start"] == timedelta(
        microseconds=12 * (1000 if type_.unit == "ms" else 1))


def test_no_key_aggregates_every_row_of_a_window_of_a_partition() -> None:
    batch = make_batch({"g": [1, 2, 2, 1, 1], "t": [0, 3, 12, 14, 15], "v": [4, 9, 1, 6, 6]},
                       part=[0, 0, 0, 0, 1])
    out = run(lambda: TimeWindowAggregate(by=[], time="t", size=10,
                                          aggs={"n": "count", "top": ("max", "v")}),
              [batch], finish=True)
    assert out.schema.names[:4] == ["window_start", "window_end", "n", "top"]
    assert sorted(zip(out.column("_part").to_pylist(), out.column("window_start").to_pylist(),
                      out.column("n").to_pylist(), out.column("top").to_pylist(),
                      strict=True)) == [(0, 0, 2, 9), (0, 10, 2, 6), (1, 10, 1, 6)]


def test_no_key_state_moves() -> None:
    s = Stream(11)
    make = factory(12, 4, by=())
    batches = split(s.batch, np.random.default_rng(11), 10)
    whole = per_partition(run(make, batches, s.progress, finish=True))
    assert whole.num_rows > 50
    for cut in (3, 7):
        moved = run_with_move(make, batches, cut, s.progress, finish=True, wire=True)
        assert per_partition(moved).equals(whole)
