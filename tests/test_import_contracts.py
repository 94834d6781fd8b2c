"""Import contracts (issue 41): no cycles, the engine's layers kept, the learner never imports the grader.

The graph is read from the source with ``ast`` (tests/import_graph.py): every import that runs, at a
module's top or inside a function, between the repository's own modules (kvcourse as pyproject.toml maps
it onto course/, kernels/, quizzes/ and simulators/, plus benchmarks/), and the imports of the lessons'
code cells. A failure names each import statement that breaks a contract, with its file and line. The
tests at the end plant each kind of breach in a folder of fake modules and check that it is reported, so
a contract that passes here can fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from import_graph import (
    Import,
    cycles,
    layer_of,
    layer_violations,
    module_files,
    notebook_imports,
    package_dirs,
    reachable,
    repo_imports,
    strongly_connected,
)

ROOT = Path(__file__).resolve().parent.parent
FILES = module_files(ROOT, package_dirs(ROOT))
EDGES = repo_imports(ROOT, FILES)
NOTEBOOK_EDGES = [
    edge for path in sorted((ROOT / "lessons").glob("*.ipynb")) for edge in notebook_imports(ROOT, path, FILES)
]

# The engine, top to bottom: a module imports its own layer and the layers below it, never one above.
# engine -> memory -> attention -> model is the serving stack (kernels/__init__.py). Beside it: baselines/
# replays what paging replaced on the engine's own scheduler, so it sits above engine/; measure/ is what
# lessons measure on all of it (a trace served, the event log read back), so it sits above baselines/;
# costs (and weight_costs), cache_layout and workload are formulas and a request trace that every layer may use,
# over checks and cost_checks (argument checks). The package itself, kvcourse.kernels, re-exports every layer's
# public names: it is the top.
KERNEL_LAYERS = (
    ("kvcourse.kernels",),
    ("kvcourse.kernels.measure.*",),
    ("kvcourse.kernels.baselines.*",),
    ("kvcourse.kernels.engine.*",),
    ("kvcourse.kernels.memory.*",),
    ("kvcourse.kernels.attention.*",),
    ("kvcourse.kernels.model.*",),
    (
        "kvcourse.kernels.costs",
        "kvcourse.kernels.weight_costs",
        "kvcourse.kernels.cache_layout",
        "kvcourse.kernels.workload",
    ),
    ("kvcourse.kernels.checks", "kvcourse.kernels.cost_checks"),
)

# The grader's side: the instructor's pipeline, and the old import path kept for courses made before it moved.
GRADER = ("kvcourse.quizzes.grading", "kvcourse.quizzes.autograde")
# The learner's side: every lesson's code cells (NOTEBOOK_EDGES), the quick check a lesson ends with
# (kvcourse.quizzes: quick_check, check_answer, and the widget, bank and progress they load) and `kvcourse
# progress`; and kvcourse.labs, which a graded lab notebook's cells import (grading/nbgrader_export.py).
# The labs' reference solutions (kvcourse.quizzes.labs) are not the grader's: a self-learner's notebook shows
# them on request (kvcourse.labs.notebook.policy_or_reference, the quick check's "Show answer").
LEARNER_MODULES = ("kvcourse.quizzes", "kvcourse.quizzes.cli", "kvcourse.notebook", "kvcourse.labs")


def _is_grader(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in GRADER)


def _lines(edges: list[Import]) -> str:
    return "\n".join(f"  {edge}" for edge in edges)


def test_the_graph_is_read():
    """The graph holds what the contracts below are about, so an empty graph cannot pass them."""
    assert {
        "kvcourse.kernels.engine.llm_engine",
        "kvcourse.quizzes.grading.decide",
        "kvcourse.simulators.paging",
        "benchmarks.common",
    } <= set(FILES)
    assert any(edge.target == "kvcourse.quizzes" for edge in NOTEBOOK_EDGES), "no lesson imports quick_check"
    assert len(EDGES) > 300


def test_no_import_cycles():
    """Modules import one another one way: a loop, even through a function-local import, is a cycle."""
    loops = [(group, loop) for group, loop in zip(strongly_connected(EDGES), cycles(EDGES), strict=True)]
    assert not loops, "import cycles (each group imports one another; one loop shown):\n" + "\n".join(
        f"{', '.join(group)}:\n{_lines(loop)}" for group, loop in loops
    )


def test_every_kernels_module_has_a_layer():
    missing = sorted(m for m in FILES if m.startswith("kvcourse.kernels") and layer_of(m, KERNEL_LAYERS) is None)
    assert not missing, f"add these to KERNEL_LAYERS, in the layer they belong to: {missing}"


def test_the_engine_layers_import_one_way():
    """A lower layer never imports a higher one (engine -> memory -> attention -> model: KERNEL_LAYERS)."""
    wrong = layer_violations(EDGES, KERNEL_LAYERS)
    assert not wrong, "imports that reach up the engine's layers:\n" + _lines(wrong)


def test_the_engine_imports_nothing_of_the_course_above_it():
    """kernels/ is the repository's bottom: lessons, simulators and quizzes import it, never the reverse."""
    wrong = [
        e for e in EDGES if e.source.startswith("kvcourse.kernels") and not e.target.startswith("kvcourse.kernels")
    ]
    assert not wrong, "the engine imports the course:\n" + _lines(wrong)


