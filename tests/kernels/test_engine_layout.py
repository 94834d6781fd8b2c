"""The engine's layout stays readable (issue 18): small files, one thread policy, imports one way."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

KERNELS = REPO_ROOT / "kernels"
LAYERS = ["model", "attention", "memory", "engine"]  # each may import only the layers before it
FILES = sorted(KERNELS.rglob("*.py"))


def _imported_modules(path: Path) -> set[str]:
    """Modules imported at run time (imports under ``if TYPE_CHECKING:`` are for type hints only)."""
    tree = ast.parse(path.read_text())
    hints = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(KERNELS)))
def test_no_kernels_file_is_over_300_lines(path):
    assert len(path.read_text().splitlines()) <= 300


def test_only_the_thread_policy_sets_torch_threads():
    setters = [p.relative_to(KERNELS) for p in FILES if "torch.set_num_threads" in p.read_text()]
    assert setters == [Path("engine/threads.py")]
    # the in-place kernel's numba threads follow torch's count for the step, set in one place and nowhere else
    assert [p.relative_to(KERNELS) for p in FILES if "numba.set_num_threads" in p.read_text()] == [
        Path("attention/cpu_paged.py")
    ]
    assert "torch.get_num_threads()" in (KERNELS / "attention/cpu_paged.py").read_text()


@pytest.mark.parametrize("layer", LAYERS + ["baselines"])
def test_each_layer_opens_with_a_docstring_naming_its_lessons(layer):
    doc = ast.get_docstring(ast.parse((KERNELS / layer / "__init__.py").read_text()))
    assert doc and "lesson" in doc


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_run_one_way(layer):
    later = LAYERS[LAYERS.index(layer) + 1 :] + ["baselines"]
    for path in (KERNELS / layer).rglob("*.py"):  # backends/ in attention/ too
        wrong = {m for m in _imported_modules(path) if any(m.startswith(f"kvcourse.kernels.{up}") for up in later)}
        assert not wrong, (
            f"{path.relative_to(KERNELS)} imports {sorted(wrong)} (imports run engine -> memory -> attention -> model)"
        )


def test_importing_the_engine_changes_no_global_state():
    """No import-time side effects: the cache table is fixed, torch's threads stay, no probe runs (issue 26)."""
    import subprocess
    import sys

    script = """
import importlib, torch
threads = torch.get_num_threads()
import kvcourse.kernels as k
from kvcourse.kernels.model import products
modes = dict(k.CACHE_MODES)
importlib.reload(k)
expected = {"none", "contiguous", "int8", "fp8", "kivi2", "sliding", "local_global", "paged"}
assert dict(k.CACHE_MODES).keys() == modes.keys() == expected, modes
assert torch.get_num_threads() == threads
assert products.onednn_bf16_linear.cache_info().currsize == 0, "the oneDNN probe ran at import"
assert products._measured.cache_info().currsize == 0, "a product was timed at import"
try:
    k.CACHE_MODES["mine"] = None
except TypeError:
    print("read-only")
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "read-only"


def test_the_public_surface():
    """What lessons and tests import comes from kvcourse.kernels; the mutable registry is gone (issue 26)."""
    import kvcourse.kernels as k

    assert {"RequestOutput", "RequestStatus", "FinishReason", "CACHE_MODES"} <= set(k.__all__)
    assert not {"CACHE_BACKENDS", "register_cache"} & set(k.__all__)
    assert all(hasattr(k, name) for name in k.__all__)
    lessons = REPO_ROOT / "lessons"
    imported = set()
    for nb in lessons.glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for node in ast.walk(ast.parse("".join(cell["source"]))):
                    if isinstance(node, ast.ImportFrom) and node.module == "kvcourse.kernels":
                        imported |= {alias.name for alias in node.names}
    assert imported and imported <= set(k.__all__), sorted(imported - set(k.__all__))
