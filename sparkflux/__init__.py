"""sparkflux: long-lived, partitioned-parallel continuous queries on Apache Spark (Flux).

``sparkflux.start(dataflow, spark=spark, **options)`` runs a dataflow and returns a
``FluxQuery`` (``sparkflux/query.py``); ``sparkflux.Dataflow`` builds one. Both are imported
on first use: a site task on an executor imports this package and must stay light.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Dataflow", "FluxQuery", "PlanError", "RunFailed", "spark_session", "start"]

_LAZY = {"start": "sparkflux.query", "FluxQuery": "sparkflux.query",
         "PlanError": "sparkflux.model.errors", "RunFailed": "sparkflux.runtime.run_config",
         "Dataflow": "sparkflux.dataflow.api", "spark_session": "sparkflux.spark.launcher"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sparkflux' has no attribute {name!r}")
