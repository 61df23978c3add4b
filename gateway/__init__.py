"""gateway."""

import core  # noqa: F401 - first, so that core's kernel switch also covers gateway's compiled modules
