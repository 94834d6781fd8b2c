"""The environment check shown by lesson 00 and by `kvcourse doctor`."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass

# (distribution name, import name, why the course needs it)
PACKAGES: tuple[tuple[str, str, str], ...] = (
    ("torch", "torch", "tensors and the engine"),
    ("transformers", "transformers", "the reference model"),
    ("gguf", "gguf", "reading the packaged model file"),
    ("accelerate", "accelerate", "loading weights"),
    ("safetensors", "safetensors", "the converted weight cache"),
    ("numpy", "numpy", "arrays"),
    ("matplotlib", "matplotlib", "plots"),
    ("ipywidgets", "ipywidgets", "simulators and quick checks"),
    ("jupyterlab", "jupyterlab", "the course in a browser"),
    ("nbgrader", "nbgrader", "grading for instructors"),
    ("nbclient", "nbclient", "running notebooks in tests"),
)


@dataclass(frozen=True)
class Check:
    """One line of the environment report."""

    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"[{'OK' if self.ok else 'FAIL'}]{' ' if self.ok else ''} {self.name:<14} {self.detail}"


def check_packages() -> list[Check]:
    """One check per package the course imports."""
    checks = []
    for dist, module, why in PACKAGES:
        if importlib.util.find_spec(module) is None:
            checks.append(Check(dist, False, f"not installed (needed for {why}); run `make lab` or `make test`"))
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
        checks.append(Check(dist, True, version))
    return checks


def check_device() -> Check:
    """Which device the course will use, and why."""
    from kvcourse.models import ModelNotAvailableError, resolve_device

    try:
        device = resolve_device("auto")
    except ModelNotAvailableError as err:
        return Check("device", False, str(err))
    if device.type == "cuda":
        import torch

        return Check("device", True, f"cuda ({torch.cuda.get_device_name(device)})")
    return Check("device", True, f"{device.type} (set KVCOURSE_DEVICE to override)")


def check_model() -> Check:
    """Whether the default model file is installed, and whether its converted cache is ready."""
    from kvcourse.models import CACHE_ENTRY, ModelNotAvailableError, cache_dir, cache_is_valid, find_gguf

    try:
        gguf = find_gguf()
    except ModelNotAvailableError as err:
        return Check("model", False, str(err))
    entry = cache_dir() / CACHE_ENTRY
    state = "converted cache ready" if cache_is_valid(entry) else "first load will convert it (~20 s)"
    return Check("model", True, f"SmolLM2-135M-Instruct found ({gguf.name}); {state} in {entry.parent}")


def environment_report() -> list[Check]:
    """Every check: packages, device, model."""
    return [*check_packages(), check_device(), check_model()]


def format_report(checks: list[Check]) -> str:
    """The report as text, with a closing verdict line."""
    failed = [c.name for c in checks if not c.ok]
    verdict = "All checks passed." if not failed else f"{len(failed)} check(s) failed: {', '.join(failed)}."
    return "\n".join([*(str(c) for c in checks), verdict])
