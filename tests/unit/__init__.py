"""Tests of one module (or a few) at a time, without Spark: unit/<package>/test_<module>.py."""
