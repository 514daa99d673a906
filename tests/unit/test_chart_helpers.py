"""The chart's named helpers that spell a fact the Python package defines (the hub API port,
the pods' and containers' security contexts) say the same, read without helm."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from paddle_ext.constants import HUB_API_PORT
from paddle_ext.manifests import container_security_context, pod_security_context

HELPERS = Path(__file__).resolve().parents[2] / "helm" / "paddlecloud-hub" / "templates" / "_helpers.tpl"


def helper(name: str) -> str:
    """The body of `{{- define "name" -}} ... {{- end }}` (a helper without template actions)."""
    found = re.search(r'\{\{-? define "' + re.escape(name) + r'" -?\}\}(.*?)\{\{-? end \}\}', HELPERS.read_text(), re.S)
    assert found, f"{name} is not defined in {HELPERS.name}"
    assert "{{" not in found.group(1), f"{name} is not a plain value"
    return found.group(1)


def test_the_hub_api_port_is_the_packages():
    assert int(helper("pc.hubApiPort")) == HUB_API_PORT


def test_the_security_contexts_are_the_packages():
    assert yaml.safe_load(helper("pc.podSecurityContext")) == pod_security_context()
    assert yaml.safe_load(helper("pc.containerSecurityContext")) == container_security_context()
