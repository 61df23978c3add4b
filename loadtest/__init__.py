"""loadtest."""
