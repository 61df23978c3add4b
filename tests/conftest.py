"""Suite-wide set-up: shared helpers in tests/support are importable by name."""

import sys
from pathlib import Path

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))
