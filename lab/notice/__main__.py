"""`python -m lab.notice`: run the spot-notice handler (flags: `--help`)."""

import sys

from lab.notice.cli import main

if __name__ == "__main__":
    sys.exit(main())
