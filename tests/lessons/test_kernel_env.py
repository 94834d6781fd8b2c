"""The environments the course runs lessons in (kvcourse.kernel_env): the tests, the site, the class benchmark."""

from __future__ import annotations

from pathlib import Path

from kvcourse.kernel_env import HEADLESS_ENV, STRICT_ENV, headless, jupyter_home, offline


def test_headless_is_offline_quiet_and_strict_only_when_asked(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")  # a caller's own setting must not make the site strict
    monkeypatch.setenv("KVCOURSE_ELSEWHERE", "kept")
    strict = headless(tmp_path / "p", "bfloat16", strict=True)
    lenient = headless(tmp_path / "p", "float32", strict=False, threads=1)
    assert strict[STRICT_ENV] == "1" and STRICT_ENV not in lenient
    for env in (strict, lenient):
        assert env[HEADLESS_ENV] == "1" and env["HF_HUB_OFFLINE"] == "1" and env["KVCOURSE_ELSEWHERE"] == "kept"
        assert env["KVCOURSE_PROGRESS"] == str(tmp_path / "p")
    assert (strict["KVCOURSE_DTYPE"], lenient["KVCOURSE_DTYPE"]) == ("bfloat16", "float32")


def test_one_thread_unless_omp_num_threads_says_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert offline()["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert offline()["OMP_NUM_THREADS"] == "3" and offline(threads=1)["OMP_NUM_THREADS"] == "1"


def test_jupyter_home_puts_every_folder_under_home(tmp_path: Path):
    env = jupyter_home(tmp_path)
    assert {"JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "KVCOURSE_PROGRESS"} == set(
        env
    )
    assert all(Path(value).parent == tmp_path for value in env.values())
