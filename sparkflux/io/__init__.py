"""Sources and sinks for real data: files landing in a directory, Spark DataFrames and
tables, a Parquet table Spark can read while the dataflow writes it, and a callback per
output batch. See README "Sources and sinks".

    from sparkflux.io import FileStreamSource, TableSink
"""

from sparkflux.io.files import FilePosition, FileStreamSource

__all__ = ["FilePosition", "FileStreamSource"]
