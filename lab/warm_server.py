"""Imported by lab.warm's forkserver, and only there: it dies with its agent, and imports
once what every worker would otherwise import on each restart."""

from lab.warm import die_with_parent

die_with_parent()

import torch  # noqa: E402
import torch._dynamo  # noqa: E402 - first used by torch.optim and DistributedDataParallel
import torch.distributed  # noqa: E402
import torch.nn.parallel  # noqa: E402
import torch.optim  # noqa: E402

__all__ = ["torch"]
