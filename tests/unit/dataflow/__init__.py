"""Unit tests of ``sparkflux.dataflow``."""
