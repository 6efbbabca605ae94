"""The deterministic simulator: the protocol cores run together, with crashes, seeds and mutants."""