def test_the_learner_side_never_imports_the_grader():
    """Whatever a lesson's notebook or the quick check loads, directly or through others, is never grading."""
    starts = {edge.source for edge in NOTEBOOK_EDGES} | set(LEARNER_MODULES)
    assert set(LEARNER_MODULES) <= set(FILES), "a learner's module moved: update LEARNER_MODULES"
    loaded = reachable(starts, EDGES + NOTEBOOK_EDGES)
    wrong = {module: chain for module, chain in loaded.items() if _is_grader(module)}
    assert not wrong, "the learner's side loads the grader's:\n" + "\n".join(
        f"{module}, through:\n{_lines(chain)}" for module, chain in sorted(wrong.items())
    )


# -- the checker finds what it is for: planted breaches in a folder of fake modules ---------------------


def _plant(tmp_path: Path, files: dict[str, str]) -> tuple[dict[str, Path], list[Import]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = module_files(tmp_path, {"fake": "fake"})
    return found, repo_imports(tmp_path, found)


def test_a_planted_cycle_through_a_function_local_import_is_reported(tmp_path):
    found, edges = _plant(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/model.py": "def check():\n    from .formulas import FORMULAS\n    return FORMULAS\n",
            "fake/formulas.py": "import math\n\nfrom fake.model import check\nFORMULAS = {}\n",
            "fake/units.py": "from . import model\n",  # into the loop, not part of it
        },
    )
    assert strongly_connected(edges) == [["fake.formulas", "fake.model"]]
    [loop] = cycles(edges)
    assert [str(edge) for edge in loop] == [
        "fake.formulas -> fake.model (fake/formulas.py:3: from fake.model import check)",
        "fake.model -> fake.formulas (fake/model.py:2: from .formulas import FORMULAS)",
    ]


def test_an_import_under_type_checking_is_no_edge(tmp_path):
    _, edges = _plant(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/a.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fake.b import B\n",
            "fake/b.py": "import typing\n\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import fake.a\n",
        },
    )
    assert [(e.source, e.target) for e in edges] == [("fake.b", "fake.a")]  # the else branch runs


def test_relative_and_package_imports_resolve_to_modules(tmp_path):
    _, edges = _plant(
        tmp_path,
        {
            "fake/__init__.py": "from fake.low import helper\n",
            "fake/low/__init__.py": "from .helper import x\nfrom .. import top\n",
            "fake/low/helper.py": "from ..top import y\nfrom . import other\n",
            "fake/low/other.py": "",
            "fake/top.py": "from fake import low\nfrom fake.low import x\n",
        },
    )
    assert sorted((e.source, e.target) for e in edges) == [
        ("fake", "fake.low.helper"),
        ("fake.low", "fake.low.helper"),
        ("fake.low", "fake.top"),
        ("fake.low.helper", "fake.low.other"),
        ("fake.low.helper", "fake.top"),
        ("fake.top", "fake.low"),
        ("fake.top", "fake.low"),
    ]


