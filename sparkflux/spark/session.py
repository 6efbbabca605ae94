"""A SparkSession with quiet, small-footprint defaults for local runs and tests.

The defaults suit the reference queries and tests: no web UI (nothing to bind, faster start),
few shuffle partitions (inputs are small, so 200 tiny tasks would dominate the runtime), Arrow
enabled for pandas/Arrow conversions (the reference collects results as Arrow) and a quiet log.
``extra_conf`` overrides any default.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def get_spark(
    master: str = "local[*]",
    app_name: str = "sparkflux",
    extra_conf: dict[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Get (or create) a SparkSession on ``master`` with the defaults above plus ``extra_conf``.

    ``getOrCreate`` returns an already running session if there is one in this process; its
    static settings (master, UI) then stay as they were, runtime SQL settings are applied.
    """
    conf = {**DEFAULT_CONF, **(extra_conf or {})}
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
