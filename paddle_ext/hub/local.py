"""The embedded default's hub pieces: one password for every demo user, a JupyterLab
process per user in a home folder of their own, and where everything lives.

    $PADDLECLOUD_HOME/hub/            database, cookie secret, proxy pid file, demo password
    $PADDLECLOUD_HOME/users/<name>/   each hub user's home and notebook folder, with their
                                      jobs under .paddlecloud/jobs/
    $PADDLECLOUD_HOME/quotas.json     the quota settings (the quota service writes them,
                                      every user's local backend reads them)

hub_config/local_config.py sets JupyterHub's traits from these.
"""

from __future__ import annotations

import os
import secrets
import sys
from hmac import compare_digest
from pathlib import Path
from typing import Iterable, Sequence

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import List, Unicode

from ..backends.registry import LOCAL
from ..homeseed import seed_home
from ..ports import free_port, free_ports
from ..constants import BACKEND_ENV, HOME_ENV, QUOTA_FILE_ENV, paddlecloud_home
from ..environment import DEMO_PASSWORD_ENV, HUB_PORT_ENV

ADMIN_USER = "admin"
DEFAULT_PORT = 8000
PASSWORD_ENV = DEMO_PASSWORD_ENV
PORT_ENV = HUB_PORT_ENV
PASSWORD_FILE = "demo-password"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = ("quickstart.ipynb", "train.py")
USERNAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"  # names become folder names under users/


def home() -> Path:
    return Path(paddlecloud_home())


def hub_dir(state: Path | None = None) -> Path:
    """The hub's own state: database, cookie secret, proxy pid file, demo password."""
    return (state or home()) / "hub"


def users_dir(state: Path | None = None) -> Path:
    """One home folder per hub user lives in here."""
    return (state or home()) / "users"


def quota_file(state: Path | None = None) -> Path:
    return (state or home()) / "quotas.json"


def prepare(state: Path) -> None:
    for folder in (hub_dir(state), users_dir(state)):
        folder.mkdir(parents=True, exist_ok=True)
    os.chmod(hub_dir(state), 0o700)  # holds the cookie secret and the password


def public_port() -> int:
    return int(os.environ.get(PORT_ENV) or os.environ.get("PORT") or DEFAULT_PORT)


def ports_from_env(names: Sequence[str], taken: Iterable[int] = ()) -> dict[str, int]:
    """Each of the environment variables `names`' port: its value, else a free port, the free
    ones drawn together and apart from the given ones and `taken`. Drawn one by one, two could
    be the same number, or a port another server is given but does not listen on yet (a test
    run's quota service once found its port in use so)."""
    given = {name: int(os.environ[name]) for name in names if os.environ.get(name)}
    missing = [name for name in names if name not in given]
    avoid = set(given.values()) | set(taken)
    # Enough different ports that `missing` of them are outside `avoid`, whatever was drawn.
    drawn = [port for port in free_ports(len(missing) + len(avoid)) if port not in avoid] if missing else []
    return {**given, **dict(zip(missing, drawn))}


def demo_password(state: Path | None = None) -> str:
    """The password every user logs in with.

    PADDLECLOUD_DEMO_PASSWORD wins; otherwise a random one is generated on first use
    and kept (mode 0600) so it stays the same across restarts.
    """
    from_env = os.environ.get(PASSWORD_ENV, "")
    if from_env:
        return from_env
    path = hub_dir(state) / PASSWORD_FILE
    try:
        saved = path.read_text().strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        return saved
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    # O_EXCL: if two starts race, one of them writes and both read the same file.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return password


class DemoPasswordAuthenticator(Authenticator):
    """Anyone may log in under any (well-formed) name with the one demo password.

    JupyterHub's own options don't fit: DummyAuthenticator.password is deprecated
    (since 5.3), and SharedPasswordAuthenticator requires a different, 32+ character
    password for admins, while the contract is one password for everybody.
    Admin rights come from `admin_users`.
    """

    password = Unicode(help="The password every user logs in with.").tag(config=True)

    async def authenticate(self, handler, data):
        if self.password and compare_digest(data["password"].encode(), self.password.encode()):
            return {"name": data["username"]}
        return None

    def check_allow_config(self):
        super().check_allow_config()
        if not self.password:
            self.log.error("No demo password is set: nobody can log in.")


class PaddleLocalSpawner(SimpleLocalProcessSpawner):
    """A local JupyterLab process per user, as this OS user, in users/<name>/.

    Each user gets their own PADDLECLOUD_HOME inside their home, so jobs are kept
    apart per user and the terminal's `paddlecloud` CLI sees the same jobs as the
    REST API and the widgets. On a user's first start, the examples are copied in.
    """

    examples = List(
        Unicode(), [str(EXAMPLES / name) for name in EXAMPLE_FILES],
        help="Files copied into a new user's home on the first start (existing files are kept).",
    ).tag(config=True)
    quota_file = Unicode(help="The hub's quota settings, which each user's backend reads before a submit.",
                         ).tag(config=True)

    def user_env(self, env):
        env = super().user_env(env)  # USER, HOME, SHELL
        env[HOME_ENV] = os.path.join(self.home_dir, ".paddlecloud")
        env[BACKEND_ENV] = LOCAL
        if self.quota_file:
            env[QUOTA_FILE_ENV] = self.quota_file
        # This environment's bin first: `python`, `paddlecloud` and `jupyter` in the
        # user's terminal and kernels are the ones the hub runs with.
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
        return env

    def prepare_home(self) -> None:
        """The home and its .paddlecloud folder, and the examples on the first start: the
        same rule as a notebook pod's home on Kubernetes (paddle_ext.homeseed)."""
        seed_home(self.home_dir, self.examples)

    async def start(self):
        self.prepare_home()
        if self.port == 0:  # JupyterHub's own choice would come from the outgoing range
            self.port = free_port()
        return await super().start()
