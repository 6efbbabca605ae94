"""A Parquet file source read on the sites (``read_on="sites"``) under the deterministic
simulator: the driver deals chunk records, a reader stage on the sites reads the rows
(``io/chunks.py``, ``io/site_read.py``). The files hold invalid rows (a null in a
required column: the file is then read whole by the driver for its dead letters) and late
ones (event time behind the watermark).

- failure-free, 1 and 4 sites, 1 and 2 replicas, with and without bad and late rows: the
  output equals the same files read on the driver, row for row and SN for SN, and the ingress
  numbers as many rows;
- one crash with take-over and catch-up (``test_sim_catchup``'s schedules), 60 seeds, with
  the readers among the replicas that fail: ``check`` passes;
- mutation, each caught by a run that passes unmutated: a reader that numbers rows by their
  place in the chunk (dropped rows leave gaps), an ingress that gives a chunk one sequence
  number, a reader that forgets the largest event time of the chunks before (it keeps late
  rows: the count the driver dealt no longer holds, and the reader says so).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sparkflux.io.chunks as chunks_mod
from sparkflux.dataflow.placement import Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.progress import NO_WATERMARK
from sparkflux.model.schema import SN
from sparkflux.protocol.ingress import Ingress
from sparkflux.sim.run import FailurePlan, Violation, check, simulate
from sparkflux.sim.workload import tiny_files_plan, write_tiny_files
from tests.support.seeds import seeds

from .test_sim_catchup import plan_for

CRASH_SEEDS, CHUNKS = seeds(60), 2
CHUNK_ROWS = 32  # chunks of the crash seeds: several to a file (70 rows)
BAD, LATE = 7, 9  # every 7th event invalid, every 9th late


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Files with invalid and late rows."""
    d = tmp_path_factory.mktemp("inbox")
    write_tiny_files(str(d), bad_every=BAD, late_every=LATE)
    yield d


def files_of(tmp_path_factory: pytest.TempPathFactory, bad: int, late: int) -> Path:
    d = tmp_path_factory.mktemp(f"files-{bad}-{late}")
    write_tiny_files(str(d), bad_every=bad, late_every=late)
    return d


def valid_rows(d: str) -> int:
    """The files' rows with an ``app`` (required) and not behind the largest time before."""
    t = pq.read_table(d)
    t = t.filter(pc.is_valid(t.column("app")))
    ts = t.column("ts").to_numpy()
    before = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, ts])[:-1]
    return int((ts >= before).sum())


def no_t0(t: pa.Table) -> pa.Table:
    return t.drop_columns(["_t0"])


@pytest.mark.parametrize(("bad", "late"), [(0, 0), (BAD, 0), (0, LATE), (BAD, LATE)])
@pytest.mark.parametrize(("sites", "replicas"), [(1, 1), (4, 1), (4, 2)])
def test_read_on_the_sites_equals_read_on_the_driver(
        tmp_path_factory: pytest.TempPathFactory, bad: int, late: int, sites: int,
        replicas: int) -> None:
    d = str(files_of(tmp_path_factory, bad, late))
    on_driver = simulate(*tiny_files_plan(d, sites=sites, read_on="driver"), 0, FailurePlan(),
                         replicas=replicas)
    plan, items = tiny_files_plan(d, sites=sites)
    assert [s.name for s in plan.stages][0] == "read events+drop_dst3"
    on_sites = simulate(plan, items, 0, FailurePlan(), replicas=replicas)
    assert on_sites.ended and on_driver.ended
    assert on_sites.admitted == on_driver.admitted == valid_rows(d)
    assert on_sites.output.num_rows > 30
    assert no_t0(on_sites.output).equals(no_t0(on_driver.output))


def test_the_readers_get_many_chunks_each(inbox: Path) -> None:
    """Consecutive chunks go to consecutive reader partitions (every site reads)."""
    plan, items = tiny_files_plan(str(inbox))
    ingress_admit = Ingress.admit
    parts: list[int] = []

    def spy(self: Ingress, batch: pa.RecordBatch, now: float, watermark: int,
            arrived: Any = None) -> list:
        before = self.records
        out = ingress_admit(self, batch, now, watermark, arrived)
        parts.extend((before + k) % plan.partitions for k in range(batch.num_rows))
        return out

    Ingress.admit = spy  # type: ignore[method-assign]
    try:
        simulate(plan, items, 0, FailurePlan())
    finally:
        Ingress.admit = ingress_admit  # type: ignore[method-assign]
    counts = np.bincount(parts, minlength=plan.partitions)
    assert counts.max() - counts.min() <= 1, counts


