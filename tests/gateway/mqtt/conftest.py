"""Let the gateway.mqtt test modules import their shared ``mqtt_helpers``.

The suite runs with ``--import-mode=importlib``, which does not put test
directories on ``sys.path``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
