"""sparkflux: long-lived, partitioned-parallel continuous queries on Apache Spark (Flux)."""

from __future__ import annotations

__version__ = "0.1.0"
