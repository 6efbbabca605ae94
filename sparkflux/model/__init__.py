"""The data model: system columns, sequence numbers, progress markers and batch helpers."""
