"""Unit tests of ``sparkflux.operators``."""
