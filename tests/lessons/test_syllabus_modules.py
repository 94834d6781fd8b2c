"""Every module the syllabus names behind a lesson imports (syllabus.toml: simulator = and engine =)."""

from __future__ import annotations

import importlib

import pytest

from kvcourse.syllabus import load_syllabus

# The engine stands behind every lesson now; a lesson's simulator is due when its notebook exists
# (lessons whose notebook is still to be written name the simulator they will use).
ENGINES = sorted({lesson.engine for lesson in load_syllabus() if lesson.engine})
SIMULATORS = [
    (lesson.number, lesson.simulator)
    for lesson in load_syllabus()
    if lesson.simulator and lesson.notebook_path.exists()
]


@pytest.mark.parametrize("module", ENGINES)
def test_every_engine_module_imports(module):
    importlib.import_module(module)


@pytest.mark.parametrize("number, module", SIMULATORS, ids=[number for number, _ in SIMULATORS])
def test_the_simulator_of_every_written_lesson_imports(number, module):
    importlib.import_module(module)


def test_the_names_are_module_paths_of_the_course():
    for lesson in load_syllabus():
        for field in ("simulator", "engine"):
            name = getattr(lesson, field)
            assert name == "" or name.startswith("kvcourse."), (lesson.number, field, name)
    assert ("17", "kvcourse.simulators.timing") in SIMULATORS
