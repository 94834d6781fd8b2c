"""The scripts the book and the slides serve themselves, copied from their npm packages (no CDN at view time).

`make site`, `make slides` and `make test` install the packages into .venv/web (the Makefile's WEB_ASSETS);
KVCOURSE_WEB_ASSETS names another node_modules folder. Only what a page loads is copied: MathJax's
combined TeX component and its fonts, and reveal.js's scripts, styles and plugins.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kvcourse.syllabus import REPO_ROOT

# MathJax 3's combined TeX-to-HTML component with every TeX extension inside (nothing loaded on demand),
# and the web fonts it loads relative to itself.
MATHJAX_FILES = ("es5/tex-chtml-full.js", "es5/output/chtml/fonts/woff-v2")
REVEAL_FILES = ("dist", "plugin")


def node_modules() -> Path:
    """Where the npm packages lie: KVCOURSE_WEB_ASSETS, else .venv/web/node_modules."""
    return Path(os.environ.get("KVCOURSE_WEB_ASSETS") or REPO_ROOT / ".venv" / "web" / "node_modules")


def _package(name: str, needed_by: str) -> Path:
    folder = node_modules() / name
    if not (folder / "package.json").is_file():
        raise FileNotFoundError(
            f"{needed_by} serves {name} itself (no CDN), but it is not installed in {folder.parent}: "
            "run `make site` or `make slides`, which install it with npm (apt-get install -y nodejs npm "
            "where npm is missing), or set KVCOURSE_WEB_ASSETS to a node_modules folder that has it"
        )
    return folder


def _copy(package: Path, parts: tuple[str, ...], target: Path) -> None:
    for part in parts:
        source, dest = package / part, target / part
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(source, dest)


def copy_mathjax(target: Path, needed_by: str = "the book") -> str:
    """MathJax copied under ``target``; the path of its script, relative to ``target``."""
    _copy(_package("mathjax", needed_by), MATHJAX_FILES, target)
    return MATHJAX_FILES[0]


def copy_reveal(target: Path, needed_by: str = "the slides") -> None:
    """reveal.js (dist/ and plugin/) copied under ``target``."""
    _copy(_package("reveal.js", needed_by), REVEAL_FILES, target)
