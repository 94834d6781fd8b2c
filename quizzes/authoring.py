"""For bank authors: open a sealed bank file to edit it, and seal it again (lesson 00).

    python -m kvcourse.quizzes.authoring unseal 07 > /tmp/07.toml   # plain [question.secret] tables
    python -m kvcourse.quizzes.authoring seal /tmp/07.toml quizzes/bank/07.toml

Keep the plain file outside the repository: the shipped bank holds sealed questions only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from .bank import bank_text, parse_quiz
from .sealing import seal, unseal

_ORDER = (
    "id",
    "kind",
    "points",
    "prompt",
    "options",
    "unit",
    "rel_tol",
    "abs_tol",
    "formula",
    "params",
    "function",
    "starter",
    "cases",
    "min_chars",
)


def _value(value: object) -> str:
    if isinstance(value, str) and "\n" in value and "'''" not in value:
        return "'''\n" + value + "'''"  # TOML drops the newline right after the opening quotes
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a JSON string or number is a TOML one too


def dump(data: dict) -> str:
    """A bank file's data as TOML text (questions keep their field order)."""
    lines = [f"lesson = {_value(data['lesson'])}"]
    for entry in data["question"]:
        lines += ["", "[[question]]"]
        keys = [k for k in _ORDER if k in entry] + [k for k in entry if k not in _ORDER]
        for key in keys:
            if key != "secret":
                lines.append(f"{key} = {_value(entry[key])}")
        if "secret" in entry:
            lines.append("[question.secret]")
            lines += [f"{key} = {_value(value)}" for key, value in entry["secret"].items()]
    return "\n".join(lines) + "\n"


def seal_text(text: str, source: str = "<plain bank>") -> str:
    """The same bank with every [question.secret] table sealed; validates it first."""
    parse_quiz(text, source)
    data = tomllib.loads(text)
    for entry in data["question"]:
        if "secret" in entry:
            entry["sealed"] = seal(entry.pop("secret"), data["lesson"], entry["id"])
    return dump(data)


def unseal_text(text: str) -> str:
    """The same bank with every sealed string opened into a plain [question.secret] table."""
    data = tomllib.loads(text)
    for entry in data["question"]:
        if "sealed" in entry:
            entry["secret"] = unseal(entry.pop("sealed"), data["lesson"], entry["id"])
    return dump(data)


def main(argv: list[str] | None = None) -> int:
    """Command line: seal SRC DEST, or unseal NN."""
    parser = argparse.ArgumentParser(prog="python -m kvcourse.quizzes.authoring")
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("seal", help="seal a plain bank file")
    p.add_argument("src", type=Path)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("unseal", help="print a lesson's bank with its secrets opened")
    p.add_argument("lesson")
    args = parser.parse_args(argv)
    if args.action == "seal":
        args.dest.write_text(seal_text(args.src.read_text(encoding="utf-8"), str(args.src)), encoding="utf-8")
    else:
        sys.stdout.write(unseal_text(bank_text(args.lesson)[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
