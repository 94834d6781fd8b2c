"""The environment check shown by lesson 00 and by `kvcourse doctor`."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

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


def check_dtype(cpuinfo: str | None = None) -> Check:
    """Which dtype the model will run in ($KVCOURSE_DTYPE or the device's default), and what bf16 costs here."""
    import torch

    from kvcourse.models import (
        DTYPE_ENV,
        DTYPE_NAMES,
        ModelNotAvailableError,
        cpu_has_native_bf16,
        dtype_name,
        resolve_device,
        resolve_dtype,
    )

    try:
        device = resolve_device("auto")
    except ModelNotAvailableError:
        device = torch.device("cpu")  # the device line reports that problem
    try:
        dtype = resolve_dtype(None, device)
    except ValueError as err:
        return Check("dtype", False, str(err))
    if os.environ.get(DTYPE_ENV, "").strip():
        detail = f"{dtype_name(dtype)} (from {DTYPE_ENV})"
    else:
        detail = f"{dtype_name(dtype)} (default on {device.type}; set {DTYPE_ENV}={'|'.join(DTYPE_NAMES)} to choose)"
    if device.type == "cpu":
        detail += "; " + cpu_dtype_note(dtype, cpu_has_native_bf16(cpuinfo))
    return Check("dtype", True, detail)


def cpu_dtype_note(dtype: torch.dtype, native_bf16: bool | None) -> str:
    """What running in ``dtype`` means on this CPU: its bf16 flags (read from /proc/cpuinfo) and, for a
    16-bit dtype, its products' speed against float32's, measured now (kernels/model/products.py)."""
    import torch

    from kvcourse.kernels.model.products import relative_speed

    flags = "avx512_bf16 or amx_bf16" if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86") else "bf16"
    has = {
        True: f"this CPU has bf16 instructions ({flags})",
        False: f"this CPU has no {flags} flag",
        None: "could not read /proc/cpuinfo for bf16 instructions",
    }[native_bf16]
    if dtype == torch.float32:
        return (
            f"{has}; float32 stays the CPU default (exact, every lesson's numbers as printed); bfloat16 "
            "halves the weights' bytes, and with it set this line measures its speed here"
        )
    timed = [f"{ratio:.2f}x for {rows}" for rows, ratio in relative_speed(dtype).items()]
    timed[0] = timed[0].replace("x for", "x float32's time for")
    return (
        f"{has}; measured now, {str(dtype).removeprefix('torch.')}'s fastest matrix product here takes "
        f"{', '.join(timed)} (a 1536x576 weight)"
    )


def check_fast_paths() -> list[Check]:
    """One line per CPU fast path: on or off for the course's device and dtype, and why (kernels/model/cpu_fast.py)."""
    import torch

    from kvcourse.kernels.attention.cpu_paged import paged_decode_path
    from kvcourse.kernels.model.config_table import MODEL_CONFIGS
    from kvcourse.kernels.model.cpu_fast import FAST_PATHS_ENV, ModelShapes, fast_path_report
    from kvcourse.kernels.model.transformer import Transformer
    from kvcourse.models import ModelNotAvailableError, dtype_name, resolve_device, resolve_dtype

    try:
        device = resolve_device("auto")
        dtype = resolve_dtype(None, device)
        with torch.device("meta"):  # the course model's weight shapes, with no weights
            shapes = ModelShapes.of(Transformer(MODEL_CONFIGS["smollm2-135m"]))
        report = fast_path_report(dtype, device, "auto", shapes)
    except (ModelNotAvailableError, ValueError) as err:  # the device or dtype line reports a bad setting
        return [Check("fast paths", False, str(err))]
    switch = (
        f"{FAST_PATHS_ENV}=0 runs the textbook forms instead"
        if any(p.on for p in report)
        else f"unset {FAST_PATHS_ENV} for the fast paths"
    )
    return [
        Check("fast paths", True, f"for {dtype_name(dtype)} on {device.type}; {switch}"),
        *(Check("", True, str(path)) for path in (*report, paged_decode_path(dtype, device))),
    ]


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
    """Every check: packages, device, dtype, the CPU fast paths, model."""
    return [*check_packages(), check_device(), check_dtype(), *check_fast_paths(), check_model()]


def format_report(checks: list[Check]) -> str:
    """The report as text, with a closing verdict line."""
    failed = [c.name for c in checks if not c.ok]
    verdict = "All checks passed." if not failed else f"{len(failed)} check(s) failed: {', '.join(failed)}."
    return "\n".join([*(str(c) for c in checks), verdict])
