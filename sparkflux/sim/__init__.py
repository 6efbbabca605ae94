"""The deterministic simulator: the real protocol cores on simulated links, clock and failures."""
