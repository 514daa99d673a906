"""A real OpenID Connect provider for tests: oidc-provider (npm, OpenID Certified) run by
tests/oidc/server.mjs on 127.0.0.1, with its own login page and a `groups` claim.

Why this provider and not Dex: `npm ci` of oidc-provider takes seconds (40 small packages, no
build), where Dex is a Go build of several minutes on this machine; both speak the same
protocol to the hub (authorization code + PKCE, token, userinfo), and oidc-provider lets the
test hold users and groups in a file it rewrites between logins (Dex's static users have no
groups). `make login-deps` installs it (tests/oidc/node_modules).

Everything (config, users file, log) lives under the folder given; the server is the test's own
child, killed with the test process if that dies, and `stop()` ends it with tools/k8s/procutil.
It listens on 127.0.0.1, or (the helm tier: the hub runs in a pod) on the real node's bridge
address, which this machine and the node's pods both reach; never on any other address.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import requests

from availability import skip_or_fail
from hubutil import LocalHub
from loginvalues import hub_environment, docs_login_values, with_config
from serverutil import ChildServer, free_port, wait_for

SERVER = Path(__file__).resolve().parent / "oidc" / "server.mjs"
MODULES = SERVER.parent / "node_modules" / "oidc-provider"
CLIENT_ID = "paddlecloud-hub"


TEST_NETWORK = ipaddress.ip_network("198.18.0.0/15")  # the real node's bridge and pods (tools/k8s/node_config.py)


def allowed_host(host: str) -> bool:
    """Whether the provider may listen on `host`: 127.0.0.1, or an address of the test network."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return str(address) == "127.0.0.1" or address in TEST_NETWORK


# kube-apiserver's default --service-node-port-range: on the node's address, kube-proxy sends
# a Service's node port to the Service, whoever listens there.
NODE_PORTS = range(30000, 32768)


def listen_port(host: str) -> int:
    """A free port on `host`; on the node's address, none that a NodePort Service could take."""
    for _ in range(100):
        port = free_port(host)
        if host == "127.0.0.1" or port not in NODE_PORTS:
            return port
    raise RuntimeError(f"no free port on {host} outside the node ports {NODE_PORTS.start}-{NODE_PORTS.stop - 1}")


@dataclass
class Account:
    password: str
    groups: list[str] = field(default_factory=list)


def missing() -> str:
    """Why the provider cannot run here ('' when it can)."""
    if not shutil.which("node"):
        return "node is not installed"
    if not MODULES.exists():
        return f"{MODULES} is missing: run `make login-deps` (npm ci in tests/oidc)"
    return ""


class OIDCProvider(ChildServer):
    """`start()`, `stop()`, `url`, `client_secret`, `set_groups(name, groups)`; endpoints from discovery."""

    label = "the OIDC provider"
    log_name = "provider.log"

    def __init__(self, folder: Path, accounts: dict[str, Account], redirect_uri: str, host: str = "127.0.0.1"):
        if not allowed_host(host):
            raise ValueError(f"the OIDC provider may listen on 127.0.0.1 or in {TEST_NETWORK}, not on {host}")
        super().__init__(folder)
        self.host = host
        self.port = listen_port(host)
        self.url = f"http://{host}:{self.port}"
        self.client_secret = "test-client-secret-" + self.folder.name
        self.accounts = {name: Account(a.password, list(a.groups)) for name, a in accounts.items()}  # its own copy
        self.redirect_uri = redirect_uri
        self.discovery: dict = {}

    def _write_users(self) -> None:
        tmp = self.folder / "users.json.tmp"
        tmp.write_text(json.dumps({name: {"password": a.password, "groups": a.groups}
                                   for name, a in self.accounts.items()}))
        tmp.replace(self.folder / "users.json")  # the server reads a whole file, old or new

    def set_groups(self, name: str, groups: list[str]) -> None:
        """Change a user's groups in the provider, as its admin would (the next login sees them)."""
        self.accounts[name].groups = list(groups)
        self._write_users()

    def start(self, timeout: float = 60) -> "OIDCProvider":
        reason = missing()
        if reason:
            raise RuntimeError(f"the OIDC provider cannot start: {reason}")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_users()
        config = self.folder / "provider.json"
        config.write_text(json.dumps({
            "host": self.host, "port": self.port, "issuer": self.url, "users_file": str(self.folder / "users.json"),
            "clients": [{"client_id": CLIENT_ID, "client_secret": self.client_secret,
                         "redirect_uris": [self.redirect_uri]}]}))
        self.spawn(["node", str(SERVER), str(config)], cwd=SERVER.parent)

        def discovered() -> dict | None:
            self.check_alive()
            try:
                response = requests.get(self.url + "/.well-known/openid-configuration", timeout=5)
            except requests.RequestException:
                return None
            return response.json() if response.status_code == 200 else None

        self.discovery = wait_for(discovered, timeout, f"the OIDC provider at {self.url}", interval=0.2)
        return self

    def endpoints(self) -> dict[str, str]:
        """GenericOAuthenticator's three URLs, from the provider's discovery document."""
        return {"authorize_url": self.discovery["authorization_endpoint"],
                "token_url": self.discovery["token_endpoint"],
                "userdata_url": self.discovery["userinfo_endpoint"]}


