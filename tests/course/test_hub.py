"""`kvcourse hub` (issue 17): the users file, the generated configuration, and a whole class on loopback.

The end-to-end test starts `kvcourse hub` on free ports with one instructor and two students and
drives everything over HTTP with the token of the hub's own service (DIR/api_token): the hub's REST
API starts each user's server; the instructor's formgrader API generates and releases lesson 05;
each student's server fetches it (nbgrader's assignment list), gets an answer written into the
fetched notebook through the contents API (alice right, bob wrong) and submits it; formgrader
collects; `kvcourse grade autograde` (bubblewrap) and `kvcourse grade export` run in the
instructor's environment; formgrader generates and releases the feedback and each student fetches
it (the assignment list's fetch_feedback). Where Debian's chromium is installed, bob fetches in a real browser instead
(log in, lesson 00 among the lessons, Nbgrader → Assignment List → Fetch) and the instructor opens
formgrader. Lab A (lesson 18) then goes through the same release, fetch, submit, collect, autograde
and export: alice's working block manager gets every point, bob's skeleton none. Then Ctrl-C (SIGINT
to the command's process group) must stop the hub and every server,
leaving no process behind. Skipped without JupyterHub's proxy or bubblewrap.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from browser_lab import CHROMIUM, chromium_page, menu
from guards import needs

from kvcourse.hub.config import (
    COURSE_ID,
    MARKER_ENV,
    PASSWORDS_ENV,
    HubSettings,
    configure,
    nbgrader_configs,
    server_environment,
    write_config,
)
from kvcourse.hub.launch import find_proxy, free_port, leftover_processes
from kvcourse.hub.singleuser import STUDENT_PLUGINS_OFF, server_command
from kvcourse.hub.users import Roster, parse_users, read_passwords
from kvcourse.models import cache_dir
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.sandbox import bwrap_path
from kvcourse.syllabus import load_syllabus

KVCOURSE = str(Path(sys.executable).with_name("kvcourse"))
ASSIGNMENT = "lesson05"
LAB = "lesson18"  # lab A: a class the engine runs, graded on hidden traces in the sandbox
START_TIMEOUT_S = 120
FREE_TEXT = "Earlier tokens' keys and values never change, so each step computes only the new token's."


# ------------------------------------------------------------------ the users file


def test_users_file_is_read_with_roles_comments_and_default_student():
    roster = parse_users("# the class\nteacher instructor\n\nalice\nbob   student  # late joiner\nta Instructor\n")
    assert roster == Roster(("teacher", "ta"), ("alice", "bob"))
    assert roster.users == ("teacher", "ta", "alice", "bob")
    assert roster.role("ta") == "instructor" and roster.role("bob") == "student"
    assert parse_users(roster.to_text()) == roster
    with pytest.raises(KeyError, match="not in the class"):
        roster.role("mallory")


def test_every_bad_line_of_a_users_file_is_named_at_once():
    text = "teacher instructor\nAlice\nbob teacher\nalice\nalice student\ncarol student extra\nx+y\n"
    with pytest.raises(ValueError) as err:
        parse_users(text, source="class.txt")
    message = str(err.value)
    assert "class.txt line 2: 'Alice' has capital letters: write 'alice'" in message
    assert "class.txt line 3: unknown role 'teacher' for bob" in message
    assert "class.txt line 5: alice is already listed on line 4" in message
    assert "class.txt line 6: 'carol student extra' has 3 words" in message
    assert "class.txt line 7: 'x+y' is not a valid user name" in message
    with pytest.raises(ValueError, match="no instructor"):
        parse_users("alice\nbob\n")
    with pytest.raises(ValueError, match="both as instructor and as student"):
        Roster(("alice",), ("alice",))


def test_password_file_follows_jupyterhubs_rules(tmp_path):
    path = tmp_path / "passwords"
    path.write_text("student: eight-ch\ninstructor: " + "i" * 32 + "\n")
    assert read_passwords(path) == ("eight-ch", "i" * 32)
    path.write_text("student: short\ninstructor: " + "i" * 32 + "\n")
    with pytest.raises(ValueError, match="at least 8"):
        read_passwords(path)
    path.write_text("student: eight-ch\ninstructor: too-short-for-an-admin\n")
    with pytest.raises(ValueError, match="at least 32"):
        read_passwords(path)
    path.write_text("teacher: whatever\n")
    with pytest.raises(ValueError, match="line 1"):
        read_passwords(path)


# ------------------------------------------------------------------ the generated configuration


class _Config(dict):
    """Enough of traitlets' Config for configure(): c.Section.name = value."""

    def __getattr__(self, name):
        return self.setdefault(name, _Config())

    def __setattr__(self, name, value):
        self[name] = value


