"""core/ha."""
