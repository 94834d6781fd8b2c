"""Show a timing sweep: header, table, JSON and plot (lesson 17)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvcourse.timing_lab.sweep import HF_CACHE, HF_NO_CACHE, SweepResult
from kvcourse.timing_lab.verdicts import speedup_trend


def format_header(result: SweepResult) -> str:
    """Two lines naming model, device, dtype, threads and versions, so results can be compared."""
    h = result.header
    n = h["num_parameters"]
    params = f"{n / 1e6:.1f}M params" if n >= 1e6 else f"{n:,} params"
    return (
        f"model {h['model']} ({h['model_class']}, {params}) | device {h['device']} "
        f"({h['device_name']}) | {h['dtype']} | {h['threads']} threads\n"
        f"torch {h['torch']} | transformers {h['transformers']} | kvcourse {h['kvcourse']} | "
        f"prompt {h['prompt']!r} ({h['prompt_tokens']} tokens) | {_plural(h['repeats'], 'repeat')} "
        f"after {_plural(h['warmup'], 'warm-up')}"
    )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def engine_speedup_pair(result: SweepResult) -> tuple[str, str] | None:
    """(slow, fast) engine backends whose ratio is the engine's own cache speedup, if both ran."""
    names = [b.name for b in result.backends]
    fast = next((n for n in ("engine-contiguous", "engine-paged") if n in names), None)
    return ("engine-none", fast) if "engine-none" in names and fast else None


def format_table(result: SweepResult) -> str:
    """One row per completed length: time with and without the cache, speedup, tokens per second."""
    columns = ["new tokens", "with cache (s)", "without cache (s)", "speedup", "tok/s with", "tok/s without"]
    engines = [b for b in result.backends if b.engine_cache is not None]
    columns += [f"engine {b.engine_cache} (s)" for b in engines]
    pair = engine_speedup_pair(result)
    if pair:
        columns.append("engine speedup")
    rows = []
    for n in result.completed_lengths:
        t = result.timings[n]
        row = [
            str(n),
            _seconds(t[HF_CACHE]),
            _seconds(t[HF_NO_CACHE]),
            f"{result.speedup(n):.2f}x",
            f"{t[HF_CACHE].tokens_per_second:.1f}",
            f"{t[HF_NO_CACHE].tokens_per_second:.1f}",
        ]
        row += [_seconds(t[b.name]) for b in engines]
        if pair:
            row.append(f"{result.speedup(n, *pair):.2f}x")
        rows.append(row)
    if not rows:
        return "(no length finished every repeat: nothing to tabulate)"
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [" | ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(
        f"times: median over {_plural(result.config.num_repeats, 'repeat')}, ± half the range (max - min); "
        "speedup = time without cache / time with cache (Hugging Face generate)"
    )
    if pair:
        lines.append(f"engine speedup = {pair[0]} time / {pair[1]} time (kvcourse.kernels.generate)")
    return "\n".join(lines)


def _seconds(timing) -> str:
    return f"{timing.median:.3f} ±{timing.spread / 2:.3f}"


