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
