"""Imported by lab.runtime.warm's forkserver, and only there: it dies with its agent, and imports
once what every worker would otherwise import on each restart (lab.runtime.preload)."""

import signal

from lab.runtime.warm import die_with_parent

die_with_parent()
# A signal to the agent's whole process group (a node drained, a notice) must reach the
# workers, not end the forkserver: its death would take them down before they saved. It goes
# with the agent instead (die_with_parent). Workers set SIGTERM back (lab.runtime.warm.run_script).
signal.signal(signal.SIGTERM, signal.SIG_IGN)

import lab.runtime.preload  # noqa: E402, F401
