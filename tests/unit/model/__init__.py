"""Unit tests of ``sparkflux.model``."""
