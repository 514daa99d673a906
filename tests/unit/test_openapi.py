"""The OpenAPI documents against the code: every route each server registers (and every
method its handler implements) is documented, nothing documented is missing, the
documents are valid OpenAPI 3, and the limits they state are the code's own.

The servers are fuzzed against these documents in tests/local/test_openapi_fuzz.py.
"""

from __future__ import annotations

import copy
import re

import pytest
import schemathesis
from tornado import web

from paddle_ext.hub.quota_service import QuotaService
from paddle_ext.hub.quota_handlers import UnknownPathHandler as QuotaFallback
from paddle_ext.hub.quota_handlers import openapi_document as quota_document
from paddle_ext.grammars import JOB_NAME_PATTERN, MAX_JOB_NAME_LENGTH, QUANTITY_PATTERN
from paddle_ext.quantity import LARGEST_COUNT
from paddle_ext.server.app import PaddleCloudExtension
from paddle_ext.server.handlers import API_PREFIX, FALLBACK
from paddle_ext.server.handlers import openapi_document as jobs_document
from paddle_ext.spec import MAX_RESTARTS, MAX_RUNTIME_SECONDS, MAX_WORKERS

METHODS = ("get", "post", "put", "patch", "delete")
QUOTA_API = "/services/quota/api"


def shape(path: str) -> str:
    """A route or a documented path with its parameters blanked: /jobs/{}/logs."""
    path = re.sub(r"\{[^}]+\}", "{}", path)                 # documented: /jobs/{name}
    path = re.sub(r"\((\?P<\w+>)?\[\^/\]\+\)", "{}", path)  # routed: (?P<name>[^/]+) or ([^/]+)
    return path.removesuffix("$").removesuffix("/?").rstrip("/") or "/"


def implemented(handler: type) -> set[str]:
    return {m for m in METHODS if getattr(handler, m) is not getattr(web.RequestHandler, m)}


def documented(document: dict) -> dict[str, set[str]]:
    return {shape(path): {m for m in item if m in METHODS} for path, item in document["paths"].items()}


def jobs_routes() -> dict[str, set[str]]:
    """What the Jupyter server extension registers under /paddle/api (the catch-all 404 aside)."""
    extension = PaddleCloudExtension()
    extension.initialize_handlers()
    routes = {}
    for pattern, handler, *_ in extension.handlers:
        if (pattern, handler) == FALLBACK:
            continue
        assert pattern.startswith(API_PREFIX + "/"), pattern
        routes[shape(pattern[len(API_PREFIX):])] = implemented(handler)
    return routes


def quota_routes(monkeypatch) -> dict[str, set[str]]:
    """What the quota service registers under its api/ (the page, OAuth and static files aside)."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "unit-test-token")
    app = QuotaService().make_app()
    routes = {}
    for rule in app.wildcard_router.rules:
        pattern, handler = rule.matcher.regex.pattern, rule.target
        if not pattern.startswith(QUOTA_API + "/") or handler is QuotaFallback:
            continue
        routes[shape(pattern[len(QUOTA_API):])] = implemented(handler)
    return routes


def test_every_route_of_the_job_api_is_documented_and_nothing_else():
    routes, paths = jobs_routes(), documented(jobs_document())
    assert {path: methods for path, methods in routes.items() if paths.get(path) != methods} == {}, \
        "routes missing from paddle_ext/server/openapi.yaml (or with other methods there)"
    assert set(paths) - set(routes) == set(), "documented paths the server does not route"


def test_every_route_of_the_quota_api_is_documented_and_nothing_else(monkeypatch):
    routes, paths = quota_routes(monkeypatch), documented(quota_document())
    assert {path: methods for path, methods in routes.items() if paths.get(path) != methods} == {}, \
        "routes missing from paddle_ext/hub/quota_openapi.yaml (or with other methods there)"
    assert set(paths) - set(routes) == set(), "documented paths the service does not route"


def test_the_route_check_sees_a_missing_path():
    """The check above is real: a routed path left out of the document shows up."""
    document = copy.deepcopy(jobs_document())  # the document is cached: never change the original
    del document["paths"]["/jobs/{name}/metrics"]
    routes, paths = jobs_routes(), documented(document)
    assert {path for path, methods in routes.items() if paths.get(path) != methods} == {"/jobs/{}/metrics"}


@pytest.mark.parametrize("document", [jobs_document(), quota_document()], ids=["jobs", "quota"])
def test_documents_are_valid_openapi_3(document):
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()
    assert document["openapi"].startswith("3.")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(methods) for methods in documented(document).values())


def test_the_job_spec_limits_in_the_document_are_the_codes():
    spec = jobs_document()["components"]["schemas"]["JobSpec"]["properties"]
    assert spec["name"]["maxLength"] == MAX_JOB_NAME_LENGTH
    assert spec["name"]["pattern"] == JOB_NAME_PATTERN.pattern
    assert spec["workers"]["maximum"] == MAX_WORKERS
    assert spec["max_runtime_seconds"]["maximum"] == MAX_RUNTIME_SECONDS
    assert spec["max_restarts"]["maximum"] == MAX_RESTARTS
    quantity = jobs_document()["components"]["schemas"]["Quantity"]["pattern"]
    assert quantity == QUANTITY_PATTERN.pattern


def test_the_quota_limits_in_the_document_are_the_codes():
    assert str(LARGEST_COUNT) in quota_document()["components"]["schemas"]["Patch"]["description"]
