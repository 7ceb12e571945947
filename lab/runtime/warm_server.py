"""Imported by lab.runtime.warm's forkserver, and only there: it dies with its agent, and imports
once what every worker would otherwise import on each restart."""

import signal

from lab.runtime.warm import die_with_parent

die_with_parent()
# A signal to the agent's whole process group (a node drained, a notice) must reach the
# workers, not end the forkserver: its death would take them down before they saved. It goes
# with the agent instead (die_with_parent). Workers set SIGTERM back (lab.runtime.warm.run_script).
signal.signal(signal.SIGTERM, signal.SIG_IGN)

import torch  # noqa: E402
import torch._dynamo  # noqa: E402 - first used by torch.optim and DistributedDataParallel
import torch.distributed  # noqa: E402
import torch.nn.parallel  # noqa: E402
import torch.optim  # noqa: E402
import torchft.manager  # noqa: E402 - the per-step mode's manager (lab.runtime.train_per_step)
import torchft.process_group  # noqa: E402, F401

__all__ = ["torch"]
