"""Spark plumbing: a local SparkSession helper and the Spark SQL reference (oracle) queries."""
