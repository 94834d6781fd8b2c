"""Helpers every benchmark shares: thread setup, the machine header, writing results."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def set_threads(num_threads: int = 2) -> None:
    """Pin torch (and BLAS) to ``num_threads`` so figures compare across machines."""
    import torch

    torch.set_num_threads(num_threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))


def machine_header() -> dict:
    """Library versions and machine facts written beside every figure."""
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def write_result(name: str, payload: dict) -> Path:
    """Write ``payload`` (plus the machine header) to benchmarks/results/NAME.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine_header(), **payload}, indent=2))
    return path
