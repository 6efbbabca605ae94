"""The README's quick start, runnable: clicks arrive as JSON-lines files landing in a
directory; a 10-second window count per page and a running count per user run with Flux-HA
into two Parquet tables (append mode for the windows, update mode, one row per user, for the
running count), read back with ``spark.read.parquet`` and checked against pandas over the
same files.

    .venv/bin/python examples/quickstart.py              # in a new temporary directory
    .venv/bin/python examples/quickstart.py --dir DIR    # in DIR (clicks/, out/)

The files are written by a thread standing in for your upstream job: each under a hidden
name, then renamed into place (the file source reads complete files only), the clicks of
each file later than the last one's, and a ``_DONE`` marker at the end, which ends the
source. The quick start's own lines are the block between the two ``# ---`` lines, word for
word the README's (``tests/spark/test_quickstart_spark.py`` checks both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

USERS = 500
PAGES = ("/", "/search", "/item", "/cart", "/checkout")


def land_clicks(inbox: Path, files: int, per_file: int, pause: float, seed: int) -> None:
    """Upstream: ``files`` JSON-lines files of ``per_file`` clicks, event time ``ts`` in
    milliseconds growing by 0-40 ms a click, then ``_DONE``."""
    inbox.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    ts = 1_700_000_000_000
    for i in range(files):
        lines = []
        for _ in range(per_file):
            ts += rnd.randint(0, 40)
            lines.append(json.dumps({"user": f"u{rnd.randrange(USERS):03d}",
                                     "page": rnd.choice(PAGES), "ts": ts}))
        tmp = inbox / f".clicks-{i:04d}.json.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, inbox / f"clicks-{i:04d}.json")
        time.sleep(pause)  # the upstream's pace
    (inbox / "_DONE").touch()


def expected(inbox: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two results computed by pandas from the files: clicks per page and 10-second
    window (every window: the input's end closes the last ones), and clicks per user."""
    clicks = pd.concat(pd.read_json(p, lines=True) for p in sorted(inbox.glob("*.json")))
    clicks["window_start"] = clicks["ts"] - clicks["ts"] % 10_000
    per_page = (clicks.groupby(["page", "window_start"]).size().rename("n").reset_index()
                .assign(window_end=lambda d: d["window_start"] + 10_000))
    per_user = clicks.groupby("user").size().rename("n").reset_index()
    return per_page, per_user


def same(got: pd.DataFrame, want: pd.DataFrame, by: list[str]) -> bool:
    cols = list(want.columns)
    a = got[cols].sort_values(by).reset_index(drop=True).astype(want.dtypes.to_dict())
    return a.equals(want.sort_values(by).reset_index(drop=True))


p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--dir", default=None, help="where clicks/ and out/ go (default: a new "
                                           "temporary directory)")
p.add_argument("--files", type=int, default=12)
p.add_argument("--per-file", type=int, default=2_000)
p.add_argument("--pause", type=float, default=0.2, help="seconds between landed files")
p.add_argument("--seed", type=int, default=26)
a = p.parse_args()
os.chdir(a.dir or tempfile.mkdtemp(prefix="sparkflux-quickstart-"))  # before Spark starts:
# the relative paths below are this directory's for Spark too
print(f"working in {os.getcwd()}", flush=True)
Path("clicks").mkdir(exist_ok=True)
threading.Thread(target=land_clicks, args=(Path("clicks"), a.files, a.per_file, a.pause,
                                           a.seed), daemon=True).start()

# --- the quick start (README.md)
import pyarrow as pa

import sparkflux
from sparkflux.io import FileStreamSource, TableSink
from sparkflux.operators import GroupAggregate, TimeWindowAggregate

spark = sparkflux.spark_session()  # or your own SparkSession: docs/pyspark.md
schema = pa.schema({"user": pa.string(), "page": pa.string(), "ts": pa.int64()})  # ts: ms
df = sparkflux.Dataflow("clicks")
clicks = df.source(FileStreamSource("clicks/", schema, format="json", event_time="ts",
                                    end_marker="_DONE"))  # files landing in clicks/
(clicks.exchange(by=["page"])
       .apply(TimeWindowAggregate(by=["page"], time="ts", size=10_000, aggs={"n": "count"}))
       .sink(TableSink("out/per_page")))
(clicks.exchange(by=["user"])
       .apply(GroupAggregate(by=["user"], aggs={"n": "count"}))
       .sink(TableSink("out/per_user", mode="update", key=["user"])))  # one row per user
query = sparkflux.start(df, spark=spark, ha="flux", sites=2)
query.await_termination()  # until _DONE lands and every file is read
spark.read.parquet("out/per_page").orderBy("window_start", "page").show()
spark.read.parquet("out/per_user").orderBy("user").show()
# ---

per_page, per_user = expected(Path("clicks"))
got_page = spark.read.parquet("out/per_page").toPandas()
got_user = spark.read.parquet("out/per_user").toPandas()
ok = (same(got_page, per_page, ["page", "window_start"]) and same(got_user, per_user, ["user"])
      and len(got_user) == got_user["user"].nunique())
print(f"per page and window: {len(got_page)} rows (pandas {len(per_page)}); per user: "
      f"{len(got_user)} rows (pandas {len(per_user)}), {query.metrics['output_tuples']:,} "
      f"output rows in all")
print("check: " + ("match" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
