"""The login values of the admin guide (docs/admin/logins.md: OpenID Connect, LDAP), for the tests that prove them: a real login
(tests/local/test_login_*.py, with the provider's addresses put in for example.org) and the chart
rendering them (tests/helm/test_chart.py). Each block sits right under its marker line,
`<!-- login-values: oidc ... -->` or `<!-- login-values: ldap ... -->`."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

PAGE = Path(__file__).resolve().parents[1] / "docs" / "admin" / "logins.md"
KINDS = ("oidc", "ldap")


def docs_login_text(kind: str) -> str:
    """The ```yaml block under the `login-values: <kind>` marker, verbatim."""
    text = PAGE.read_text()
    marker = f"<!-- login-values: {kind} "
    assert text.count(marker) == 1, f"docs/admin/logins.md's login-values marker for {kind} is missing or repeated"
    section = text.split(marker, 1)[1].split("-->", 1)[1]
    assert section.startswith("\n```yaml\n"), f"the {kind} marker must be right above a ```yaml block"
    return section.split("```yaml\n", 1)[1].split("\n```", 1)[0] + "\n"


def merged(base: dict, over: dict) -> dict:
    """helm's merge of a -f file over values.yaml: maps merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def docs_login_values(kind: str) -> dict:
    return yaml.safe_load(docs_login_text(kind))


def hub_environment(values: dict, config_file: Path) -> dict[str, str]:
    """The hub's login environment as the chart sets it from these values (deployment.yaml and
    the settings ConfigMap), the config: part written to `config_file`; secretEnv left out (the
    caller has the secrets)."""
    config_file.write_text(yaml.safe_dump(values["hub"]["config"]))
    settings = values.get("settings", {})
    return {"PADDLECLOUD_AUTHENTICATOR_CLASS": values["hub"]["authenticatorClass"],
            "PADDLECLOUD_ALLOWED_GROUPS": ",".join(settings.get("allowed_groups", [])),
            "PADDLECLOUD_ADMIN_GROUPS": ",".join(settings.get("admin_groups", [])),
            "PADDLECLOUD_HUB_CONFIG_FILE": str(config_file)}


def with_config(values: dict, section: str, **traits) -> dict:
    """A copy of the values with hub.config.<section> traits replaced (example.org -> 127.0.0.1)."""
    changed = copy.deepcopy(values)
    changed["hub"]["config"][section].update(traits)
    return changed
