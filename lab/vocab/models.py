"""The demo job's model sizes and how they spread over the ranks: the names a job setting
(`--model`, `--parallel`) takes on every target. What each size is lives in the runtime
(lab.runtime.gpt, lab.runtime.workload)."""

from __future__ import annotations

# The demo trainer, as a job runs it (`python -m`), and its flag that has every rank record the
# samples of each step (the drill's sample ledger, lab.drill.ledger).
DEMO_MODULE = "lab.runtime.train"
LOG_SAMPLES = "--log-samples"
# The step a drill of the demo trainer trains to unless told (`drill --steps`), here and on a cluster.
DEFAULT_STEPS = 400
TINY = "tiny"  # a small classifier: quick drills, whole checkpoints
GPT_SIZES = ("gpt-small", "gpt-100m")  # decoder-only transformers: sharded checkpoints
MODELS = (TINY, *GPT_SIZES)
PARALLEL = ("fsdp", "ddp")  # GPT sizes: FSDP2 shards the state over the ranks; DDP replicates it


def demo_args(steps: int, step_time: float, model: str = TINY, parallel: str = "fsdp") -> tuple[str, ...]:
    """The demo script's arguments for a drill of `steps` steps of `model`."""
    return ("--steps", str(steps), "--step-time", f"{step_time:g}", *model_arguments(model, parallel))


def model_arguments(model: str = TINY, parallel: str = "fsdp") -> tuple[str, ...]:
    """The demo script's arguments that choose its model (none for the default, tiny)."""
    return () if model == TINY else ("--model", model, "--parallel", parallel)
