"""`python -m lab.cli`: the `elastic-lab` command."""

from lab.cli.main import run

run()
