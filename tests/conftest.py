"""Shared fixtures: offline, two threads; the tiny model, the real model and SmolLM2 converted, each made once.

Every test module can ask for these by name (no import): `tiny_hf`, `tiny_model`, `tiny_model_each_path`
(the module's tests run on the fast paths and on the textbook model), `real_model`, `smol_model`,
`one_cpu_thread` (with `pytestmark = pytest.mark.usefixtures("one_cpu_thread")`) and `fast_paths_on`.
Tiny models of other shapes come from `factories.make_tiny_model(**overrides)`.
"""

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
    # The site is built from the notebooks tests/lessons/test_notebooks.py has just executed (its cache):
    # collected after them, it reuses them instead of running every lesson a second time.
    items.sort(key=lambda item: item.path.name == "test_site.py")  # stable: the rest keep their order
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


@pytest.fixture(scope="session")
def smol_model(real_model):
    """SmolLM2 converted to our Transformer once per session, fast paths chosen as the lessons choose them."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(real_model[0]).accelerate()


@pytest.fixture(scope="module")
def tiny_hf():
    """The tiny random Hugging Face Llama of factories.make_tiny_hf_llama() (seeded: the same weights everywhere)."""
    from factories import make_tiny_hf_llama

    return make_tiny_hf_llama()


@pytest.fixture(scope="module")
def tiny_model(tiny_hf):
    """Our Transformer converted from ``tiny_hf``: the textbook model."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(tiny_hf)


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def tiny_model_each_path(tiny_hf, request):
    """``tiny_model`` with the fast paths on, then off: the module's tests run on both."""
    from kvcourse.kernels import Transformer

    return Transformer.from_hf(tiny_hf).accelerate(request.param)


@pytest.fixture(scope="module")
def one_cpu_thread():
    """Tiny models run fastest on one thread (parallel regions cost more than they save on a busy CPU).

    A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_cpu_thread")``; it uses the
    engine's thread policy and restores torch's thread count after the module.
    """
    from kvcourse.kernels.engine.threads import thread_policy

    with thread_policy(1):
        yield


@pytest.fixture
def fast_paths_on(monkeypatch):
    """For the tests of the fast paths themselves: a KVCOURSE_FAST_PATHS=0 run of the suite must not
    turn off what they test (every other test then runs the textbook model)."""
    monkeypatch.delenv("KVCOURSE_FAST_PATHS", raising=False)