@pytest.fixture(scope="module")
def baseline(inbox: Path) -> tuple[pa.Table, int, list]:
    plan, items = tiny_files_plan(str(inbox), chunk_rows=CHUNK_ROWS)
    res = simulate(plan, items, 0, FailurePlan())
    assert res.ended
    return res.output, res.steps, items


def run_seed(inbox: Path, baseline: tuple, seed: int) -> None:
    out, steps, items = baseline
    fp, _ = plan_for(seed, steps)
    check(lambda: tiny_files_plan(str(inbox), chunk_rows=CHUNK_ROWS, deal=False)[0], items,
          seed, fp, expected=out)


@pytest.mark.parametrize("part", range(CHUNKS))
def test_readers_survive_a_crash_and_catch_up(inbox: Path, baseline: tuple,
                                              part: int) -> None:
    failed = []
    for seed in range(part * CRASH_SEEDS // CHUNKS, (part + 1) * CRASH_SEEDS // CHUNKS):
        try:
            run_seed(inbox, baseline, seed)
        except Violation as e:
            failed.append(str(e))
    assert not failed, "\n".join(failed[:5])


# -- mutation ------------------------------------------------------------------------------------
def test_mutation_rows_numbered_by_their_place_in_the_chunk(
        monkeypatch: pytest.MonkeyPatch, inbox: Path) -> None:
    """The reader numbers the kept rows by their index in the chunk (a dropped row leaves a
    gap): the output's SNs no longer are the driver's."""
    on_driver = simulate(*tiny_files_plan(str(inbox), read_on="driver"), 0, FailurePlan())
    screen = chunks_mod.screen
    read = chunks_mod.ReadChunks._read

    def numbered_by_place(self: chunks_mod.ReadChunks, c: dict) -> pa.RecordBatch:
        out = read(self, c)
        rows = chunks_mod.read_rows(c["file"], self.schema, c["row_start"], c["rows"])
        index = pa.array(np.arange(rows.num_rows))
        good, _, _ = screen(rows.append_column("__at", index),
                            self.schema.append(pa.field("__at", pa.int64(), nullable=False)),
                            self.event_time, self.lateness, c["prior_max"], self.source)
        at = good.column("__at").to_numpy()
        return out.set_column(out.schema.get_field_index(SN), SN, pa.array(c[SN] + at))

    monkeypatch.setattr(chunks_mod.ReadChunks, "_read", numbered_by_place)
    mutated = simulate(*tiny_files_plan(str(inbox)), 0, FailurePlan())
    assert not no_t0(mutated.output).equals(no_t0(on_driver.output))
    monkeypatch.undo()
    control = simulate(*tiny_files_plan(str(inbox)), 0, FailurePlan())
    assert no_t0(control.output).equals(no_t0(on_driver.output))


def test_mutation_one_sequence_number_per_chunk(monkeypatch: pytest.MonkeyPatch,
                                                inbox: Path, baseline: tuple) -> None:
    """The ingress gives a chunk one sequence number, whatever its span: a chunk's rows
    then share numbers with the next chunk's."""
    init = Ingress.__init__

    def one_each(self: Ingress, plan: PhysicalPlan, layout: Layout) -> None:
        init(self, plan, layout)
        self.plan = replace(plan, isn_span=None)

    monkeypatch.setattr(Ingress, "__init__", one_each)
    with pytest.raises(Violation) as e:
        run_seed(inbox, baseline, 0)
    print(f"mutation 'one ISN per chunk' caught: {e.value}")
    monkeypatch.undo()
    run_seed(inbox, baseline, 0)


def test_mutation_reader_forgets_the_chunks_before(monkeypatch: pytest.MonkeyPatch,
                                                   inbox: Path, baseline: tuple) -> None:
    """A reader that screens each chunk as if it came first keeps rows the driver found
    late; its count differs from the chunk's, and it stops rather than give other rows."""
    read = chunks_mod.ReadChunks._read

    def forgetful(self: chunks_mod.ReadChunks, c: dict) -> pa.RecordBatch:
        return read(self, {**c, "prior_max": NO_WATERMARK})

    monkeypatch.setattr(chunks_mod.ReadChunks, "_read", forgetful)
    with pytest.raises(chunks_mod.FileChanged, match="valid rows"):
        run_seed(inbox, baseline, 0)
    monkeypatch.undo()
    run_seed(inbox, baseline, 0)
