"""The README's quick start runs (``examples/quickstart.py``, a process of its own: its
relative paths are its working directory's for its own Spark too), and the two tables it
leaves are right against pandas over the same JSON files: a row per page and 10-second window
with its clicks, and one row per user with its clicks. The quick start reads its tables back
with ``spark.read.parquet`` itself (its "check: match"); this test reads them with pyarrow,
independently of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.spark


def test_the_quick_start_runs_and_its_tables_are_right(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--dir", str(tmp_path),
         "--files", "6", "--per-file", "1500", "--pause", "0.1"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "check: match" in done.stdout

    clicks = pd.concat(pd.read_json(p, lines=True) for p in sorted(
        (tmp_path / "clicks").glob("clicks-*.json")))
    assert len(clicks) == 9_000
    per_page = pq.read_table(tmp_path / "out" / "per_page").to_pandas()
    want = clicks.assign(w=clicks["ts"] // 10_000 * 10_000).groupby(["page", "w"]).size()
    got = per_page.set_index(["page", "window_start"])["n"]
    assert len(per_page) == len(want) > 20
    assert {k: int(v) for k, v in got.items()} == {k: int(v) for k, v in want.items()}
    assert (per_page["window_end"] - per_page["window_start"] == 10_000).all()

    per_user = pq.read_table(tmp_path / "out" / "per_user").to_pandas()
    assert per_user["user"].is_unique  # one row per user, not one per click
    assert dict(zip(per_user["user"], per_user["n"], strict=True)) == (
        clicks["user"].value_counts().to_dict())
