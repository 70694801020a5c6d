"""``python -m runners.moe``: see runners.moe.cli."""

import sys

from runners.moe.cli import main

sys.exit(main())
