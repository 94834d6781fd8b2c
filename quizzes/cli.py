"""The `kvcourse progress` subcommand (lesson 00); the instructor's `kvcourse grade ...` is grading/cli.py."""

from __future__ import annotations

import argparse


def _progress(args: argparse.Namespace) -> int:
    from .progress import format_progress

    print(format_progress())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `progress` to the kvcourse command line."""
    p = sub.add_parser("progress", help="print your quick-check progress, per lesson")
    p.set_defaults(func=_progress)
