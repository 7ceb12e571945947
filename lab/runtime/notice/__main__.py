"""`python -m lab.runtime.notice`: run the spot-notice handler (flags: `--help`)."""

import sys

from lab.runtime.notice.cli import main

if __name__ == "__main__":
    sys.exit(main())
