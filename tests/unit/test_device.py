"""course_lib.device: cuda > mps > cpu, and the COURSE_DEVICE override."""

import pytest
import torch

from course_lib import device as dev


def test_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dev.pick_device().type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dev, "_mps_available", lambda: True)
    assert dev.pick_device().type == "mps"
    monkeypatch.setattr(dev, "_mps_available", lambda: False)
    assert dev.pick_device() == torch.device("cpu")


def test_override_wins(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert dev.pick_device() == torch.device("cpu")


def test_bad_override_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "tpu")
    with pytest.raises(ValueError, match="not one of"):
        dev.pick_device()
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="is_available"):
        dev.pick_device()


def test_device_report_names_versions(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    report = dev.device_report()
    assert report["torch"] == torch.__version__
    assert report["device"] == "cpu"
