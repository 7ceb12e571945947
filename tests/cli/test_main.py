"""`elastic-lab` itself: what the command line says of itself."""

from __future__ import annotations

import pytest

from lab.cli import main


def test_the_command_line_says_its_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"elastic-lab {version('elastic-spot-lab')}"
