"""Running helm and kubectl from the helm tier, and reading what the chart renders."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.k8s.cluster import default_bin_dir, missing_binaries  # noqa: E402

CHART = REPO / "helm" / "paddlecloud-hub"
VALUES = Path(__file__).resolve().parent / "values"
MATRIX = ("minimal", "full", "ingress-tls", "paddlejob", "kueue")
# Right above the values block of "Try it on this machine" in docs/admin/deploy.md (installed by test_install.py).
VALUES_MARKER = "<!-- try-values: tests/helm/test_install.py installs exactly this block -->"


def bin_dir() -> str:
    return os.environ.get("PADDLECLOUD_K8S_BIN_DIR") or default_bin_dir()


def tool(name: str) -> str:
    return os.path.join(bin_dir(), name)


def run(args: list[str], check: bool = True, timeout: float = 300, input: str | None = None,
        kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/paddlecloud-helm/cache",
           "HELM_CONFIG_HOME": "/tmp/paddlecloud-helm/config", "HELM_DATA_HOME": "/tmp/paddlecloud-helm/data"}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args[:6])} ... exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def helm(*args: str, check: bool = True, kubeconfig: str | None = None, timeout: float = 300
         ) -> subprocess.CompletedProcess:
    return run([tool("helm"), *args], check=check, kubeconfig=kubeconfig, timeout=timeout)


def kubectl(kubeconfig: str, *args: str, check: bool = True, input: str | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess:
    return run([tool("kubectl"), "--kubeconfig", kubeconfig, *args], check=check, input=input, timeout=timeout)


def values_file(name: str) -> str:
    return str(VALUES / f"{name}.yaml")


def template(*value_files: str, release: str = "pc", namespace: str = "paddlecloud", extra: tuple = ()) -> str:
    """The chart rendered by `helm template` (no cluster: lookups find nothing)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in value_files:
        args += ["-f", path]
    return helm(*args, *extra).stdout


def documents(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(docs: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{len(matches)} {kind} {name or ''} rendered"
    return matches[0]


def settings_text(docs: list[dict]) -> str:
    """The hub's settings file as the chart renders it (ConfigMap hub-settings, values.yaml)."""
    return find(docs, "ConfigMap", "hub-settings")["data"]["values.yaml"]


def secret_data(secret: dict) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


def docs_try_section() -> str:
    """"Try it on this machine" of docs/admin/deploy.md, from its values block's marker to the
    next heading."""
    text = (REPO / "docs" / "admin" / "deploy.md").read_text()
    assert text.count(VALUES_MARKER) == 1, "the try-values marker of docs/admin/deploy.md is missing or repeated"
    return text.split(VALUES_MARKER, 1)[1].split("\n#", 1)[0]


def docs_try_values() -> str:
    """The values block right after the marker, verbatim."""
    section = docs_try_section()
    assert section.startswith("\n```yaml\n"), "the marker must be right above a ```yaml block"
    return section.split("```yaml\n", 1)[1].split("\n```", 1)[0] + "\n"


NOTES_PROBE = "zz-notes-probe"  # the ConfigMap notes() adds to its copy of the chart


def notes(*value_files: str, release: str = "pc", namespace: str = "paddlecloud", extra: tuple = ()) -> str:
    """NOTES.txt as `helm install` prints it, without a cluster.

    `helm template` leaves NOTES.txt out and `helm install --dry-run=client` still wants a
    cluster, so this renders a copy of the chart where NOTES.txt is also a named template,
    put into a ConfigMap. test_dry_run.py checks it against a real install's NOTES.
    """
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pc-notes-") as tmp:
        chart = Path(tmp) / CHART.name
        shutil.copytree(CHART, chart)
        text = (CHART / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "_zz_notes_probe.tpl").write_text(
            '{{- define "pc.notesProbe" -}}\n' + text + "\n{{- end }}\n")
        (chart / "templates" / "zz-notes-probe.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\n"
            'data: {notes: {{ include "pc.notesProbe" . | toJson }}}\n' % NOTES_PROBE)
        args = ["template", release, str(chart), "--namespace", namespace,
                "--show-only", "templates/zz-notes-probe.yaml"]
        for path in value_files:
            args += ["-f", path]
        out = helm(*args, *extra).stdout
    return yaml.safe_load(out)["data"]["notes"]


def missing_tools() -> list[str]:
    return missing_binaries(bin_dir()) + [name for name in ("helm", "kubectl")
                                          if not os.path.exists(tool(name))]
