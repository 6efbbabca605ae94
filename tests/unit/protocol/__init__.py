"""Unit tests of ``sparkflux.protocol``."""
