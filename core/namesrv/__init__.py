"""core/namesrv."""
