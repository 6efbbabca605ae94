"""A Spark job script that runs the netmon dataflow through the API (``sparkflux.start``),
for ``spark-submit`` or a notebook:

    source .venv/bin/activate
    spark-submit --master spark://127.0.0.1:7077 examples/netmon_job.py \\
        --events 2000000 --ha flux --rate 50000 --check

Its session is ``sparkflux.spark_session()``: under spark-submit, the master and settings
spark-submit gave plus what the sites' job needs (the executors' Python is this one). A
session of your own (``SparkSession.builder.getOrCreate()``) works too; it is checked at
``start`` and a missing setting is named (e.g. ``--conf spark.pyspark.python=...``). The
script starts the query, prints its status every few seconds while it runs, and at the end
its digests; with ``--check`` also the Spark SQL reference's digest computed in the same
session, and exits 1 if they differ. With ``--checkpoint DIR --table PATH`` it can be run
under the supervisor, which starts it again from its newest checkpoint if its driver dies:

    sparkflux supervise -- spark-submit --master spark://127.0.0.1:7077 \
        examples/netmon_job.py --rate 50000 --checkpoint /shared/ckpt --table /shared/netmon
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sparkflux
from sparkflux.io import TableSink

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netmon  # the example module beside this script


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=2_000_000)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--ha", choices=["none", "flux"], default="flux")
    p.add_argument("--rate", type=float, default=None)
    p.add_argument("--check", action="store_true", help="compare with the Spark reference")
    p.add_argument("--checkpoint", default=None,
                   help="take checkpoints there; run again, the job goes on from the newest")
    p.add_argument("--checkpoint-interval", type=float, default=10.0)
    p.add_argument("--table", default=None,
                   help="write the output as a Parquet table (TableSink) at this path")
    a = p.parse_args()

    spark = sparkflux.spark_session(app_name="netmon-job")
    opts = netmon.NetmonOptions(events=a.events)
    sink = TableSink(a.table) if a.table else None
    query = sparkflux.start(netmon.build(opts), spark=spark, sink=sink, sites=a.sites,
                            partitions=a.partitions, ha=a.ha, rate=a.rate,
                            checkpoint=a.checkpoint,
                            checkpoint_interval=a.checkpoint_interval,
                            dataflow_file=netmon.__file__, announce=print)
    while not query.await_termination(timeout=5):
        s = query.status
        print(f"{s['message']}: {s['input_records']:,} in, {s['output_records']:,} out, "
              f"{s['sites']} sites, {s['failures']} failures", flush=True)
    m = query.metrics
    print(f"output_tuples {m['output_tuples']}")
    print(f"output_digest {m['output_digest']}")
    print(f"rows_digest {m['rows_digest']}")
    if a.check:
        ref = netmon.reference(spark, opts)
        from sparkflux.spark.expected import collect

        schema = netmon_schema(a)
        expected = collect(ref, schema, "the netmon reference")
        same = expected.output_digest == m["output_digest"]
        print(f"reference_digest {expected.output_digest}")
        print("check: " + ("match" if same else "MISMATCH"))
        return 0 if same else 1
    return 0


def netmon_schema(a: argparse.Namespace):  # noqa: ANN201 - a pyarrow schema
    from sparkflux.dataflow.compiler import compile_plan

    return compile_plan(netmon.build(netmon.NetmonOptions(events=a.events)), 1, 1).sink_schema(0)


if __name__ == "__main__":
    sys.exit(main())
