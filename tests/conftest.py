"""Test set-up: the repo root on sys.path (tests never depend on the working directory), and
the GPUs hidden from every test not marked `cuda`."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _gpus_only_for_cuda_tests(request, monkeypatch):
    """The default suite runs as on a machine without a GPU wherever it runs: a run started
    by a test (in this process or a child) sees no CUDA device unless the test is marked
    `cuda`. Without this, on a GPU machine the same test trained on CUDA, where
    `--mp_start_method=fork` is refused and a sweep's runs are bounded by the GPU slots.
    Tests of the GPU code paths on a CPU machine simulate the devices themselves."""
    if request.node.get_closest_marker("cuda") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
