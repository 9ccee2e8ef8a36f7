"""`python -m bench.fanout`: the fan-out benchmark (see the package's docstring)."""

import sys

from bench.fanout.scenarios import main

sys.exit(main())
