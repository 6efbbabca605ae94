"""Dataflow files on Spark local mode: a helper module beside the file is shipped with it (the
command run from another directory), and a site that cannot start stops the run in seconds
with its error and a hint, not after Spark's hundreds of retries."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sparkflux.dataflow.examples import load_example
from sparkflux.io.sinks import CollectSink, DeadLetters
from sparkflux.runner import run_example
from sparkflux.runtime.run_config import RunFailed
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

# A small dataflow file: numbers -> exchange(k) -> Map(FN) -> sink. {imports} and {extra}
# make the variants.
FLOW = '''
"""A test dataflow."""
import numpy as np
import pyarrow as pa

from sparkflux.dataflow.api import Dataflow, Source
from sparkflux.operators.stateless import Map
{imports}
SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False),
                    pa.field("x", pa.int64(), nullable=False)])


class Numbers(Source):
    schema = SCHEMA

    def __init__(self, n):
        self.n = n

    def total(self):
        return self.n

    def batches(self):
        for s in range(0, self.n, 1000):
            x = np.arange(s, min(self.n, s + 1000), dtype=np.int64)
            yield pa.RecordBatch.from_arrays([pa.array((x % 7).astype(np.int32)), pa.array(x)],
                                             schema=SCHEMA)
{extra}

def add_options(parser):
    pass


def options(args):
    return args.events


def build(events):
    df = Dataflow("numbers")
    (df.source(Numbers(events), name="nums").exchange(by=["k"])
     .apply(OP(FN, [pa.field("y", pa.int64())]), name="double").sink(name="out"))
    return df
'''
HELPER = '''
import pyarrow.compute as pc


def doubled(batch):
    return {"y": pc.multiply(batch.column("x"), 2)}
'''
RAISES_AT_START = '''

def doubled(batch):
    return {"y": batch.column("x")}


class Fragile(Map):
    """Rebuilt on every site from the plan: it refuses to start there."""

    def __setstate__(self, state):
        raise RuntimeError("Fragile cannot start on this executor")


OP, FN = Fragile, doubled
'''


def test_a_helper_module_beside_the_dataflow_file_reaches_the_sites(tmp_path: Path) -> None:
    flow_dir, elsewhere = tmp_path / "flow", tmp_path / "elsewhere"
    flow_dir.mkdir()
    elsewhere.mkdir()
    (flow_dir / "sfx_helper_beside.py").write_text(HELPER)
    (flow_dir / "flow.py").write_text(FLOW.format(
        imports="from sfx_helper_beside import doubled\n", extra="\nOP, FN = Map, doubled\n"))
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "sparkflux.cli", "run", str(flow_dir / "flow.py"),
           "--events", "3000", "--sites", "2", "--partitions", "4", "--no-progress",
           "--output", str(out)]
    # From another directory; PYTHONPATH: this checkout's sparkflux, whatever is installed.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=elsewhere,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pq.read_table(out)
    assert table.num_rows == 3000
    x, y = table.column("x").to_pylist(), table.column("y").to_pylist()
    assert y == [2 * v for v in x] and sorted(x) == list(range(3000))


def test_a_site_that_cannot_start_stops_the_run_with_its_error(tmp_path: Path,
                                                               spark: Any) -> None:
    (tmp_path / "flow_fragile.py").write_text(FLOW.format(imports="", extra=RAISES_AT_START))
    module = load_example(tmp_path / "flow_fragile.py")
    line = 1 + FLOW.format(imports="", extra=RAISES_AT_START).splitlines().index(
        '        raise RuntimeError("Fragile cannot start on this executor")')
    args = argparse.Namespace(events=2000, batch_size=1000, sites=2, partitions=4, ha="none",
                              master=None, rate=None, ingress_buffer=10_000, window=10_000,
                              output=None, dead_letter=None)
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        run_example(module, args, sink=CollectSink(), dead=DeadLetters(), spark=spark)
    took = time.monotonic() - t0
    text = str(failed.value)
    assert took < 30, f"took {took:.1f}s: {text}"  # the start deadline is 180 s
    assert "site tasks fail before they register with the driver, the same error 3 times" in text
    assert "RuntimeError: Fragile cannot start on this executor" in text
    assert f"flow_fragile.py:{line} in __setstate__" in text
    assert "hint: the site failed while it started" in text
    assert "rebuilt the dataflow's plan" in text
