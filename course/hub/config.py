"""JupyterHub's configuration for a class on one machine (`kvcourse hub`, quizzes/INSTRUCTORS.md).

`kvcourse hub` writes the settings of this start to DIR/hub.json and a two-line jupyterhub_config.py
that calls `configure(c, HubSettings.load(...))`: the whole configuration is this module, testable
without a hub. A local trial: DummyAuthenticator (or SharedPasswordAuthenticator with passwords),
SimpleLocalProcessSpawner, every server as the user who runs the hub, homes under DIR/homes/.
Each single-user server is `python -m kvcourse.hub.singleuser ROLE` (the student's lab with the
assignment list, or the instructor's on the course), chosen by role in a pre-spawn hook.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvcourse.hub.users import Roster

COURSE_ID = "kvcourse"
SERVICE = "kvcourse"  # the hub service whose token (DIR/api_token) scripts and the tests use
PASSWORDS_ENV = ("KVCOURSE_HUB_STUDENT_PASSWORD", "KVCOURSE_HUB_INSTRUCTOR_PASSWORD")
MARKER_ENV = "KVCOURSE_HUB_DIR"  # set in every process the hub starts: how `kvcourse hub` finds leftovers
SERVICE_SCOPES = ["list:users", "read:users", "admin:servers", "access:servers", "read:servers"]


@dataclass(frozen=True)
class HubSettings:
    """One start of the hub: where its state lives, where it listens, who is in the class."""

    state_dir: Path
    roster: Roster
    ip: str = "127.0.0.1"
    port: int = 8000
    hub_port: int = 8081  # the hub's own API, on loopback, for the proxy and the servers
    proxy_api_port: int = 8001  # configurable-http-proxy's REST API, on loopback
    proxy: str = "configurable-http-proxy"
    python: str = field(default_factory=lambda: sys.executable)
    model_cache: str = ""  # KVCOURSE_CACHE for every server: the converted weights, shared read-only
    passwords: bool = False  # SharedPasswordAuthenticator, passwords in PASSWORDS_ENV
    extra_config: str = ""  # the instructor's own jupyterhub config, loaded last (a real authenticator...)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).expanduser().resolve())
        try:
            ipaddress.ip_address(self.ip)
        except ValueError:
            raise ValueError(
                f"--ip {self.ip!r} is not an IP address (127.0.0.1 for this machine only, 0.0.0.0 for every interface)"
            ) from None
        ports = {"--port": self.port, "the hub's API port": self.hub_port, "the proxy's API port": self.proxy_api_port}
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"{name} {port} is not a port number (1-65535)")
        if len(set(ports.values())) < 3:
            raise ValueError(f"the hub needs three different ports, got {ports}")
        if self.extra_config and not Path(self.extra_config).is_file():
            raise ValueError(f"--config {self.extra_config}: no such file")
        if not self.loopback and not self.passwords and not self.extra_config:
            raise ValueError(
                f"--ip {self.ip} lets other machines reach the hub, where anyone could log in as any "
                "listed user: give --password-file, or a real authenticator with --config "
                "(quizzes/INSTRUCTORS.md)"
            )

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the hub."""
        return ipaddress.ip_address(self.ip).is_loopback

    # The layout of the hub's folder.
    @property
    def course_dir(self) -> Path:
        """The instructor's nbgrader course (`kvcourse grade init`)."""
        return self.state_dir / "course"

    @property
    def exchange_dir(self) -> Path:
        """nbgrader's exchange, shared by everyone: release, fetch, submit, collect."""
        return self.state_dir / "exchange"

    @property
    def homes_dir(self) -> Path:
        """One home folder per user."""
        return self.state_dir / "homes"

    def config_dir(self, role: str) -> Path:
        """The extra Jupyter config folder (JUPYTER_CONFIG_PATH) of a role: its nbgrader_config.py."""
        return self.state_dir / "config" / role

    @property
    def token_file(self) -> Path:
        """The API token of the hub's `kvcourse` service (mode 600)."""
        return self.state_dir / "api_token"

    @property
    def url(self) -> str:
        """The address students open."""
        host = "127.0.0.1" if self.ip in ("0.0.0.0", "::") else self.ip
        return f"http://{host}:{self.port}/" if ":" not in host else f"http://[{host}]:{self.port}/"

    def save(self) -> Path:
        """Write hub.json (what jupyterhub_config.py loads)."""
        data = asdict(self)
        data["state_dir"] = str(self.state_dir)
        path = self.state_dir / "hub.json"
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path | str) -> HubSettings:
        """Read hub.json back."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        roster = data.pop("roster")
        return cls(roster=Roster(tuple(roster["instructors"]), tuple(roster["students"])), **data)


def nbgrader_configs(settings: HubSettings) -> dict[str, str]:
    """The text of each role's nbgrader_config.py (read from JUPYTER_CONFIG_PATH by the role's server)."""
    student = (
        "# Written by `kvcourse hub`: the student's side of the course's exchange.\n"
        "import os\n\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(settings.exchange_dir)!r}\n"
        "# nbgrader takes the student id from the system login, and JUPYTERHUB_USER only for 'jovyan':\n"
        "# every server of this hub may run as one system user, so the hub's user name is the id.\n"
        "c.CourseDirectory.student_id = os.environ['JUPYTERHUB_USER']\n"
    )
    instructor = (
        "# Written by `kvcourse hub`. The course's own settings are in its nbgrader_config.py (the server\n"
        "# runs in the course folder); this adds what a hub changes.\n"
        "c = get_config()  # noqa: F821\n"
        "# With SimpleLocalProcessSpawner every submission belongs to the one system user that runs the hub,\n"
        "# which nbgrader's collect would report as a cheating attempt for every student.\n"
        "c.ExchangeCollect.check_owner = False\n"
    )
    return {"student": student, "instructor": instructor}


def server_environment(settings: HubSettings, user: str) -> dict[str, str]:
    """What the hub adds to a user's server environment (besides JupyterHub's own variables)."""
    role = settings.roster.role(user)
    env = {
        MARKER_ENV: str(settings.state_dir),
        "JUPYTER_CONFIG_PATH": str(settings.config_dir(role)),
        "KVCOURSE_STUDENT_ID": user,  # the set-up cell's STUDENT_ID: per-student values match the grader's
        "HF_HUB_OFFLINE": "1",
    }
    if settings.model_cache:
        env["KVCOURSE_CACHE"] = settings.model_cache
    return env


def make_pre_spawn_hook(settings: HubSettings):
    """The hook that gives each user the server of their role."""
    from kvcourse.hub.singleuser import default_url

    def pre_spawn_hook(spawner) -> None:
        role = settings.roster.role(spawner.user.name)
        spawner.args = [role, "--course", str(settings.course_dir)]
        spawner.default_url = default_url(role)
        spawner.environment = {**spawner.environment, **server_environment(settings, spawner.user.name)}

    return pre_spawn_hook


def configure(c, settings: HubSettings) -> None:
    """Set JupyterHub's configuration object ``c`` for this class."""
    state = settings.state_dir
    c.JupyterHub.bind_url = (
        f"http://{settings.ip}:{settings.port}" if ":" not in settings.ip else f"http://[{settings.ip}]:{settings.port}"
    )
    c.JupyterHub.hub_ip = "127.0.0.1"
    c.JupyterHub.hub_port = settings.hub_port
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [settings.proxy]
    c.ConfigurableHTTPProxy.pid_file = str(state / "jupyterhub-proxy.pid")
    c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
    c.JupyterHub.cleanup_servers = True  # the hub stops every server when it stops
    c.JupyterHub.cleanup_proxy = True

    # Who may log in: the users file, nobody else (not even users an earlier start knew).
    roster = settings.roster
    c.Authenticator.allowed_users = set(roster.users)
    c.Authenticator.admin_users = set(roster.instructors)
    c.Authenticator.allow_existing_users = False
    if settings.passwords:
        c.JupyterHub.authenticator_class = "shared-password"
        c.SharedPasswordAuthenticator.user_password = os.environ[PASSWORDS_ENV[0]]
        c.SharedPasswordAuthenticator.admin_password = os.environ[PASSWORDS_ENV[1]]
    else:
        c.JupyterHub.authenticator_class = "dummy"

    c.JupyterHub.spawner_class = "simple"
    c.SimpleLocalProcessSpawner.home_dir_template = str(settings.homes_dir / "{username}")
    c.Spawner.cmd = [settings.python, "-m", "kvcourse.hub.singleuser"]
    c.Spawner.pre_spawn_hook = make_pre_spawn_hook(settings)
    # A lab starts in a few seconds, but a class logging in at once on two cores takes longer.
    c.Spawner.start_timeout = 180
    c.Spawner.http_timeout = 180

    token = settings.token_file.read_text(encoding="utf-8").strip() if settings.token_file.exists() else ""
    if token:
        c.JupyterHub.services = [{"name": SERVICE, "api_token": token}]
        c.JupyterHub.load_roles = [{"name": f"{SERVICE}-service", "scopes": SERVICE_SCOPES, "services": [SERVICE]}]


CONFIG_FILE = """\
# Written by `kvcourse hub` at each start (the settings are in hub.json beside it; see kvcourse.hub.config).
from kvcourse.hub.config import HubSettings, configure

configure(c, HubSettings.load({path!r}))  # noqa: F821 - c is JupyterHub's config object
"""
EXTRA_CONFIG = """
# The instructor's own settings (kvcourse hub --config), after the course's: they win.
load_subconfig({path!r})  # noqa: F821
"""


def write_config(settings: HubSettings) -> Path:
    """Write hub.json, jupyterhub_config.py and each role's nbgrader_config.py; return the hub's config file."""
    for role, text in nbgrader_configs(settings).items():
        folder = settings.config_dir(role)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "nbgrader_config.py").write_text(text, encoding="utf-8")
    path = settings.state_dir / "jupyterhub_config.py"
    text = CONFIG_FILE.format(path=str(settings.save()))
    if settings.extra_config:
        text += EXTRA_CONFIG.format(path=str(Path(settings.extra_config).resolve()))
    path.write_text(text, encoding="utf-8")
    return path
