"""What a lab's answer must not use, read from its code before its runs are judged (lessons 18-20).

A replay checks what a learner's class did, not who wrote it: a class that hands every call to the
engine's own KVCacheManager, LRUEviction or FCFSPolicy would replay perfectly. ``lab_shortcut`` reads
the code of a submission (every cell the sandbox runs) for the engine's own implementations (each lab's
spec names its own: ``LabSpec.engine_own``), the grader's own code (every module of kvcourse.labs but
those a learner uses), the reference solutions and the usual ways round such a reading, and names the
first it finds. It reads the
code as written, not what it computes: a name built at run time gets past it (INSTRUCTORS.md,
"Grading the labs"), and is then judged on what the class did.
"""

from __future__ import annotations

import ast
import pkgutil
import re

import kvcourse.labs
from kvcourse.labs.spec import LABS

# What a lab's answer must not use: the engine's own implementation of any lab's part, the grader's own code,
# and the usual ways round a reading of the code. Names are matched as code: a comment never counts.
_ENGINE = tuple(dict.fromkeys(name for lab in LABS.values() for name in lab.engine_own))
# ``judge`` and ``record`` themselves are left out: helpers of those names are common, and the labs' own are
# reached only through a module of kvcourse.labs (below) or run where they decide nothing, in the sandbox.
_GRADER = ("record_runs", "judge_runs")  # and every Recording* and Replay* class
_AROUND = ("__import__", "importlib")
# kvcourse.labs' modules that a learner uses: the package itself (check, the bases), the specs, the traces, the
# notebook helpers. Every other one is the grader's own: the runs, the replays, the judges.
_LEARNER_MODULES = ("spec", "traces", "notebook")
_LAB_INTERNALS = tuple(
    sorted(
        module.name for module in pkgutil.iter_modules(kvcourse.labs.__path__) if module.name not in _LEARNER_MODULES
    )
)
_MODULES = {
    "kvcourse.kernels.memory": "the engine's own memory code (kvcourse.kernels.memory)",
    "kvcourse.kernels.engine": "the engine's own scheduling code (kvcourse.kernels.engine)",
    **{f"kvcourse.labs.{name}": f"the grader's own code (kvcourse.labs.{name})" for name in _LAB_INTERNALS},
    "kvcourse.quizzes": "the course's reference solutions (kvcourse.quizzes)",
    "importlib": "importlib, a way round this check",
    "sys.modules": "sys.modules, a way round this check",
}
CELL_BREAK = "\n# -- next cell --\n"  # how autograde joins a submission's code cells for lab_shortcut


def _named(name: str) -> str | None:
    if name in _ENGINE:
        return f"the engine's own {name}"
    if name in _GRADER or name.startswith(("Replay", "Recording")):
        return f"the grader's own {name}"
    if name in _AROUND:
        return f"{name}, a way round this check"
    return None


def _module(path: str) -> str | None:
    """Why a dotted path ("kvcourse.kernels.memory.block_pool") is off limits, or None."""
    return next((why for prefix, why in _MODULES.items() if path == prefix or path.startswith(prefix + ".")), None)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _shortcut_in(tree: ast.AST) -> str | None:
    for node in ast.walk(tree):
        found = None
        if isinstance(node, ast.Import):
            found = next((why for alias in node.names if (why := _module(alias.name))), None)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            found = _module(module) or next(
                (why for alias in node.names if (why := _named(alias.name) or _module(f"{module}.{alias.name}"))), None
            )
        elif isinstance(node, ast.Name):
            found = _named(node.id)
        elif isinstance(node, ast.Attribute):
            found = _named(node.attr) or _module(_dotted(node))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 10_000:
            text = node.value.strip()  # getattr(module, "KVCacheManager"), import_module("kvcourse.labs.run")
            found = _named(text) or next(
                (why for prefix, why in _MODULES.items() if "." in prefix and prefix in text), None
            )
        if found:
            return found
    return None


def lab_shortcut(source: str) -> str | None:
    """What in a lab's code (cells joined by CELL_BREAK) uses the engine's own implementation or the grader's
    own code, in words ("the engine's own KVCacheManager"), or None."""
    from IPython.core.inputtransformer2 import TransformerManager

    for cell in source.split(CELL_BREAK):
        try:
            tree = ast.parse(TransformerManager().transform_cell(cell))  # %magics and !commands as calls
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # unparseable: read as plain words
            code = "\n".join(line.split("#", 1)[0] for line in cell.splitlines())
            found = next(
                (why for word in sorted(set(re.findall(r"[A-Za-z_]\w*", code))) if (why := _named(word))), None
            ) or next((why for prefix, why in _MODULES.items() if prefix in code), None)
        else:
            found = _shortcut_in(tree)
        if found:
            return found
    return None
