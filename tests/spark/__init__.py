"""Real dataflows on Spark local mode (marked ``spark`` by the fixtures they use)."""
