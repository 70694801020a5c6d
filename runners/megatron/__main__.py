import sys

from runners.megatron.cli import main

sys.exit(main())
