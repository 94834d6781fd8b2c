"""`kvcourse timing-lab`: the use_cache timing lab from the terminal (lesson 17)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# torch and transformers are imported when the command runs, not when `kvcourse` builds its parser.
DTYPES = ("float32", "bfloat16")
EXIT_TOKENS_DIFFER = 1
EXIT_INTERRUPTED = 130


def add_timing_lab(sub: argparse._SubParsersAction) -> None:
    """Register `kvcourse timing-lab` (what `make timing-lab` runs)."""
    p = sub.add_parser(
        "timing-lab",
        help="time generate() with and without the KV cache over output lengths (lesson 17)",
        description="Time Hugging Face generate(use_cache=True) against use_cache=False on one prompt for "
        "a sweep of output lengths, check both give the same tokens, print a table and "
        "optionally save the raw figures (--json) and a plot (--plot). Ctrl-C stops early "
        "and still reports the lengths that finished.",
    )
    p.add_argument(
        "--model",
        default="smollm2-135m",
        help="course model alias, Hugging Face id or local folder (default: smollm2-135m, offline)",
    )
    p.add_argument(
        "--lengths",
        nargs="+",
        default=None,
        metavar="N",
        help="output lengths in new tokens, spaces or commas (default: 16 32 64 128 256)",
    )
    p.add_argument("--repeats", default="3", metavar="R", help="timed runs per length and side (default 3)")
    p.add_argument("--warmup", default="1", metavar="W", help="untimed warm-up runs per side (default 1)")
    p.add_argument("--prompt", default=None, help="prompt text (default 'Once upon a time in a distant land')")
    p.add_argument(
        "--engine",
        action="store_true",
        help="also time the course's own engine (kvcourse.kernels.generate) in every cache mode",
    )
    p.add_argument("--threads", default=None, metavar="T", help="CPU threads for PyTorch (default: PyTorch's)")
    p.add_argument(
        "--dtype",
        default=None,
        metavar="|".join(DTYPES),
        help="weights dtype (default: $KVCOURSE_DTYPE, else float32 on a CPU, bfloat16 on CUDA)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default auto: CUDA if present)")
    p.add_argument("--json", default=None, metavar="PATH", help="write every repeat plus header metadata here")
    p.add_argument("--plot", default=None, metavar="PATH", help="save a PNG of time and speedup vs length")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run_timing_lab)


def run_timing_lab(args: argparse.Namespace) -> int:
    """Validate everything cheap first, then load, measure, report; exit 1 if tokens differ."""

    from kvcourse.kernels.engine.threads import apply_thread_policy
    from kvcourse.models import DTYPE_ENV, dtype_name, load_model, resolve_dtype
    from kvcourse.timing_lab.report import format_header, format_table, save_plot, write_json
    from kvcourse.timing_lab.runners import engine_cache_modes
    from kvcourse.timing_lab.sweep import (
        DEFAULT_LENGTHS,
        DEFAULT_PROMPT,
        SweepConfig,
        run_sweep,
    )

    lengths = DEFAULT_LENGTHS if args.lengths is None else parse_lengths(args.lengths)
    config = SweepConfig(
        lengths,
        _whole("--repeats", args.repeats),
        _whole("--warmup", args.warmup),
        DEFAULT_PROMPT if args.prompt is None else args.prompt,
    )
    threads = None if args.threads is None else _whole("--threads", args.threads)
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be at least 1, got {threads}")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {args.dtype!r}")
    dtype = args.dtype or dtype_name(resolve_dtype(None, args.device))  # KVCOURSE_DTYPE or the device's default
    if dtype not in DTYPES:
        raise ValueError(
            f"{DTYPE_ENV}={dtype}: the timing lab runs in {' or '.join(DTYPES)}; pass --dtype or change {DTYPE_ENV}"
        )
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None:
            check_output_path(flag, path)
    if args.plot is not None:
        check_plot_format(args.plot)
    apply_thread_policy(threads)  # once, at set-up; None leaves torch's setting
    engine_modes = engine_cache_modes() if args.engine else ()
    config = SweepConfig(config.lengths, config.num_repeats, config.num_warmup, config.prompt, engine_modes)

    print(f"loading {args.model} ({dtype}, device {args.device}) ...", file=sys.stderr)
    model, tokenizer = load_model(args.model, dtype=dtype, device=args.device)
    result = run_sweep(
        model,
        tokenizer,
        config.lengths,
        config.num_repeats,
        num_warmup=config.num_warmup,
        prompt=config.prompt,
        engine_modes=config.engine_modes,
        progress=not args.no_progress,
    )

    print(format_header(result))
    if result.interrupted:
        print(f"\ninterrupted: showing the {len(result.completed_lengths)} length(s) that finished")
    print(format_table(result))
    if args.json is not None:
        print(f"raw figures: {write_json(result, args.json)}")
    if args.plot is not None and result.completed_lengths:
        print(f"plot: {save_plot(result, args.plot)}")
    if not result.tokens_match:
        print(format_mismatches(result), file=sys.stderr)
        return EXIT_TOKENS_DIFFER
    return EXIT_INTERRUPTED if result.interrupted else 0


def format_mismatches(result) -> str:
    """A loud explanation of every run whose tokens differ from the cached run's."""
    lines = [
        "",
        "!" * 78,
        "TOKENS DIFFER: these runs did not generate the same tokens as use_cache=True,",
        "so their times are not a fair comparison:",
    ]
    lines += [f"  - {m.describe()}" for m in result.mismatches]
    if result.header["dtype"] != "float32":
        lines.append(
            f"In {result.header['dtype']}, cached and uncached arithmetic round differently and a "
            "near-tie can flip; try --dtype float32."
        )
    lines.append("!" * 78)
    return "\n".join(lines)


def parse_lengths(values: list[str]) -> tuple[int, ...]:
    """'16,32' '64' -> (16, 32, 64); anything that is not a positive whole number is an error."""
    lengths = []
    for value in values:
        for part in value.replace(",", " ").split():
            try:
                n = int(part)
            except ValueError:
                raise ValueError(f"--lengths: {part!r} is not a whole number of tokens") from None
            if n < 1:
                raise ValueError(f"--lengths: {n} is not a positive number of tokens")
            lengths.append(n)
    if not lengths:
        raise ValueError("--lengths: give at least one output length, e.g. --lengths 16 32 64")
    return tuple(lengths)


def _whole(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} must be a whole number, got {value!r}") from None


def check_output_path(flag: str, path: str) -> None:
    """Fail now, not after minutes of measuring, if ``path`` cannot be written."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ValueError(f"{flag}: {path} is a folder; give a file name")
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{flag}: cannot write {path}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise ValueError(f"{flag}: cannot write {path}: the folder {parent} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".kvcourse-write-test-"):
            pass
    except OSError as err:
        raise ValueError(f"{flag}: cannot write to the folder {parent} ({err.strerror or err})") from None
    if target.exists() and not os.access(target, os.W_OK):
        raise ValueError(f"{flag}: {path} exists and is not writable")


def check_plot_format(path: str) -> None:
    """The plot's file extension must be a format matplotlib can write (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = Path(path).suffix.lower().lstrip(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ValueError(
            f"--plot: {path!r} needs a picture extension such as .png (supported: {', '.join(sorted(formats))})"
        )