class _Spawner:
    def __init__(self, name: str):
        self.user = type("User", (), {"name": name})()
        self.environment = {"KEEP": "1"}
        self.args: list[str] = []
        self.default_url = ""


def test_generated_configuration(tmp_path, monkeypatch):
    roster = Roster(("teacher",), ("alice", "bob"))
    settings = HubSettings(
        tmp_path / "hub", roster, port=8123, hub_port=8124, proxy_api_port=8125, proxy="/opt/chp", model_cache="/models"
    )
    settings.state_dir.mkdir()
    settings.token_file.write_text("secret-token\n")
    c = _Config()
    configure(c, settings)
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8123" and c.JupyterHub.hub_ip == "127.0.0.1"
    assert c.ConfigurableHTTPProxy.api_url == "http://127.0.0.1:8125" and c.ConfigurableHTTPProxy.command == [
        "/opt/chp"
    ]
    assert c.JupyterHub.db_url == f"sqlite:///{settings.state_dir / 'jupyterhub.sqlite'}"
    assert c.JupyterHub.authenticator_class == "dummy" and c.JupyterHub.spawner_class == "simple"
    assert c.Authenticator.allowed_users == {"teacher", "alice", "bob"}
    assert c.Authenticator.admin_users == {"teacher"} and c.Authenticator.allow_existing_users is False
    assert c.SimpleLocalProcessSpawner.home_dir_template == str(settings.homes_dir / "{username}")
    assert c.JupyterHub.services == [{"name": "kvcourse", "api_token": "secret-token"}]
    assert c.JupyterHub.cleanup_servers is True

    spawner = _Spawner("alice")
    c.Spawner.pre_spawn_hook(spawner)
    assert spawner.args == ["student", "--course", str(settings.course_dir)]
    assert spawner.default_url == "/lab/tree/lessons/00_start_here.ipynb"
    assert spawner.environment["KEEP"] == "1" and spawner.environment["KVCOURSE_STUDENT_ID"] == "alice"
    assert spawner.environment["JUPYTER_CONFIG_PATH"] == str(settings.config_dir("student"))
    assert spawner.environment[MARKER_ENV] == str(settings.state_dir)
    assert spawner.environment["KVCOURSE_CACHE"] == "/models"
    teacher = _Spawner("teacher")
    c.Spawner.pre_spawn_hook(teacher)
    assert teacher.args[0] == "instructor" and teacher.default_url == "/lab"
    assert server_environment(settings, "teacher")["JUPYTER_CONFIG_PATH"] == str(settings.config_dir("instructor"))

    student_config = nbgrader_configs(settings)["student"]
    assert f"c.Exchange.root = {str(settings.exchange_dir)!r}" in student_config
    assert f"c.CourseDirectory.course_id = {COURSE_ID!r}" in student_config
    assert "c.CourseDirectory.student_id = os.environ['JUPYTERHUB_USER']" in student_config

    monkeypatch.setenv(PASSWORDS_ENV[0], "students-pw")
    monkeypatch.setenv(PASSWORDS_ENV[1], "i" * 32)
    c = _Config()
    configure(c, HubSettings(tmp_path / "hub", roster, ip="0.0.0.0", passwords=True))
    assert c.JupyterHub.authenticator_class == "shared-password"
    assert c.SharedPasswordAuthenticator.admin_password == "i" * 32
    with pytest.raises(ValueError, match="--password-file"):
        HubSettings(tmp_path / "hub", roster, ip="0.0.0.0")
    with pytest.raises(ValueError, match="not an IP address"):
        HubSettings(tmp_path / "hub", roster, ip="localhost")
    assert HubSettings.load(settings.save()) == settings
    with pytest.raises(ValueError, match="--config"):
        HubSettings(tmp_path / "hub", roster, extra_config=str(tmp_path / "missing.py"))
    (tmp_path / "mine.py").write_text("c.JupyterHub.authenticator_class = 'native'\n")
    config = write_config(HubSettings(tmp_path / "hub", roster, ip="0.0.0.0", extra_config=str(tmp_path / "mine.py")))
    assert config.read_text().rstrip().endswith(f"load_subconfig({str(tmp_path / 'mine.py')!r})  # noqa: F821")
    assert "os.environ['JUPYTERHUB_USER']" in (settings.config_dir("student") / "nbgrader_config.py").read_text()


