"""lab.runtime.demo: what the demo job's workers run on."""

from __future__ import annotations

import pytest
import torch


def test_a_worker_given_gpus_it_cannot_use_fails_at_once(monkeypatch, tmp_path):
    """The device plugin gave the pod a GPU, but this torch cannot use it (here: a CPU build; on a
    node: a driver older than the CUDA build needs). The worker says so instead of training on the CPU."""
    from lab.runtime import demo

    monkeypatch.setenv(demo.ENV_VISIBLE_GPUS, "GPU-0b1c2d3e")
    with pytest.raises(RuntimeError, match=r"given GPUs \(NVIDIA_VISIBLE_DEVICES=GPU-0b1c2d3e\)") as failed:
        demo.pick_device(0)
    assert "CUDA is unavailable" in str(failed.value) and f"torch {torch.__version__}" in str(failed.value)
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul 8 2025\n")
    assert "NVIDIA driver 570.172.08" in demo.unusable_gpus("GPU-0b1c2d3e", driver)
    assert "is missing" in demo.unusable_gpus("GPU-0b1c2d3e", tmp_path / "absent")
    for nothing in ("void", "none", "all", ""):
        monkeypatch.setenv(demo.ENV_VISIBLE_GPUS, nothing)
        assert demo.pick_device(0) == (torch.device("cpu"), "gloo")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: streams of a checkpoint loaded onto it")
def test_streams_of_a_checkpoint_loaded_onto_a_gpu_are_restored():
    """A whole checkpoint is loaded onto the rank's device: its saved streams arrive there, and
    torch sets a stream only from a CPU tensor."""
    from lab.runtime import demo

    device = torch.device("cuda", 0)
    with torch.random.fork_rng(devices=[device]):
        saved = {name: state.clone() for name, state in demo.rng_state(device).items()}
        torch.rand(3)  # both streams move on
        torch.rand(3, device=device)
        on_gpu = {0: {name: state.to(device) for name, state in saved.items()}}
        demo.restore_rng(on_gpu, 1, rank=0, world_size=1, seed=0, step=5, device=device)
        assert torch.equal(torch.get_rng_state(), saved["torch"])
        assert torch.equal(torch.cuda.get_rng_state(device), saved["cuda"])
