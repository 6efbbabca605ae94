"""Unit tests of the top-level modules (cli, options, query, check, runner)."""
