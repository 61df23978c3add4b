"""gateway/wildcard."""
