"""Sources and sinks for real data: files landing in a directory, Spark DataFrames and
tables, a Parquet table Spark can read while the dataflow writes it, and a function called
per output batch. See docs/sources-and-sinks.md.

    from sparkflux.io import FileStreamSource, TableSink
"""

from sparkflux.io.dataframe import DataFramePosition, DataFrameSource
from sparkflux.io.files import FilePosition, FileStreamSource
from sparkflux.io.foreach import ForeachBatchSink, foreach_batch
from sparkflux.io.table_sink import TableSink

__all__ = ["DataFramePosition", "DataFrameSource", "FilePosition", "FileStreamSource",
           "ForeachBatchSink", "TableSink", "foreach_batch"]