# The provider's users: alice is an admin through her group, eve is in no allowed group.
ACCOUNTS = {"alice": Account("alice-sso-pw", ["vision", "audio", "hub-admins"]),
            "bob": Account("bob-sso-pw", ["vision", "audio"]),
            "eve": Account("eve-sso-pw", ["outsiders"])}


class OIDCHub(LocalHub):
    """The local hub (hub_config/local_config.py) logging in through its own OIDCProvider with
    the docs' OpenID Connect values (docs/admin/logins.md), configured as the chart does from them (tests/loginvalues.py),
    the provider's and this hub's addresses put in for example.org; the client secret in the
    environment variable the values' secretEnv names (from a Secret in the chart)."""

    def __init__(self, home, accounts: dict[str, Account] = ACCOUNTS):
        super().__init__(home)
        self.provider = OIDCProvider(self.home.parent / "provider", accounts, f"{self.url}/hub/oauth_callback")
        self.config_file = self.home.parent / "hub-config.yaml"
        self.values = docs_login_values("oidc")
        self.login_service = self.values["hub"]["config"]["GenericOAuthenticator"]["login_service"]

    def start(self, timeout: float = 120) -> "OIDCHub":
        self.provider.start()
        self.values = with_config(self.values, "GenericOAuthenticator", oauth_callback_url=f"{self.url}/hub/oauth_callback",
                                  **self.provider.endpoints())
        return super().start(timeout)

    def stop(self, grace: float = 90) -> list[str]:
        try:
            return super().stop(grace)
        finally:
            self.provider.stop()

    def environment(self) -> dict[str, str]:
        (secret,) = self.values["hub"]["secretEnv"]
        return {**super().environment(), **hub_environment(self.values, self.config_file),
                secret["name"]: self.provider.client_secret}


def running_oidc_hub(tmp_path_factory, name: str):
    """A module fixture's body: an OIDCHub started in a fresh folder, stopped and checked for
    tracebacks after the module; skips (fails, under PADDLECLOUD_REQUIRE_REAL_NODE=1) where
    the provider cannot run. Use as `yield from running_oidc_hub(tmp_path_factory, "x")`."""
    if missing():
        skip_or_fail(missing())
    hub = OIDCHub(tmp_path_factory.mktemp(name) / "paddlecloud")
    try:
        hub.start()
        yield hub
    finally:
        hub.stop_and_check()


def login_through_provider(hub_url: str, name: str, password: str) -> tuple[requests.Session, requests.Response]:
    """The OAuth dance as a browser does it, with an HTTP client: the hub's login link, the
    provider's own login form, back to the hub. Returns the session and the last answer."""
    session = requests.Session()
    page = session.get(hub_url + "/hub/oauth_login?next=/hub/home", timeout=60)  # -> the provider's form
    action = re.search(r'<form method="post" action="([^"]+)"', page.text)
    if page.status_code != 200 or not action:
        raise AssertionError(f"no provider login form at {page.url}: HTTP {page.status_code} {page.text[:500]}")
    provider = re.match(r"https?://[^/]+", page.url).group(0)
    answer = session.post(provider + action.group(1), data={"login": name, "password": password}, timeout=60)
    return session, answer
