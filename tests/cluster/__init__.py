"""Real dataflows on a Spark standalone cluster the tests start on this machine (``standalone``)."""
