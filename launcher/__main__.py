"""``python -m launcher ...`` is the ``animfleet`` command."""

import sys

from launcher.command import main

sys.exit(main())
