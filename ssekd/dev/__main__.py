"""`python -m ssekd.dev`: the launcher `make run` runs (`ssekd.dev.launcher`)."""

import sys

from ssekd.dev.launcher import main

sys.exit(main())
