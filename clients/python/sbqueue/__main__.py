"""python3 -m sbqueue: the sbq command (sbqueue.cli)."""

import sys

from .cli import main

sys.exit(main())
