"""Unit tests of ``sparkflux.control``."""
