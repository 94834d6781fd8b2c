"""The use_cache timing lab: time generation with and without the KV cache (lesson 17).

config.py names the backends and a sweep's settings; sweep.py runs the sweep; runners.py holds the
backends it times; predict.py predicts the times before they are measured; report.py shows a sweep as
a header, a table, JSON and a plot; verdicts.py says in words what a sweep showed; cli.py registers
`kvcourse timing-lab`.

Every name the module `kvcourse.timing_lab` offered before it was a folder (sweep.py), and every
name lesson 17 imports, is importable from here. They load on first use, so that building the
`kvcourse` parser (cli.py) imports no PyTorch.
"""

from __future__ import annotations

import importlib
from typing import Any

_CONFIG = (
    "DEFAULT_LENGTHS",
    "DEFAULT_PROMPT",
    "ENGINE_MODES",
    "HF_BACKENDS",
    "HF_CACHE",
    "HF_NO_CACHE",
    "Backend",
    "Runner",
    "SweepConfig",
    "engine_backend",
)
_SWEEP = ("Mismatch", "SweepResult", "Timing", "encode_prompt", "environment_header", "first_difference", "run_sweep")
_PREDICT = ("GenerationWork", "PassCostModel", "calibrate", "generation_work", "predict_sweep")
_REPORT = ("format_header", "format_table", "plot_sweep", "save_plot", "show_sweep", "write_json")
_VERDICTS = ("bend_verdict", "check_answers", "check_sweep_tokens", "cost_per_extra_token", "direction")
_MODULE_OF = {
    **dict.fromkeys(_CONFIG, "config"),
    **dict.fromkeys(_SWEEP, "sweep"),
    **dict.fromkeys(_PREDICT, "predict"),
    **dict.fromkeys(_REPORT, "report"),
    **dict.fromkeys(_VERDICTS, "verdicts"),
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """A re-exported name, imported from its module the first time it is asked for."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
