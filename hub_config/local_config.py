"""JupyterHub config for the embedded default: PaddleCloud Hub on one machine.

    python -m paddle_ext.demo --port 8000          (or `make demo`)
    jupyterhub -f hub_config/local_config.py       (the same hub, without the banner)

Everything listens on 127.0.0.1. State lives under $PADDLECLOUD_HOME (default
~/.paddlecloud):

    hub/                 database, cookie secret, proxy pid file, demo password
    users/<name>/        each hub user's home and notebook folder
    users/<name>/.paddlecloud/jobs/   that user's jobs (seen by the REST API, the
                         widgets and the `paddlecloud` CLI in the user's terminal)

Ports, all on 127.0.0.1, from the environment:
    PADDLECLOUD_HUB_PORT        public port (proxy), else $PORT, else 8000
    PADDLECLOUD_HUB_API_PORT    hub API port, else a free one
    PADDLECLOUD_PROXY_API_PORT  proxy's REST API port, else a free one
    PADDLECLOUD_QUOTA_PORT      the quota service's port (/services/quota/), else a free one

Quotas: the quota service keeps them in quotas.json here; each user's backend reads
that file before every submit.

Login: every user, `admin` included, uses the demo password
($PADDLECLOUD_DEMO_PASSWORD, else generated once into hub/demo-password).
This is a single-OS-user demo: users are separated by folders, not by the OS.
"""

import os
import shutil
import socket
import sys
from hmac import compare_digest
from pathlib import Path

from jupyterhub.auth import Authenticator
from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import List, Unicode

REPO_ROOT = Path(__file__).resolve().parent.parent
try:
    from paddle_ext import demo
except ImportError:  # a hub run outside the project's environment: use the checkout
    sys.path.insert(0, str(REPO_ROOT))
    from paddle_ext import demo

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port(name: str, fallback) -> int:
    value = os.environ.get(name)
    return int(value) if value else fallback()


HOME = demo.paddlecloud_home()
HUB_DIR = demo.hub_dir(HOME)
USERS_DIR = demo.users_dir(HOME)
demo.prepare(HOME)

PUBLIC_PORT = _port(demo.PORT_ENV, lambda: int(os.environ.get("PORT") or demo.DEFAULT_PORT))
# The hub API and the proxy API are internal; free ports by default so that a demo on
# 8000 does not collide with another JupyterHub's 8081/8001 on the same machine.
HUB_API_PORT = _port("PADDLECLOUD_HUB_API_PORT", _free_port)
PROXY_API_PORT = _port("PADDLECLOUD_PROXY_API_PORT", _free_port)
QUOTA_PORT = _port("PADDLECLOUD_QUOTA_PORT", _free_port)
# One quota file for the whole hub: the quota service writes it, every user's local
# backend reads it before each submit.
QUOTA_FILE = HOME / "quotas.json"


# --- Authentication ---------------------------------------------------------------

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


c.JupyterHub.authenticator_class = DemoPasswordAuthenticator
c.DemoPasswordAuthenticator.password = demo.demo_password(HOME)
c.Authenticator.admin_users = {demo.ADMIN_USER}
c.Authenticator.allow_all = True
# Names become folder names under users/: keep them to safe characters.
c.Authenticator.username_pattern = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


# --- Single-user servers -----------------------------------------------------------

class PaddleLocalSpawner(SimpleLocalProcessSpawner):
    """A local JupyterLab process per user, as this OS user, in users/<name>/.

    Each user gets their own PADDLECLOUD_HOME inside their home, so jobs are kept
    apart per user and the terminal's `paddlecloud` CLI sees the same jobs as the
    REST API and the widgets. On a user's first start, the examples are copied in.
    """

    examples = List(
        Unicode(),
        help="Files copied into a new user's home on the first start (existing files are kept).",
    ).tag(config=True)

    def user_env(self, env):
        env = super().user_env(env)  # USER, HOME, SHELL
        env["PADDLECLOUD_HOME"] = os.path.join(self.home_dir, ".paddlecloud")
        env["PADDLECLOUD_BACKEND"] = "local"
        env["PADDLECLOUD_QUOTA_FILE"] = str(QUOTA_FILE)
        # This environment's bin first: `python`, `paddlecloud` and `jupyter` in the
        # user's terminal and kernels are the ones the hub runs with.
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
        return env

    def prepare_home(self) -> None:
        home = Path(self.home_dir)
        state = home / ".paddlecloud"
        state.mkdir(parents=True, exist_ok=True)
        marker = state / "examples-copied"
        if marker.exists():
            return  # not the first start: a deleted example stays deleted
        for source in map(Path, self.examples):
            target = home / source.name
            if source.is_file() and not target.exists():
                shutil.copy2(source, target)
        marker.touch()

    async def start(self):
        self.prepare_home()
        return await super().start()


c.JupyterHub.spawner_class = PaddleLocalSpawner
c.PaddleLocalSpawner.home_dir_template = str(USERS_DIR / "{username}")
c.PaddleLocalSpawner.examples = [str(REPO_ROOT / "examples" / name) for name in ("quickstart.ipynb", "train.py")]
c.Spawner.notebook_dir = str(USERS_DIR / "{username}")
c.Spawner.default_url = "/lab"
# This interpreter's jupyterhub-singleuser (with the paddle_ext server extension,
# enabled by the package's jupyter-config), whatever PATH says.
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = [
    # The demo runs offline: no news feed and no update checks from JupyterLab.
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
]
if os.geteuid() == 0:
    # Containers and CI often run as root; Jupyter refuses that without this flag.
    c.Spawner.args.append("--allow-root")
# A first JupyterLab start on a busy machine can take a while.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120


# --- Hub, proxy, state -------------------------------------------------------------

c.JupyterHub.bind_url = f"http://127.0.0.1:{PUBLIC_PORT}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{HUB_API_PORT}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"
c.ConfigurableHTTPProxy.command = [demo.find_proxy() or "configurable-http-proxy"]
# The hub starts the proxy and generates its auth token on every start; the pid file
# lets a restarted hub stop a proxy left over from a crash.
c.ConfigurableHTTPProxy.pid_file = str(HUB_DIR / "jupyterhub-proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{HUB_DIR / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(HUB_DIR / "jupyterhub_cookie_secret")
# Stopping the hub stops the proxy and every user's server: nothing keeps running.
# (Training jobs are detached on purpose and finish on their own.)
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True


# --- Quota service (/services/quota/) ----------------------------------------------
# Hub admins (and holders of custom:paddlecloud-quota:admin, given to the users named
# in $PADDLECLOUD_QUOTA_ADMINS) set limits there; users see their own.

from paddle_ext.quota.hubconfig import configure_quota_service  # noqa: E402

configure_quota_service(
    c, port=QUOTA_PORT,
    environment={"PADDLECLOUD_HOME": str(HOME), "PADDLECLOUD_QUOTA_FILE": str(QUOTA_FILE),
                 "PADDLECLOUD_QUOTA_STORE": "local"},
    admin_users=[name for name in os.environ.get("PADDLECLOUD_QUOTA_ADMINS", "").split(",") if name],
)
