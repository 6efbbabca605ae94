"""Unit tests of ``sparkflux.runtime``."""
