"""The `kvcourse` command line: one subcommand per feature, each folder registering its own (REGISTRARS)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kvcourse.hub.cli import add_hub
from kvcourse.quizzes.cli import register as add_progress
from kvcourse.quizzes.grading.cli import register as add_grade
from kvcourse.site.cli import add_site
from kvcourse.site.present import add_present
from kvcourse.site.slides import add_slides
from kvcourse.timing_lab.cli import add_timing_lab


def _syllabus(args: argparse.Namespace) -> int:
    from kvcourse.syllabus import format_syllabus

    print(format_syllabus())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from kvcourse.doctor import environment_report, format_report

    checks = environment_report()
    print(format_report(checks))
    return 0 if all(c.ok for c in checks) else 1


def _lab(args: argparse.Namespace) -> int:
    from kvcourse.lab import open_lab

    if args.course and not args.instructor:
        raise ValueError("--course names an nbgrader course for the instructor's lab: add --instructor")
    extra = [f"--ServerApp.port={args.port}"] if args.port else []
    if args.no_browser:
        extra.append("--no-browser")
    if args.token is not None:
        extra.append(f"--IdentityProvider.token={args.token}")
    extra += [a for a in args.jupyter_args if a != "--"]
    open_lab(extra, instructor=args.instructor, course=args.course)
    return 0  # not reached: open_lab replaces the process


def _add_core(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("syllabus", help="print the course map")
    p.set_defaults(func=_syllabus)
    p = sub.add_parser("doctor", help="check packages, device and model")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("lab", help="open the course in JupyterLab (what `make lab` runs)")
    p.add_argument(
        "--instructor",
        action="store_true",
        help="the instructor's lab on an nbgrader course: formgrader, Create Assignment (quizzes/INSTRUCTORS.md)",
    )
    p.add_argument(
        "--course",
        default=None,
        help="with --instructor: the course folder from `kvcourse grade init` (default: the current one)",
    )
    p.add_argument("--port", type=int, default=None, help="port to serve on (default: Jupyter's)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--token", default=None, help="access token ('' for none; default: a random one)")
    p.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="after --, passed on to `jupyter lab` unchanged")
    p.set_defaults(func=_lab)


# Each entry adds its subcommands to the parser: the core commands above, then each feature folder's own
# register function (its cli.py); issues that add a subcommand add a line here.
REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_core,
    add_timing_lab,
    add_progress,
    add_grade,
    add_site,
    add_slides,
    add_present,
    add_hub,
]


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="kvcourse", description="The KV-cache course.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in REGISTRARS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `kvcourse` script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, KeyError, OSError) as err:
        print(f"kvcourse {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
