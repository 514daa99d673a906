"""Schemathesis fuzzes both APIs against their OpenAPI documents, on the real servers with
real auth: /paddle/api on a real Jupyter server (its token), and /services/quota/api in the
real local JupyterHub (an admin's hub API token). No answer may be a 5xx, and every answer
must match the document (status, content type, headers, body schema).

Bounded for a 2-core machine: a fixed number of examples per operation, and each job a
fuzzed POST creates is cancelled at once; at the end no job may be running, no process
left, and no token may appear in the servers' logs.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from hubutil import LocalHub
from paddle_ext.constants import QUOTA_FILE_ENV
from paddle_ext.hub.quota_handlers import openapi_document as quota_document
from paddle_ext.server.handlers import openapi_document as jobs_document
from serverutil import JupyterServer, job_pids, wait_for

# Schemathesis's pytest plugin (its `parametrize`): left out of every other pytest run
# (pyproject.toml's addopts), loaded here.
pytest_plugins = ["schemathesis.pytest.plugin"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = 20  # per operation and phase; the run stays within a couple of minutes on 2 cores
# The credentials the fuzzer sends: the Jupyter server's token, and the hub admin's API
# token once the hub is up (set by the fixtures, read at each call).
TOKENS = {"jobs": secrets.token_hex(20), "quota": ""}
# A job that exists (and has ended), so the fuzzer also reaches the answers about a real job.
DONE_JOB = "fuzz-done"
# Counted for the hostile-input table (docs/development/hostile-input.md) (printed at the end of the run).
CALLS: Counter = Counter()


def fuzz_config(missing_token_is_401: bool, parameters: dict | None = None) -> schemathesis.Config:
    checks = {
        # Schema-valid input may still break a documented rule beyond the schema (a dataset
        # the deployment does not offer, an unknown hub user): 400 is a correct answer.
        "positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]},
    }
    if not missing_token_is_401:
        # jupyter_server answers a missing token with 403 (documented as such), and this check
        # insists on 401 for a missing Authorization header. `ignored_auth` still checks that
        # every operation refuses requests without a token, or with a wrong one (401 or 403).
        checks["missing_required_header"] = {"enabled": False}
    return schemathesis.Config.from_dict({
        "generation": {"max-examples": EXAMPLES, "deterministic": False},
        "phases": {"stateful": {"enabled": False}},
        "request-timeout": 60,
        "checks": checks,
        "parameters": parameters or {},
    })


def token_auth(schema, api: str) -> None:
    """Sends `Authorization: token <TOKENS[api]>` (so schemathesis knows it as the API's auth)."""
    @schema.auth()
    class Token:
        def get(self, case, context):
            return TOKENS[api]

        def set(self, case, data, context):
            case.headers = {**(case.headers or {}), "Authorization": f"token {data}"}


def settings_for_fuzzing(test):
    return settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=EXAMPLES)(test)