def test_a_planted_layer_violation_is_reported(tmp_path):
    layers = (("fake.engine.*",), ("fake.memory.*",), ("fake.model.*",))
    _, edges = _plant(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/engine/__init__.py": "",
            "fake/engine/runner.py": "from fake.memory.pool import Pool\n",  # down: allowed
            "fake/memory/__init__.py": "",
            "fake/memory/pool.py": "from fake.model.layers import Linear\n",  # down: allowed
            "fake/model/__init__.py": "",
            "fake/model/layers.py": "class Linear:\n    def run(self):\n        from fake.engine import runner\n",
        },
    )
    assert layer_of("fake.engine", layers) == 0 and layer_of("fake.model.layers", layers) == 2
    assert layer_of("fake.engineering", layers) is None
    assert [str(edge) for edge in layer_violations(edges, layers)] == [
        "fake.model.layers -> fake.engine.runner (fake/model/layers.py:3: from fake.engine import runner)"
    ]


def test_a_planted_notebook_that_loads_the_grader_is_reported(tmp_path):
    found, edges = _plant(
        tmp_path,
        {
            "fake/__init__.py": "",
            "fake/checking.py": "def check():\n    from fake.grading.decide import decide\n",
            "fake/grading/__init__.py": "",
            "fake/grading/decide.py": "",
        },
    )
    notebook = tmp_path / "notes" / "01_x.ipynb"
    notebook.parent.mkdir()
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {"cell_type": "markdown", "source": ["import fake.grading"]},  # prose, never run
                    {"cell_type": "code", "source": ["%matplotlib inline\n", "from fake import checking"]},
                ]
            }
        )
    )
    cells = notebook_imports(tmp_path, notebook, found)
    where = "<notes/01_x.ipynb, cell 2>"
    assert [(e.source, e.target, e.line) for e in cells] == [(where, "fake.checking", 2)]
    loaded = reachable({cells[0].source}, edges + cells)
    assert [str(edge) for edge in loaded["fake.grading.decide"]] == [
        f"{where} -> fake.checking (notes/01_x.ipynb, cell 2:2: from fake import checking)",
        "fake.checking -> fake.grading.decide (fake/checking.py:2: from fake.grading.decide import decide)",
    ]


@pytest.mark.parametrize(
    "module",
    [
        "kvcourse.kernels.engine.scheduler",
        "kvcourse.kernels.memory.block_pool",
        "kvcourse.kernels.attention.paged",
        "kvcourse.kernels.model.transformer",
    ],
)
def test_the_serving_stack_is_in_its_documented_order(module):
    """engine -> memory -> attention -> model, as kernels/__init__.py and docs/architecture.md say."""
    order = ["engine", "memory", "attention", "model"]
    layers = [layer_of(f"kvcourse.kernels.{name}.x", KERNEL_LAYERS) for name in order]
    assert layers == sorted(layers) and len(set(layers)) == 4
    assert layer_of(module, KERNEL_LAYERS) == layers[order.index(module.split(".")[2])]


def test_the_simulators_never_load_the_quizzes():
    """A lab's simulator runs where the quizzes are hidden (the learner's side of a lab, the grading sandbox): no
    simulator loads them, directly or through the notebook helpers (ask kvcourse.kernel_env, not kvcourse.notebook)."""
    starts = {module for module in FILES if module.startswith("kvcourse.simulators")}
    loaded = reachable(starts, EDGES)
    wrong = {module: chain for module, chain in loaded.items() if module.startswith("kvcourse.quizzes")}
    assert not wrong, "a simulator loads the quizzes:\n" + "\n".join(
        f"{module}, through:\n{_lines(chain)}" for module, chain in sorted(wrong.items())
    )
