"""Per-sample exposure of each target (and of your own model) against the shadows."""
