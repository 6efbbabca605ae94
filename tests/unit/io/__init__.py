"""Unit tests of ``sparkflux.io``."""
