"""A notebook, cell by cell (``# %%``): your own SparkSession, a directory of Parquet files
that keeps growing as the source, the netmon query with Flux-HA, a Parquet table as the
sink, a site killed on the way, and ``spark.read.parquet`` of the table compared with the
Spark SQL reference. Paste the cells into Jupyter, or run it whole:

    .venv/bin/python examples/notebook.py --events 400000 --kill 1@2
    .venv/bin/python examples/notebook.py --master spark://127.0.0.1:7077
    .venv/bin/python examples/notebook.py --read-on sites   # the sites read the files

The files are written by a thread standing in for your upstream job: each under a hidden
name, then renamed into place (what the file source reads: complete files only), and a
``_DONE`` marker at the end, which ends the source.
"""

# %% Setup: the example module, a scratch directory, the options.
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netmon  # the example module beside this file

p = argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--events", type=int, default=400_000)
p.add_argument("--per-file", type=int, default=20_000, help="packets per landed file")
p.add_argument("--pace", type=float, default=0.3, help="seconds between landed files")
p.add_argument("--kill", default="1@2", help="SITE@SECONDS, or '' for no kill")
p.add_argument("--master", default="local[6,400]")
p.add_argument("--read-on", choices=["driver", "sites"], default="driver",
               help="who reads the files: the driver, or the sites (rows never pass through "
                    "the driver)")
p.add_argument("--dir", default=None, help="where the inbox and the table go (default: tmp)")
a = p.parse_args()
work = Path(a.dir or tempfile.mkdtemp(prefix="sparkflux-notebook-"))
inbox, table = work / "inbox", work / "table"
inbox.mkdir(parents=True, exist_ok=True)

# %% Your SparkSession. The executors' Python must have sparkflux: PYSPARK_PYTHON (set
# before the session) or spark.pyspark.python; local mode needs retries: local[N,F]. The log
# options keep a killed site's expected Java stack trace out of the output (Spark's log goes
# to a file; errors still show).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession  # noqa: E402

from sparkflux.spark.launcher import log_java_options  # noqa: E402

spark = (SparkSession.builder.master(a.master).appName("notebook")
         .config("spark.pyspark.python", sys.executable)
         .config("spark.driver.extraJavaOptions", log_java_options())
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())

# %% Upstream: Parquet files landing in the inbox while the query runs (one every --pace
# seconds once the query has read the first).
def land() -> None:
    for i, start in enumerate(range(0, a.events, a.per_file)):
        batch = netmon.generate(start, min(a.per_file, a.events - start))
        tmp = inbox / f".part-{i:05d}.parquet.tmp"
        pq.write_table(pa.Table.from_batches([batch]), tmp)
        os.replace(tmp, inbox / f"part-{i:05d}.parquet")
        while i == 0 and not source.position().file:
            time.sleep(0.05)
        time.sleep(a.pace)
    (inbox / "_DONE").touch()

# %% The query: netmon over the file source, into a Parquet table, with Flux-HA.
import sparkflux  # noqa: E402
from sparkflux.io import FileStreamSource, TableSink  # noqa: E402

source = FileStreamSource(inbox, netmon.SCHEMA, event_time="ts", end_marker="_DONE",
                          read_on=a.read_on)
threading.Thread(target=land, daemon=True).start()
opts = netmon.NetmonOptions(events=a.events)
query = sparkflux.start(netmon.build(opts, source=source), spark=spark,
                        sink=TableSink(table), sites=4, partitions=32, ha="flux",
                        kill=[a.kill] if a.kill else [], dataflow_file=netmon.__file__,
                        announce=print)

# %% Watch it: the status, and the table as Spark sees it meanwhile.
while not query.await_termination(timeout=2):
    s = query.status
    rows = spark.read.parquet(str(table)).count() if any(table.glob("part-*")) else 0
    print(f"{s['message']}: {s['input_records']:,} in, {s['output_records']:,} out, "
          f"{s['failures']} failures; the table has {rows:,} rows", flush=True)
m = query.metrics
print(f"done: {m['input_tuples']:,} in, {m['output_tuples']:,} out, kills {m['kills']}, "
      f"read up to {source.position()}")

# %% The table, read back by Spark, against the Spark SQL reference.
from sparkflux.dataflow.compiler import compile_plan  # noqa: E402
from sparkflux.model.digest import digest_of  # noqa: E402
from sparkflux.spark.expected import collect  # noqa: E402

out = spark.read.parquet(str(table)).toArrow()
schema = compile_plan(netmon.build(opts), 1, 1).sink_schema(0)
expected = collect(netmon.reference(spark, opts), schema, "the netmon reference")
ordered = out.sort_by([("_sn", "ascending"), ("_snm", "ascending")])
got = digest_of(ordered.select(expected.table.column_names))
print(f"table     {out.num_rows:,} rows, digest {got[:16]}")
print(f"reference {expected.rows:,} rows, digest {(expected.output_digest or '')[:16]}")
print("check: " + ("match" if got == expected.output_digest else "MISMATCH"))
sys.exit(0 if got == expected.output_digest else 1)
