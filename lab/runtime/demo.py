"""What the demo trains, the same in both fault-tolerance modes: a synthetic classification
set sharded by global sample position, a small network, the device and backend of a worker,
the learning rate's scaling with the world size, and each rank's random-number stream."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import torch
from torch import nn

FEATURES, CLASSES = 32, 10


# ------------------------------------------------------------------------------- data
def make_dataset(
    size: int, seed: int, features: int = FEATURES, classes: int = CLASSES
) -> tuple[torch.Tensor, torch.Tensor]:
    """Points labelled by a fixed random 'teacher' network: learnable, and the same everywhere."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    y = (torch.tanh(x) @ teacher).argmax(dim=1)
    return x, y


class GlobalSampler:
    """Walks one seeded permutation per epoch by *global* position.

    A step takes the next `batch_size * world_size` positions and gives rank r every
    world_size-th of them. The position is part of the checkpoint, so after a restart at
    another world size training continues at the same place: within an epoch no sample is
    skipped or seen twice. A batch never crosses an epoch boundary (the last one is short).
    """

    def __init__(self, size: int, seed: int, epoch: int = 0, position: int = 0):
        self.size, self.seed, self.epoch, self.position = size, seed, epoch, position
        self._order = self._permutation(epoch)

    def _permutation(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))

    def window(self, samples: int) -> torch.Tensor:
        """The next step's sample indices, in global order: `samples` of them, fewer at the
        end of the epoch."""
        return self._order[self.position : min(self.position + samples, self.size)]

    def peek(self, batch_size: int, rank: int, world_size: int) -> tuple[torch.Tensor, int]:
        """This rank's indices for the next step of `batch_size` per rank, and how many
        samples the step covers."""
        window = self.window(batch_size * world_size)
        return window[rank::world_size], len(window)

    def advance(self, count: int) -> None:
        """Commit a completed step (never before: a failed step must be re-done)."""
        self.position += count
        if self.position >= self.size:
            self.epoch, self.position = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)

    @property
    def epoch_of_last_step(self) -> int:
        """The epoch the step just committed belongs to (a step that ends an epoch moves the
        position to the next one)."""
        return self.epoch if self.position else self.epoch - 1


# ------------------------------------------------------------------ model, optimizer
def make_model(features: int = FEATURES, classes: int = CLASSES) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, classes))


# The NVIDIA device plugin hands a container its GPUs in this variable (their UUIDs or indices;
# "void"/"none": none). CUDA base images set "all" whatever the machine has: no evidence of GPUs.
ENV_VISIBLE_GPUS = "NVIDIA_VISIBLE_DEVICES"
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
# The oldest driver a CUDA 13 build of torch runs on.
CUDA13_MIN_DRIVER = 580


def pick_device(local_rank: int) -> tuple[torch.device, str]:
    """This worker's GPU and NCCL where there are GPUs, else the CPU and gloo. A worker that
    was given GPUs it cannot use fails at once, never trains on the CPU in silence."""
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device, "nccl"
    given = os.environ.get(ENV_VISIBLE_GPUS, "")
    if given and given.lower() not in ("void", "none", "all"):
        raise RuntimeError(unusable_gpus(given))
    return torch.device("cpu"), "gloo"


def unusable_gpus(given: str, driver_file: Path = DRIVER_VERSION_FILE) -> str:
    """Why GPUs this worker was given are not usable: torch's CUDA build and the driver."""
    try:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+)\.[\d.]+", driver_file.read_text())
        driver = m.group(0).split()[-1] if m else "unknown (unreadable version file)"
    except OSError:
        driver = f"none loaded ({driver_file} is missing)"
    cuda = torch.version.cuda
    build = (
        f"torch {torch.__version__}, a CUDA {cuda} build" if cuda else f"torch {torch.__version__}, a CPU-only build"
    )
    need = f"; a CUDA 13 build needs driver {CUDA13_MIN_DRIVER} or newer" if cuda and cuda.startswith("13") else ""
    return (
        f"the pod was given GPUs ({ENV_VISIBLE_GPUS}={given}) but CUDA is unavailable: {build}, NVIDIA driver "
        f"{driver}{need}; the job would otherwise train on the CPU"
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The world size may differ from the checkpoint's: every group gets this run's rate."""
    for group in optimizer.param_groups:
        group["lr"] = lr


# ---------------------------------------------------------------------------- RNG streams
def rng_fingerprint() -> str:
    return hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest()[:12]


def derive_rng(seed: int, rank: int, step: int) -> None:
    """Set rank `rank`'s random-number streams (the CPU's and every GPU's) to those of the end
    of step `step`, derived from (seed, rank, step) as the sample order is from (seed, epoch);
    the elastic mode sets them anew at the end of every step, as JAX folds the step into its key.

    A job resumed at a step then draws what the uninterrupted job drew, whichever checkpoint
    it resumes from and whoever saved it: nothing to save, and nothing a saved stream could get
    wrong (ranks given a notice at once may save different steps alone, one rank still in the
    step another completed; a save from the middle of a step would hold that step's draws)."""
    torch.manual_seed(seed * 1_000_003 + step * 1009 + rank)
