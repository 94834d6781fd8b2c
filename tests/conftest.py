"""Shared fixtures: offline, two threads, the real model loaded once per session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from kvcourse.kernels.engine.threads import apply_thread_policy  # noqa: E402

# Two threads in one process; one per worker when pytest-xdist runs two workers (make test).
apply_thread_policy(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1))


def pytest_runtest_setup(item):
    """A test marked needs_tool(hint) with a hint is skipped, or failed under CI=true (tests/guards.py)."""
    from guards import missing

    for mark in item.iter_markers("needs_tool"):
        if mark.args[0] is not None:
            missing(mark.args[0])


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real_model():
    """(hf_model, tokenizer) for SmolLM2-135M-Instruct in float32 on the CPU."""
    from kvcourse.models import load_model

    return load_model("smollm2-135m", dtype=torch.float32, device="cpu")
