"""Entry point of the policy pack: the Pulumi CLI runs it, and it serves the checks of
`elastic-lab plan` (lab.plan.policy_pack) until the CLI stops it."""

from __future__ import annotations

import sys
from pathlib import Path

# The pack imports the project's checks; the project's virtualenv has it installed, and the
# repository root on the path makes the checks of this working tree the ones that run.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lab.plan.policy_pack import pack  # noqa: E402 - needs the repository root on the path

pack()
