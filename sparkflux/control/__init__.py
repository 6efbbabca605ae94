"""The controller (membership, views, layout, recovery) and its policies; sans-I/O cores."""
