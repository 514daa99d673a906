"""Where the Kubernetes client's identity comes from.

Inside a pod, the pod's service account; elsewhere a kubeconfig ($KUBECONFIG or
~/.kube/config, several files joined with ':'), with client certificates, tokens, token
files, basic auth or an exec plugin (as kubectl supports them).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import subprocess
from typing import Any, Mapping

import yaml

from ..constants import SERVICE_ACCOUNT_DIR, in_cluster
from ..timestamps import parse_time


class KubeConfigError(Exception):
    """No usable credentials: the kubeconfig is missing, unreadable or unsupported."""


@dataclasses.dataclass
class Credentials:
    server: str
    namespace: str | None = None
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    exec_config: dict | None = None


def in_cluster_credentials() -> Credentials:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    folder = SERVICE_ACCOUNT_DIR
    namespace = None
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip() or None
    return Credentials(server=f"https://{host}:{port}", namespace=namespace,
                       ca_file=os.path.join(folder, "ca.crt"), token_file=os.path.join(folder, "token"))


def default_kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _load_documents(paths: str) -> list[tuple[str, dict]]:
    documents = []
    for path in filter(None, paths.split(os.pathsep)):
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except FileNotFoundError:
            continue
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"Cannot read the kubeconfig {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise KubeConfigError(f"The kubeconfig {path} is not a kubeconfig document.")
        documents.append((os.path.dirname(os.path.abspath(path)), data))
    if not documents:
        raise KubeConfigError(f"No kubeconfig found at {paths}; set KUBECONFIG to yours.")
    return documents


def _named(documents: list[tuple[str, dict]], section: str, name: str) -> tuple[str, dict]:
    """The first entry called `name` in `section` (kubectl's merge rule: first file wins)."""
    for folder, data in documents:
        for entry in data.get(section) or []:
            if entry.get("name") == name:
                key = section[:-1]  # clusters -> cluster
                return folder, entry.get(key) or {}
    raise KubeConfigError(f"The kubeconfig has no {section[:-1]} named '{name}'.")


def _relative(folder: str, path: str | None) -> str | None:
    return None if not path else path if os.path.isabs(path) else os.path.join(folder, path)


def _b64(text: str | None) -> bytes | None:
    return base64.b64decode(text) if text else None


def kubeconfig_credentials(paths: str | None = None, context: str | None = None) -> Credentials:
    """Credentials of the kubeconfig's current (or the named) context."""
    documents = _load_documents(paths or default_kubeconfig())
    if not context:
        context = next((data.get("current-context") for _, data in documents if data.get("current-context")), None)
    if not context:
        raise KubeConfigError("The kubeconfig sets no current context; pass one explicitly.")
    _, ctx = _named(documents, "contexts", context)
    cluster_folder, cluster = _named(documents, "clusters", ctx.get("cluster", ""))
    user_folder, user = _named(documents, "users", ctx.get("user", "")) if ctx.get("user") else ("", {})
    if user.get("auth-provider"):
        raise KubeConfigError("The kubeconfig's user uses an auth-provider, which is not supported; "
                              "use an exec credential plugin (as current cloud CLIs do).")
    if not cluster.get("server"):
        raise KubeConfigError(f"The kubeconfig's cluster for context '{context}' has no server.")
    return Credentials(
        server=cluster["server"].rstrip("/"),
        namespace=ctx.get("namespace"),
        ca_file=_relative(cluster_folder, cluster.get("certificate-authority")),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
        cert_file=_relative(user_folder, user.get("client-certificate")),
        key_file=_relative(user_folder, user.get("client-key")),
        cert_data=_b64(user.get("client-certificate-data")),
        key_data=_b64(user.get("client-key-data")),
        token=user.get("token"),
        token_file=_relative(user_folder, user.get("tokenFile")),
        username=user.get("username"),
        password=user.get("password"),
        exec_config=user.get("exec"),
    )


def find_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """The pod's service account inside a cluster (unless a kubeconfig is named), else the kubeconfig."""
    if in_cluster() and not kubeconfig:
        return in_cluster_credentials()
    return kubeconfig_credentials(kubeconfig, context)


@dataclasses.dataclass
class ExecResult:
    token: str | None
    cert: tuple[bytes, bytes] | None
    expires: datetime.datetime | None


def run_exec_plugin(config: Mapping[str, Any]) -> ExecResult:
    """Run a kubeconfig exec credential plugin and read its ExecCredential."""
    env = {**os.environ, **{item["name"]: item["value"] for item in config.get("env") or []}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": config.get("apiVersion", "client.authentication.k8s.io/v1"),
        "kind": "ExecCredential", "spec": {"interactive": False}})
    command = [config["command"], *(config.get("args") or [])]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeConfigError(f"The kubeconfig's credential plugin {config['command']} failed: {exc}") from exc
    if done.returncode != 0:
        raise KubeConfigError(f"The kubeconfig's credential plugin {config['command']} exited with "
                              f"{done.returncode}: {done.stderr.strip()[:300]}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except ValueError as exc:
        raise KubeConfigError(f"The credential plugin {config['command']} printed no ExecCredential.") from exc
    cert = None
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        cert = (status["clientCertificateData"].encode(), status["clientKeyData"].encode())
    return ExecResult(status.get("token"), cert, parse_time(status.get("expirationTimestamp")))