def write_json(result: SweepResult, path: str | Path) -> Path:
    """Write the raw figures atomically (a half-written file never replaces a good one)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result.to_json(), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def plot_sweep(result: SweepResult, predictions: dict[str, list[float]] | None = None, fig=None):
    """A figure: time vs output length for every backend, and the cache's speedup vs length.

    ``predictions`` maps a backend name to predicted seconds at each completed length; they
    are drawn dotted beside the measurement. ``fig``: an empty figure to draw into (in a
    notebook, ``plt.figure(figsize=(12, 4.8), layout="constrained")`` so it is shown); None
    makes a standalone one, which needs no GUI and is freed when dropped.
    """
    from matplotlib.figure import Figure

    lengths = result.completed_lengths
    if fig is None:
        fig = Figure(figsize=(12, 4.8), layout="constrained")
    ax_time, ax_speed = fig.subplots(1, 2)
    styles = {HF_CACHE: ("tab:blue", "o", "-"), HF_NO_CACHE: ("tab:red", "s", "-")}
    engine_colors = iter(["tab:green", "tab:purple", "tab:orange", "tab:brown"])
    for b in result.backends:
        color, marker, line = styles.get(b.name) or (next(engine_colors), "^", "--")
        ts = [result.timings[n][b.name] for n in lengths]
        medians = [t.median for t in ts]
        errors = [[t.median - min(t.seconds) for t in ts], [max(t.seconds) - t.median for t in ts]]
        ax_time.errorbar(
            lengths, medians, yerr=errors, color=color, marker=marker, linestyle=line, capsize=3, label=b.label
        )
        if predictions and b.name in predictions:
            ax_time.plot(
                lengths,
                predictions[b.name],
                color=color,
                linestyle=":",
                linewidth=2,
                label=f"predicted: {b.label.split(',')[-1].strip()}",
            )
    ax_time.set_ylabel("time per generate() call (seconds)")
    longest = lengths[-1]
    slowest = result.timings[longest][HF_NO_CACHE].median if HF_NO_CACHE in result.timings[longest] else None
    fastest = result.timings[longest][HF_CACHE].median if HF_CACHE in result.timings[longest] else None
    if slowest and fastest:
        ax_time.set_title(f"at {longest} tokens: {slowest:.1f} s without the cache, {fastest:.1f} s with it")
    else:
        ax_time.set_title("time per generate() call against output length")
    _linear_lengths(ax_time, lengths)  # on a linear axis, time in proportion to length is a straight line
    ax_time.set_ylim(bottom=0)
    ax_time.grid(alpha=0.3)
    handles, labels = ax_time.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("predicted"))  # measured first
    ax_time.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, loc="upper left")

    _plot_speedup(ax_speed, result, lengths)
    h = result.header
    note = " (interrupted: completed lengths only)" if result.interrupted else ""
    fig.suptitle(
        f"KV cache on vs off: {h['model']}, {h['device']}, {h['dtype']}, {h['threads']} threads, "
        f"prompt {h['prompt_tokens']} tokens, median of {h['repeats']}{note}"
    )
    return fig


def _plot_speedup(ax, result: SweepResult, lengths: list[int]) -> None:
    speedups = [result.speedup(n) for n in lengths]
    ax.plot(lengths, speedups, color="tab:blue", marker="o", label="Hugging Face: no cache / cache")
    for n, s in zip(lengths, speedups, strict=True):
        ax.annotate(f"{s:.1f}x", (n, s), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=9)
    pair = engine_speedup_pair(result)
    if pair:
        ax.plot(
            lengths,
            [result.speedup(n, *pair) for n in lengths],
            color="tab:green",
            marker="^",
            linestyle="--",
            label=f"course engine: none / {pair[1].removeprefix('engine-')}",
        )
    ax.axhline(1.0, color="gray", linestyle=":", label="1x = the cache gains nothing")
    ax.set_ylabel("speedup (time without cache / time with cache)")
    ax.set_title(f"the cache's speedup {speedup_trend(speedups)}")  # each point's value is written beside it
    _log2_lengths(ax, lengths)
    ax.set_ylim(bottom=0, top=max([*speedups, 1.0]) * 1.2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")


def _linear_lengths(ax, lengths: list[int]) -> None:
    """Time against length on a linear axis: a straight line is linear growth, a bend is faster growth."""
    ax.set_xlim(0, lengths[-1] * 1.05)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("output length (new tokens generated)")


def _log2_lengths(ax, lengths: list[int]) -> None:
    """Output lengths usually double from one point to the next: a log axis spaces them evenly."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("output length (new tokens generated, log scale)")


def show_sweep(result: SweepResult, predictions: dict[str, list[float]] | None = None):
    """``plot_sweep`` drawn into a pyplot figure, so a notebook shows it below the cell (lesson 17)."""
    import matplotlib.pyplot as plt

    return plot_sweep(result, predictions, fig=plt.figure(figsize=(12, 4.8), layout="constrained"))


def save_plot(result: SweepResult, path: str | Path, predictions: dict[str, list[float]] | None = None) -> Path:
    """Save ``plot_sweep`` as a PNG."""
    path = Path(path)
    plot_sweep(result, predictions).savefig(path, dpi=120)
    return path