def record(api: str, case, response) -> None:
    """Count the answer for the figures; a 5xx fails the test that got it, documented or not."""
    CALLS[(api, f"{case.method} {case.operation.path}", response.status_code // 100)] += 1
    assert response.status_code < 500, f"{case.method} {case.formatted_path} answered {response.status_code}: " \
                                       f"{response.text[:300]}"


@pytest.fixture(scope="module", autouse=True)
def fuzz_figures():
    """After the module, whatever order its tests ran in: what the fuzz runs sent, by API,
    operation and status class (for docs/development/hostile-input.md; shown with -s)."""
    CALLS.clear()
    yield CALLS
    for api in ("jobs", "quota"):
        total = sum(n for (a, _, _), n in CALLS.items() if a == api)
        by_class = Counter()
        for (a, _, status_class), n in CALLS.items():
            if a == api:
                by_class[f"{status_class}xx"] += n
        print(f"\n{api}: {total} requests, {dict(sorted(by_class.items()))}")
        for (a, operation, status_class), n in sorted(CALLS.items()):
            if a == api:
                print(f"  {operation}: {n} answered {status_class}xx")


# ------------------------------------------------------------------ /paddle/api on a Jupyter server

@pytest.fixture(scope="module")
def jobs_server(tmp_path_factory, workdir):
    home = tmp_path_factory.mktemp("fuzz-home")
    # At most two running jobs: fuzzed submits beyond that wait Queued (and are cancelled at once).
    quota_file = home / "quotas.json"
    quota_file.write_text(json.dumps({"version": 1, "default": {"limits": {"running_jobs": 2}, "revision": 1}}))
    server = JupyterServer(home, workdir, token=TOKENS["jobs"], env={QUOTA_FILE_ENV: str(quota_file)},
                           args=["--ServerApp.log_level=DEBUG"]).start()
    try:
        server.submit(name=DONE_JOB, command=["python", "-c", "print('done')"])
        server.wait_for(DONE_JOB, ("Succeeded",))
        yield server
        leftover = wait_until_jobs_ended(server)
        assert leftover == [], f"jobs still running after the fuzz run: {leftover}"
        assert job_pids(server.home) == []
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert TOKENS["jobs"] not in log, "the server's token appears in its log"


def wait_until_jobs_ended(server, timeout=60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = server.api("GET", "/jobs").json()["jobs"]
        running = [job["name"] for job in jobs if job["phase"] not in ("Succeeded", "Failed", "Cancelled")]
        for name in running:
            server.api("DELETE", f"/jobs/{name}")
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(1)


# The document in the repo; each call goes to the running server. A second pass pins the
# job name to a job that exists (the first one's names are drawn, and name no job).
jobs_schema = schemathesis.openapi.from_dict(jobs_document(), config=fuzz_config(missing_token_is_401=False))
token_auth(jobs_schema, "jobs")
existing_job_schema = schemathesis.openapi.from_dict(
    jobs_document(), config=fuzz_config(missing_token_is_401=False, parameters={"name": DONE_JOB}),
).include(path_regex=r"\{name\}")
token_auth(existing_job_schema, "jobs")


def test_the_served_job_api_document_is_the_one_in_the_repo(jobs_server):
    served = jobs_server.api("GET", "/openapi.json").json()
    assert served == {**jobs_document(), "servers": [{"url": "/paddle/api"}]}


@jobs_schema.parametrize()
@settings_for_fuzzing
def test_job_api_conforms_and_never_fails_with_5xx(case, jobs_server):
    response = case.call_and_validate(base_url=f"{jobs_server.url}/paddle/api")
    record("jobs", case, response)
    if case.method == "POST" and response.status_code == 201:  # bounded load: stop what the fuzzer started
        cancelled = jobs_server.api("DELETE", f"/jobs/{response.json()['name']}")
        assert cancelled.status_code == 202, cancelled.text


@existing_job_schema.parametrize()
@settings_for_fuzzing
def test_job_api_on_an_existing_job_conforms(case, jobs_server):
    response = case.call_and_validate(base_url=f"{jobs_server.url}/paddle/api")
    record("jobs", case, response)


# ------------------------------------------------------------------ /services/quota/api in the local hub

@pytest.fixture(scope="module")
def quota_hub(tmp_path_factory):
    hub = LocalHub(tmp_path_factory.mktemp("fuzz-hub") / "paddlecloud")
    try:
        hub.start()
        hub.admin_token = TOKENS["quota"] = hub.new_token(hub.login("admin"), "admin")
        assert hub.hub_api("POST", "/users/alice", hub.admin_token).status_code in (201, 409)
        assert hub.hub_api("POST", "/groups/ml", hub.admin_token).status_code in (201, 409)
        wait_for_service(hub)
        yield hub
    finally:
        hub.stop_and_check()
    log = hub.log_path.read_text(errors="replace")
    assert hub.admin_token not in log and hub.password not in log, "a token or the password appears in the hub's log"


def wait_for_service(hub, timeout=120.0) -> None:
    def answers() -> bool:
        try:
            return requests.get(f"{hub.url}/services/quota/api/quotas/default", timeout=10,
                                headers={"Authorization": f"token {hub.admin_token}"}).status_code == 200
        except requests.RequestException:
            return False

    wait_for(answers, timeout, "the quota service to answer", interval=0.5)


quota_schema = schemathesis.openapi.from_dict(quota_document(), config=fuzz_config(missing_token_is_401=True))
token_auth(quota_schema, "quota")
known_names_schema = schemathesis.openapi.from_dict(
    quota_document(), config=fuzz_config(missing_token_is_401=True, parameters={"user": "alice", "group": "ml"}),
).include(path_regex=r"\{(user|group)\}")
token_auth(known_names_schema, "quota")


def test_the_served_quota_api_document_is_the_one_in_the_repo(quota_hub):
    served = requests.get(f"{quota_hub.url}/services/quota/api/openapi.json", timeout=30,
                          headers={"Authorization": f"token {quota_hub.admin_token}"}).json()
    assert served == {**quota_document(), "servers": [{"url": "/services/quota/api"}]}


@quota_schema.parametrize()
@settings_for_fuzzing
def test_quota_api_conforms_and_never_fails_with_5xx(case, quota_hub):
    response = case.call_and_validate(base_url=f"{quota_hub.url}/services/quota/api")
    record("quota", case, response)


BAD_NAMES = ["%00", "%2E%2E", "a%2Fb", "a" * 300, "%C3%BC", "a%0A", "%FF", "-a", "%E2%80%AE", "%25", "..%2F..",
             "admin%00", "x y"]


def test_hostile_user_and_group_names_are_400_never_5xx(quota_hub):
    """Through the hub's proxy, and straight to the service. configurable-http-proxy (5.3.0,
    the latest) answers 500 itself for a path that is not valid percent-encoding ('%FF': its
    decodeURIComponent throws) before any service sees it; the service alone answers 400."""
    headers = {"Authorization": f"token {quota_hub.admin_token}"}
    direct = quota_hub.hub_api("GET", "/services/quota", quota_hub.admin_token).json()["url"]
    quota_file = quota_hub.home / "quotas.json"
    before = quota_file.read_text() if quota_file.exists() else ""
    for base in (f"{quota_hub.url}/services/quota", direct.rstrip("/") + "/services/quota"):
        for name in BAD_NAMES:
            if name == "%FF" and base.startswith(quota_hub.url):
                continue  # the proxy's 500, above
            for kind in ("users", "groups"):
                for method in ("GET", "PUT"):
                    response = requests.request(method, f"{base}/api/quotas/{kind}/{name}", headers=headers,
                                                json={"gpus": 1}, timeout=30)
                    # 404: the proxy in front resolved '..' before the service saw it
                    assert response.status_code in (400, 404), (method, base, kind, name, response.status_code,
                                                                response.text[:200])
                    assert response.json()["message"].endswith("."), response.text[:200]
    after = quota_file.read_text() if quota_file.exists() else ""
    assert after == before, "a refused name changed the stored quotas"


@known_names_schema.parametrize()
@settings_for_fuzzing
def test_quota_api_on_known_users_and_groups_conforms(case, quota_hub):
    response = case.call_and_validate(base_url=f"{quota_hub.url}/services/quota/api")
    record("quota", case, response)
