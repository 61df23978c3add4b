"""core/remoting."""
