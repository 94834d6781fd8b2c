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


def test_lesson_00_names_every_part_of_the_syllabus_with_its_lessons():
    """The parts lesson 00 lists (bold: lessons, title) are syllabus.toml's, which format_syllabus prints."""
    import json
    import re

    from kvcourse.syllabus import format_syllabus, load_parts, part_of

    parts = load_parts()
    nexts = [f"{int(p.first) - 1:02d}" for p in parts[1:]]
    wanted = [f"{p.first}–{last}, {p.title}" for p, last in zip(parts, nexts, strict=False)]
    wanted.append(f"{parts[-1].first} on, {parts[-1].title}")
    cells = json.loads(load_syllabus()[0].notebook_path.read_text(encoding="utf-8"))["cells"]
    text = next("".join(c["source"]) for c in cells if c.get("id") == "00-03")
    assert re.findall(r"\*\*(\d\d(?:–\d\d| on), [^.]+)\.\*\*", text) == wanted
    assert f"falls into {['one', 'two', 'three', 'four', 'five', 'six'][len(parts) - 1]} parts" in text
    assert all(f"-- {p.title} --" in format_syllabus() for p in parts) and part_of("21").title == "serving in 2026"
