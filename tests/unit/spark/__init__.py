"""Unit tests of ``sparkflux.spark``."""
