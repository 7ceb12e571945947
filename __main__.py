"""Pulumi program of elastic-spot-lab: reads the stack config and composes the components.

The body lives in components/program.py so that `elastic-lab plan` runs exactly this.
"""

from components.program import main

main()