def test_student_and_instructor_servers(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    home = tmp_path / "alice"
    command, folder = server_command("student", tmp_path / "course", home, ["--extra"])
    assert folder == home and f"--ServerApp.root_dir={home}" in command and command[-1] == "--extra"
    assert command[1:3] == ["-m", "jupyterhub.singleuser"]
    assert "--ServerApp.jpserver_extensions=nbgrader.server_extensions.formgrader=False" in command
    assert not [arg for arg in command if "assignment_list=False" in arg], "students fetch and submit"
    assert (home / "lessons" / "00_start_here.ipynb").is_file() and len(
        list((home / "lessons").glob("*.ipynb"))
    ) == len(load_syllabus())
    (home / "lessons" / "00_start_here.ipynb").write_text("my edits")
    server_command("student", tmp_path / "course", home, [])
    assert (home / "lessons" / "00_start_here.ipynb").read_text() == "my edits", "a student's work is never overwritten"
    settings = json.loads((tmp_path / "runtime" / "kvcourse-lab" / "hub-student" / "page_config.json").read_text())
    assert set(STUDENT_PLUGINS_OFF) <= set(settings["disabledExtensions"])
    assert "@jupyter/nbgrader:assignment-list" not in settings["disabledExtensions"]
    with pytest.raises(ValueError, match="kvcourse grade init"):
        server_command("instructor", tmp_path / "course", tmp_path / "teacher", [])


def test_hub_refuses_without_a_proxy(tmp_path, monkeypatch, capsys):
    from kvcourse.cli import main

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # no proxy beside it
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "users").write_text("teacher instructor\n")
    assert main(["hub", "--users", str(tmp_path / "users"), "--dir", str(tmp_path / "hub")]) == 2
    assert "configurable-http-proxy" in capsys.readouterr().err


# ------------------------------------------------------------------ a class, end to end


def _needs_hub() -> str | None:
    try:
        find_proxy()
    except RuntimeError:
        return "needs JupyterHub's proxy: install nodejs and npm, then `make proxy`"
    if bwrap_path() is None:
        return "needs bubblewrap for the sandboxed autograde (apt-get install bubblewrap)"
    return None


