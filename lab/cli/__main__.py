"""`python -m lab.cli`: the `elastic-lab` command."""

import sys

from lab.cli.main import main

sys.exit(main())
