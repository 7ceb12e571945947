"""Every error a user can meet is a LabError: each exception class the commands' packages define
is one (the command line turns it into a message and an exit status in one place, lab/cli/main.py),
unless it is private to its module, which catches it itself."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from lab.vocab.errors import LabError

# The packages whose errors reach a person through `elastic-lab` or a notebook. The runtime's run
# in the training image, where torch's agent reads a worker's exit, not a message.
USER_FACING = ("cli", "cluster", "stacks", "plan", "program", "k8s", "notebooks", "drill", "local")
# Errors that are not a command's failure, and why.
NOT_A_FAILURE = {
    "lab.local.target.Stopped": "SIGTERM reached the drill: it stops, exiting 143 (lab/cli/drill.py)",
    "lab.drill.diagnosis.CrashLoop": "the drill's own signal to stop a run; its report says why (lab/drill/run.py)",
}


def _errors_defined_in(package: str) -> list[tuple[str, type[BaseException]]]:
    found = []
    root = importlib.import_module(f"lab.{package}")
    modules = pkgutil.walk_packages(root.__path__, f"{root.__name__}.")
    names = [root.__name__] + [m.name for m in modules if not m.name.endswith(".__main__")]  # __main__ runs
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found.append((f"{name}.{attr}", value))
    return found


def test_every_public_error_of_the_commands_packages_is_a_lab_error():
    errors = [e for package in USER_FACING for e in _errors_defined_in(package)]
    assert len(errors) > 10, "the scan found the packages' errors"
    strays = [
        name
        for name, cls in errors
        if not issubclass(cls, LabError) and not name.rsplit(".", 1)[1].startswith("_") and name not in NOT_A_FAILURE
    ]
    assert strays == [], f"errors a person can meet that are no LabError: {strays}"
