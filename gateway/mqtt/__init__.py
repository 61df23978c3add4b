"""gateway/mqtt."""