class Hub:
    """HTTP to a running hub with its service token."""

    def __init__(self, port: int, token: str):
        self.base, self.token = f"http://127.0.0.1:{port}", token

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None):
        url = self.base + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = json.dumps(body).encode() if body is not None else (b"" if method in ("POST", "PUT") else None)
        request = urllib.request.Request(
            url,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                text = response.read().decode()
                return response.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")


def _wait(what: str, check, log: Path, timeout_s: float = START_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            result = None
        if result:
            return result
        assert time.monotonic() < deadline, (
            f"{what}: not after {timeout_s} s; the hub's log:\n{log.read_text()[-6000:]}"
        )
        time.sleep(0.5)


def _answers(right: bool, lesson: str = "05", course: Path | None = None) -> dict[str, str]:
    """Answer cells: every automatic question right, or every one wrong. A lab's right answer is the source
    notebook's answer cell without nbgrader's markers (the reference); its wrong one, the released skeleton."""
    answers = {}
    for q in load_quiz(lesson).questions:
        if q.kind.value == "choice":
            letter = q.correct if right else next(k for k in q.option_keys if k != q.correct)
            answers[q.id] = f"answer_{q.id} = {letter!r}"
        elif q.kind.value == "code":
            answers[q.id] = q.solution if right else q.solution.split("\n")[0] + "\n    return 0\n"
        elif q.kind.value == "lab" and right:
            source = json.loads((course / "source" / f"lesson{lesson}" / f"lesson{lesson}.ipynb").read_text())
            cell = next(
                c for c in source["cells"] if c["metadata"].get("kvcourse", {}) == {"role": "answer", "question": q.id}
            )
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            answers[q.id] = re.sub(r"^\s*### (BEGIN|END) SOLUTION\n?", "", text, flags=re.M)
    return answers


def _graded_status(course: Path, assignment: str, student: str) -> str:
    """What autograde recorded for one student (verdicts and notes), for a failing assertion's message."""
    found = [json.loads(path.read_text()).get(student, {}) for path in course.rglob(f"*{assignment}*.json")]
    kept = [{key: status.get(key) for key in ("verdicts", "notes", "points")} for status in found if status]
    return "\n" + json.dumps(kept, indent=1)[:4000]


def _answer_and_submit(hub, name: str, assignment: str, answers: dict[str, str]) -> None:
    """A student's fetched notebook, answered through the contents API and submitted with the assignment list."""
    which = {"course_id": COURSE_ID, "assignment_id": assignment}
    status, body = hub.call("GET", f"/user/{name}/assignments", params={"course_id": COURSE_ID})
    fetched = [a for a in body["value"] if a["assignment_id"] == assignment and a["status"] == "fetched"]
    assert fetched and fetched[0]["path"] == assignment, body
    path = f"/user/{name}/api/contents/{assignment}/{assignment}.ipynb"
    status, model = hub.call("GET", path)
    assert status == 200, model
    notebook = model["content"]
    for cell in notebook["cells"]:
        question = cell["metadata"].get("kvcourse", {}).get("question")
        role = cell["metadata"].get("kvcourse", {}).get("role")
        if role == "answer" and question in answers:
            cell["source"] = answers[question]
        elif role == "free":
            cell["source"] = FREE_TEXT
    status, saved = hub.call("PUT", path, {"type": "notebook", "format": "json", "content": notebook})
    assert status == 200, saved
    status, body = hub.call("POST", f"/user/{name}/assignments/submit", params=which)
    assert status == 200 and body["success"], body
    submitted = [a for a in body["value"] if a["status"] == "submitted"]
    assert [s["student_id"] for s in submitted[0]["submissions"]] == [name], "the hub's user is the student id"


def _log_in(page, base: str, name: str) -> None:
    page.goto(f"{base}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", "any password: the trial's DummyAuthenticator")
    page.click("#login_submit")
    page.wait_for_url(re.compile(f".*/user/{name}/lab.*"))


def _in_the_browser(base: str, student: str, shots: Path) -> None:
    """A student logs in, lands on lesson 00 among the lessons, fetches lesson 05 from the assignment list;
    the instructor logs in and sees it released in formgrader. Screenshots in ``shots``."""
    with chromium_page() as page:
        _log_in(page, base, student)
        page.locator(".jp-Notebook").first.wait_for()
        page.locator(".jp-DirListing-itemName", has_text="17_lab_use_cache.ipynb").wait_for()
        names = page.locator(".jp-DirListing-itemName").all_inner_texts()
        assert len([n for n in names if n.endswith(".ipynb")]) == len(load_syllabus()), names
        page.screenshot(path=str(shots / "hub_student_lesson00.png"))
        menu(page, "Nbgrader")
        assert page.locator(".lm-Menu-itemLabel:visible").all_inner_texts() == ["Assignment List"], (
            "a student's Nbgrader menu holds the assignment list only"
        )
        page.locator(".lm-Menu-itemLabel", has_text="Assignment List").last.click()
        page.locator("#released_assignments_list", has_text=ASSIGNMENT).wait_for()
        page.locator("#released_assignments_list button", has_text=re.compile("^Fetch$")).first.click()
        page.locator("#fetched_assignments_list button", has_text=re.compile("^Submit$")).wait_for()
        page.screenshot(path=str(shots / "hub_student_fetched.png"))
        page.goto(f"{base}/hub/logout")
        _log_in(page, base, "teacher")
        page.goto(f"{base}/user/teacher/formgrader")
        row = page.locator("tr", has_text=ASSIGNMENT)
        row.locator("text=released").wait_for()
        page.screenshot(path=str(shots / "hub_formgrader.png"))


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NBGRADER_EXECUTION", "KVCOURSE_STUDENT_ID")}
    # jsonschema compiles an IRI grammar at import when rfc3987_syntax is installed: seconds of CPU in every
    # nbgrader start, for a check nbformat never makes (as in test_quiz_nbgrader). PYTHONPATH reaches the servers.
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "rfc3987_syntax.py").write_text("raise ImportError('left out in the tests')\n")
    env.update(
        HOME=str(tmp / "home"),
        KVCOURSE_CACHE=str(cache_dir()),
        PYTHONPATH=str(stubs),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


@needs(_needs_hub())
def test_a_class_on_the_hub_end_to_end(tmp_path):
    state, users, log = tmp_path / "hub", tmp_path / "users.txt", tmp_path / "hub.log"
    users.write_text("teacher instructor\nalice student\nbob student\n")
    port, env = free_port(), _env(tmp_path)
    with open(log, "w") as out:
        command = subprocess.Popen(
            [KVCOURSE, "hub", "--users", str(users), "--dir", str(state), "--port", str(port), "--lessons", "05,18"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait(
            "the hub's API",
            lambda: (
                (state / "api_token").exists()
                and urllib.request.urlopen(f"http://127.0.0.1:{port}/hub/api/", timeout=5).status == 200
            ),
            log,
        )
        hub = Hub(port, (state / "api_token").read_text().strip())

        # 1. Every user's server, started through the hub's REST API, all at once.
        for name in ("teacher", "alice", "bob"):
            status, body = hub.call("POST", f"/hub/api/users/{name}/server")
            assert status in (201, 202), body
        for name in ("teacher", "alice", "bob"):
            _wait(
                f"{name}'s server",
                lambda name=name: hub.call("GET", f"/hub/api/users/{name}")[1]["servers"].get("", {}).get("ready"),
                log,
            )
        assert (state / "homes" / "alice" / "lessons" / "05_the_kv_cache.ipynb").is_file()

        # 2. The instructor generates and releases lesson 05 with formgrader's API, through the hub.
        for action in ("assign", "release"):
            status, body = hub.call("POST", f"/user/teacher/formgrader/api/assignment/{ASSIGNMENT}/{action}")
            assert status == 200 and body["success"], f"formgrader {action}: {body}"

        # 3. Each student: fetch with the assignment list, answer in the fetched notebook, submit.
        #    Where Chromium is installed, bob logs in and fetches in a real browser, and the instructor
        #    opens formgrader; screenshots in tmp_path.
        which = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        browser = CHROMIUM.exists()
        if browser:
            _in_the_browser(hub.base, "bob", tmp_path)
        for name, right in (("alice", True), ("bob", False)):
            if not (browser and name == "bob"):
                status, body = hub.call("POST", f"/user/{name}/assignments/fetch", params=which)
                assert status == 200 and body["success"], body
            _answer_and_submit(hub, name, ASSIGNMENT, _answers(right))

        # 4. The instructor collects (formgrader), then grades in the sandbox and exports, as in a terminal of
        #    their lab: the course folder, their home, the environment's tools first on PATH.
        status, body = hub.call("POST", f"/user/teacher/formgrader/api/assignment/{ASSIGNMENT}/collect")
        assert status == 200 and body["success"], body
        course = state / "course"
        assert sorted(p.name for p in (course / "submitted").iterdir()) == ["alice", "bob"]
        teacher = {**env, "HOME": str(state / "homes" / "teacher")}
        graded = subprocess.run(
            [KVCOURSE, "grade", "autograde", ASSIGNMENT],
            cwd=course,
            env=teacher,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert graded.returncode == 0, graded.stdout + graded.stderr
        assert "graded alice: 4 of 4 automatic points, 2 to grade by hand" in graded.stdout, graded.stdout
        assert "graded bob: 0 of 4 automatic points, 2 to grade by hand" in graded.stdout, graded.stdout
        exported = subprocess.run(
            [KVCOURSE, "grade", "export", "--to", "grades.csv"],
            cwd=course,
            env=teacher,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert exported.returncode == 0, exported.stdout + exported.stderr
        with open(course / "grades.csv", newline="") as f:
            rows = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == ASSIGNMENT}
        assert {name: float(row["score"]) for name, row in rows.items()} == {"alice": 4.0, "bob": 0.0}
        assert {float(row["max_score"]) for row in rows.values()} == {6.0}
        assert {row["status"] for row in rows.values()} == {"to grade by hand"}

        # 5. The feedback reaches the students: formgrader generates and releases it, each student fetches it
        #    with the assignment list, into the assignment's folder in their home.
        for action in ("generate_feedback", "release_feedback"):
            status, body = hub.call("POST", f"/user/teacher/formgrader/api/assignment/{ASSIGNMENT}/{action}")
            assert status == 200 and body["success"], f"formgrader {action}: {body}"
        for name in ("alice", "bob"):
            status, body = hub.call("POST", f"/user/{name}/assignments/fetch_feedback", params=which)
            assert status == 200 and body["success"], body
            fetched = list((state / "homes" / name / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
            assert len(fetched) == 1, f"{name} fetched {fetched}"
            assert ("Right" in fetched[0].read_text()) == (name == "alice"), name

        # 7. Lab A through the same flow: released, fetched, answered (alice: a working manager; bob: the skeleton
        #    as released, wrong letters), submitted, collected, graded in the sandbox on hidden traces, exported.
        for action in ("assign", "release"):
            status, body = hub.call("POST", f"/user/teacher/formgrader/api/assignment/{LAB}/{action}")
            assert status == 200 and body["success"], f"formgrader {action} {LAB}: {body}"
        for name, right in (("alice", True), ("bob", False)):
            status, body = hub.call(
                "POST", f"/user/{name}/assignments/fetch", params={"course_id": COURSE_ID, "assignment_id": LAB}
            )
            assert status == 200 and body["success"], body
            _answer_and_submit(hub, name, LAB, _answers(right, "18", course))
        status, body = hub.call("POST", f"/user/teacher/formgrader/api/assignment/{LAB}/collect")
        assert status == 200 and body["success"], body
        graded = subprocess.run(
            [KVCOURSE, "grade", "autograde", LAB], cwd=course, env=teacher, capture_output=True, text=True, timeout=300
        )
        assert graded.returncode == 0, graded.stdout + graded.stderr
        lab_points = sum(q.points for q in load_quiz("18").questions)
        assert f"graded alice: {lab_points} of {lab_points} automatic points" in graded.stdout, (
            graded.stdout + _graded_status(course, LAB, "alice")
        )
        assert f"graded bob: 0 of {lab_points} automatic points" in graded.stdout, graded.stdout + _graded_status(
            course, LAB, "bob"
        )
        exported = subprocess.run(
            [KVCOURSE, "grade", "export", "--to", "grades.csv"],
            cwd=course,
            env=teacher,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert exported.returncode == 0, exported.stdout + exported.stderr
        with open(course / "grades.csv", newline="") as f:
            lab_rows = {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == LAB}
        assert {name: float(row["score"]) for name, row in lab_rows.items()} == {"alice": lab_points, "bob": 0.0}
        assert {row["status"] for row in lab_rows.values()} == {"graded"}
    finally:
        # 6. Ctrl-C: SIGINT to the command's process group, as a terminal sends it.
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGINT)
        try:
            code = command.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(command.pid, signal.SIGKILL)
            code = None
        left = leftover_processes(state)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert code == 0, f"`kvcourse hub` ended with {code}; its log:\n{log.read_text()[-4000:]}"
    assert left == [], f"processes left behind after Ctrl-C: {left}"
    assert "Cleaning up single-user servers" in log.read_text()
    assert "cheating attempt" not in log.read_text(), "the trial's one system user owns every submission"
