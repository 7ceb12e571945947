"""What a worker imports before its first step, imported once where workers are forked from
(an agent's forkserver, lab.runtime.warm; the local target's node forker): a fresh Python would
import it again for every worker on every restart. torch.optim and DistributedDataParallel
import torch._dynamo on first use; TorchFT is the per-step mode's (lab.runtime.train_per_step)."""

import torch
import torch._dynamo
import torch.distributed
import torch.nn.parallel
import torch.optim
import torchft.manager
import torchft.process_group

__all__ = ["torch", "torchft"]
