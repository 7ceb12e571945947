"""The one base of the project's operational errors, and the exit status each carries.

Every error a command can meet in normal use (bad input, a cloud or cluster that refuses, a
stack that is not deployed, a file that cannot be written) derives from `LabError`; the
command lines print its message and exit with its `exit_code`, and never keep a list of
error types of their own:

  2 (EXIT_REFUSED)  the input was refused before anything started (`Refused`, among them
                    `InvalidInput`): nothing was created or changed
  1 (EXIT_FAILED)   an operation was tried and failed, or a check failed

Errors keep a standard exception among their bases where callers (or the standard library)
expect one (`OSError` for a directory, `LookupError` for a name), so that code which catches
those still does.
"""

from __future__ import annotations

from typing import ClassVar

EXIT_FAILED = 1
EXIT_REFUSED = 2


class LabError(Exception):
    """An operation of the lab cannot go on; the message says why and what to do."""

    exit_code: ClassVar[int] = EXIT_FAILED


class Refused(LabError):
    """Input refused before anything started: nothing was created or changed."""

    exit_code: ClassVar[int] = EXIT_REFUSED
