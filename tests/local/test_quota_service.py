"""The quota service (/services/quota/) in the real local JupyterHub (hub_config/local_config.py):
who may read and write, validation that writes nothing, the resolution rule through the
hub's groups, stale-write conflicts, and the local backend enforcing what was set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import requests

from hubutil import LocalHub
from paddle_ext.backends.local import LocalBackend
from paddle_ext.errors import QuotaExceeded
from paddle_ext.spec import JobSpec
from serverutil import Gate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUOTA_ADMIN = "carol"  # not a hub admin; holds custom:paddlecloud-quota:admin


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    saved = os.environ.get("PADDLECLOUD_QUOTA_ADMINS")
    os.environ["PADDLECLOUD_QUOTA_ADMINS"] = QUOTA_ADMIN
    hub = LocalHub(tmp_path_factory.mktemp("quota-hub") / "paddlecloud")
    try:
        hub.start()
        yield hub
    finally:
        if saved is None:
            os.environ.pop("PADDLECLOUD_QUOTA_ADMINS", None)
        else:
            os.environ["PADDLECLOUD_QUOTA_ADMINS"] = saved
        hub.stop_and_check()


@pytest.fixture(scope="module")
def tokens(hub):
    """Hub API tokens, each made by its user through the login form."""
    made = {}
    for name in ("admin", "alice", "bob", QUOTA_ADMIN):
        session = hub.login(name)
        made[name] = hub.new_token(session, name)
    # The service comes up with the hub, but may need a moment on a busy machine.
    wait_for(lambda: call(hub, "GET", "/users/admin", made["admin"]).status_code == 200, 120,
             "the quota service to answer")
    return made


@pytest.fixture(autouse=True)
def fresh_quotas(hub):
    """Each test starts from no quota settings at all, whatever ran before it."""
    quota_file(hub).unlink(missing_ok=True)


def call(hub, method, path, token=None, body=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.request(method, f"{hub.url}/services/quota/api/quotas{path}", headers=headers,
                            json=body, timeout=60, allow_redirects=False)


def quota_file(hub) -> Path:
    return hub.home / "quotas.json"


def stored(hub) -> dict:
    path = quota_file(hub)
    return json.loads(path.read_text()) if path.exists() else {}


def test_admins_write_users_read_their_own_others_get_403(hub, tokens):
    put = call(hub, "PUT", "/users/alice", tokens["admin"], {"gpus": 2, "cpu": "4", "running_jobs": 1})
    assert put.status_code == 200, put.text
    assert put.json()["limits"] == {"gpus": 2, "cpu": "4", "running_jobs": 1}
    assert stored(hub)["users"]["alice"]["limits"] == {"gpus": 2, "cpu": "4", "running_jobs": 1}

    own = call(hub, "GET", "/users/alice", tokens["alice"])
    assert own.status_code == 200, own.text
    assert own.json()["limits"]["gpus"] == 2 and own.json()["sources"]["gpus"] == "user"
    assert own.json()["used"]["running_jobs"] == 0

    before = quota_file(hub).read_text()
    for method, path, body in [
        ("PUT", "/users/alice", {"gpus": 8}),          # raising her own quota
        ("PUT", "/users/bob", {"gpus": 8}),
        ("PUT", "/groups/anything", {"gpus": 8}),
        ("PUT", "/default", {"gpus": 8}),
        ("GET", "/users/bob", None),                   # someone else's quota
        ("GET", "", None),                             # the overview
    ]:
        response = call(hub, method, path, tokens["alice"], body)
        assert response.status_code == 403, (method, path, response.status_code, response.text)
        assert response.json()["error"] == "forbidden" and response.json()["message"].endswith(".")
    assert quota_file(hub).read_text() == before

    anonymous = call(hub, "GET", "/users/alice")
    assert anonymous.status_code == 401, anonymous.text

    # A holder of the custom scope may write without being a hub admin.
    by_scope = call(hub, "PUT", "/users/bob", tokens[QUOTA_ADMIN], {"memory": "8Gi"})
    assert by_scope.status_code == 200, by_scope.text
    overview = call(hub, "GET", "", tokens[QUOTA_ADMIN])
    assert overview.status_code == 200
    users = {u["user"]: u for u in overview.json()["users"]}
    assert users["bob"]["limits"] == {"memory": "8Gi"} and users["alice"]["limits"]["gpus"] == 2


def scoped_token(hub, name: str, scopes: list[str]) -> str:
    """A hub API token of the logged-in user `name` holding only `scopes`."""
    session = hub.login(name)
    response = session.post(
        f"{hub.url}/hub/api/users/{name}/tokens", json={"note": "scoped", "expires_in": 3600, "scopes": scopes},
        headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/") or session.cookies.get("_xsrf")},
        timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["token"]


def test_quota_admin_needs_the_tokens_own_admin_scope_not_the_owners_admin_flag(hub, tokens):
    """An admin's token made for reading users only may not change quotas (issue 25: any
    admin-owned token did); the admin's full token still may."""
    before = stored(hub)
    for scopes in (["read:users"], ["read:users", "access:services!service=quota"]):
        narrow = scoped_token(hub, "admin", scopes)
        for method, path in (("PUT", "/users/bob"), ("PUT", "/default"), ("GET", "")):
            refused = call(hub, method, path, narrow, {"gpus": 7} if method == "PUT" else None)
            assert refused.status_code == 403, (scopes, method, path, refused.status_code, refused.text)
            assert refused.json()["error"] == "forbidden"
    assert stored(hub) == before
    full = call(hub, "PUT", "/users/bob", tokens["admin"], {"gpus": 7})
    assert full.status_code == 200, full.text
    assert stored(hub)["users"]["bob"]["limits"] == {"gpus": 7}


@pytest.mark.parametrize("path, body, field, words", [
    ("/users/alice", {"gpus": -1}, "gpus", "must not be negative"),
    ("/users/alice", {"gpus": "lots"}, "gpus", "must be a whole number"),
    ("/users/alice", {"cpu": "4", "memory": "a lot"}, "memory", "is not a Kubernetes quantity"),
    ("/users/alice", {"gpus": 1, "gpu_count": 3}, "gpu_count", "unknown field"),
    ("/users/zed", {"gpus": 1}, "user", "no hub user named 'zed'"),
    ("/groups/nosuchgroup", {"gpus": 1}, "group", "no hub group named 'nosuchgroup'"),
    ("/default", {"running_jobs": 1.5}, "running_jobs", "must be a whole number"),
])
def test_invalid_input_is_400_naming_the_field_and_writes_nothing(hub, tokens, path, body, field, words):
    call(hub, "PUT", "/default", tokens["admin"], {"pods": 50}).raise_for_status()  # the file exists
    before = quota_file(hub).read_text()
    response = call(hub, "PUT", path, tokens["admin"], body)
    assert response.status_code == 400, response.text
    data = response.json()
    assert data["error"] == "bad_quota"
    assert words in data["fields"][field], data
    assert field in data["message"] or words in data["message"]
    assert quota_file(hub).read_text() == before


async def test_group_limit_applies_to_a_new_member_and_a_user_override_wins(hub, tokens):
    admin = tokens["admin"]
    newbie = f"newbie-{os.urandom(3).hex()}"  # a user the hub has never seen
    assert hub.hub_api("POST", "/groups/ml", admin).status_code in (201, 409)
    call(hub, "PUT", "/default", admin, {"gpus": 1, "running_jobs": 3}).raise_for_status()
    call(hub, "PUT", "/groups/ml", admin, {"gpus": 4}).raise_for_status()

    assert hub.hub_api("POST", f"/users/{newbie}", admin).status_code == 201
    assert hub.hub_api("POST", "/groups/ml/users", admin, json={"users": [newbie]}).status_code == 200
    view = call(hub, "GET", f"/users/{newbie}", admin).json()
    assert view["groups"] == ["ml"]
    assert (view["limits"]["gpus"], view["sources"]["gpus"]) == (4, "group:ml")
    assert (view["limits"]["running_jobs"], view["sources"]["running_jobs"]) == (3, "default")

    call(hub, "PUT", f"/users/{newbie}", admin, {"gpus": 1}).raise_for_status()
    view = call(hub, "GET", f"/users/{newbie}", admin).json()
    assert (view["limits"]["gpus"], view["sources"]["gpus"]) == (1, "user")

    # null clears the override: the group's value is back; left-out fields are kept.
    call(hub, "PUT", f"/users/{newbie}", admin, {"cpu": "2"}).raise_for_status()
    view = call(hub, "PUT", f"/users/{newbie}", admin, {"gpus": None}).json()
    assert view["limits"]["gpus"] == 4 and view["override"]["cpu"] == "2"

    # The newbie's own backend (groups asked from the hub with their token) enforces it.
    session = hub.login(newbie)
    env = {"JUPYTERHUB_API_URL": f"{hub.url}/hub/api", "JUPYTERHUB_API_TOKEN": hub.new_token(session, newbie)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        backend = LocalBackend(home=str(hub.home / "users" / newbie / ".paddlecloud"), user=newbie,
                               quota_file=str(quota_file(hub)), max_gpus_per_worker=8)
        with pytest.raises(QuotaExceeded) as info:
            await backend.submit(JobSpec(command=("python", "train.py"), workers=5, gpus_per_worker=1))
        assert info.value.message == "Needs 5 GPUs; your quota is 4, so the job could never start. Ask for less."
        quota = (await backend.quota()).to_dict()
        assert quota["limits"]["gpus"] == 4 and quota["sources"]["gpus"] == "group:ml"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_a_stale_edit_gets_409_and_changes_nothing(hub, tokens):
    admin = tokens["admin"]
    first = call(hub, "GET", "/users/bob", admin).json()
    # Two admins loaded bob's quota at the same revision; the first one saves.
    saved = call(hub, "PUT", "/users/bob", admin, {"gpus": 3, "revision": first["revision"]})
    assert saved.status_code == 200, saved.text
    before = quota_file(hub).read_text()
    stale = call(hub, "PUT", "/users/bob", tokens[QUOTA_ADMIN], {"gpus": 6, "revision": first["revision"]})
    assert stale.status_code == 409, stale.text
    assert stale.json()["error"] == "conflict" and "reload" in stale.json()["message"]
    assert quota_file(hub).read_text() == before
    assert call(hub, "GET", "/users/bob", admin).json()["limits"]["gpus"] == 3


def test_a_users_server_enforces_and_reports_what_the_admin_set(hub, tokens):
    """Through the hub's proxy to alice's own JupyterLab server: the REST API's quota and
    submit use the hub's quota file, and alice's groups come from the hub."""
    admin, alice = tokens["admin"], tokens["alice"]
    assert hub.hub_api("POST", "/groups/vision", admin).status_code in (201, 409)
    assert hub.hub_api("POST", "/groups/vision/users", admin, json={"users": ["alice"]}).status_code == 200
    call(hub, "PUT", "/groups/vision", admin, {"cpu": "3"}).raise_for_status()
    call(hub, "PUT", "/users/alice", admin, {"gpus": 2}).raise_for_status()
    hub.spawn("alice", alice)

    api = f"{hub.url}/user/alice/paddle/api"
    headers = {"Authorization": f"token {alice}"}
    quota = requests.get(api + "/quota", headers=headers, timeout=60)
    assert quota.status_code == 200, quota.text
    assert quota.json()["limits"]["cpu"] == "3" and quota.json()["sources"]["cpu"] == "group:vision"
    assert quota.json()["limits"]["gpus"] == 2 and quota.json()["user"] == "alice"

    refused = requests.post(api + "/jobs", headers=headers, timeout=60,
                            json={"command": ["python", "train.py"], "workers": 2, "cpu": "2"})
    assert refused.status_code == 403, refused.text
    assert refused.json() == {"error": "quota_exceeded",
                              "message": "Needs 4 CPU; your quota is 3, so the job could never start. Ask for less."}
    assert requests.get(api + "/jobs", headers=headers, timeout=60).json()["jobs"] == []


def overview_call(hub, method, path, token):
    return requests.request(method, f"{hub.url}/services/quota/api/{path}", timeout=60, allow_redirects=False,
                            headers={"Authorization": f"token {token}"})


async def test_admin_overview_lists_every_running_job_and_cancel_is_audited(hub, tokens, workdir, tmp_path):
    admin = tokens["admin"]
    groups = [f"team-{os.urandom(3).hex()}" for _ in range(2)]  # bob is in both: his hours count in each
    for group in groups:
        assert hub.hub_api("POST", f"/groups/{group}", admin).status_code == 201
        assert hub.hub_api("POST", f"/groups/{group}/users", admin, json={"users": ["bob"]}).status_code == 200
    # A real job of bob's, in bob's job folder, as his own server would start it; his
    # deployment allows a GPU per local worker, so it holds 2 GPUs while it runs.
    bob = LocalBackend(home=str(hub.home / "users" / "bob" / ".paddlecloud"), user="bob", max_gpus_per_worker=1,
                       working_dir=str(workdir), quota_file=str(tmp_path / "no-quota.json"))
    job = await bob.submit(JobSpec(command=("python", "ticker.py", "--until", str(Gate(tmp_path))), workers=2,
                                   gpus_per_worker=1, cpu="1500m", memory="1Gi"))
    try:
        assert overview_call(hub, "GET", "overview", tokens["alice"]).status_code == 403
        assert overview_call(hub, "GET", "overview", tokens[QUOTA_ADMIN]).status_code == 200
        response = overview_call(hub, "GET", "overview", admin)
        assert response.status_code == 200, response.text
        data = response.json()
        assert "queues" not in data  # no Kueue here: no queues section (it is Kueue's ClusterQueues)
        (row,) = [r for r in data["jobs"] if r["name"] == job.name]
        assert {k: row[k] for k in ("user", "workers", "gpus", "cpu", "memory", "backend")} == {
            "user": "bob", "workers": 2, "gpus": 2, "cpu": "3", "memory": "2Gi", "backend": "local"}
        assert row["phase"] in ("Pending", "Running") and row["age_seconds"] >= 0
        capacity = data["capacity"]
        assert capacity["source"] == "local"
        (node,) = capacity["nodes"]
        assert node["capacity"]["gpus"] == 0 and node["capacity"]["cpu"] == str(os.cpu_count())
        assert node["capacity"]["memory"].endswith("Gi")
        assert (node["used"]["gpus"], node["used"]["cpu"], node["used"]["memory"]) == (2, "3", "2Gi")
        assert capacity["total"] == {"capacity": node["capacity"], "used": node["used"]}
        assert data["gpu_hours"]["windows"] == ["7d", "30d"]

        # GPU-hours count the running job up to now: 2 GPUs for 9 s make the first 0.01.
        def hours():
            answer = overview_call(hub, "GET", "overview", admin).json()["gpu_hours"]
            users = {u["user"]: u for u in answer["users"]}
            return answer if users["bob"]["7d"] > 0 else None

        answer = wait_for(hours, 120, "GPU-hours of bob's running job in the overview")
        users = {u["user"]: u for u in answer["users"]}
        assert {"admin", "alice", "bob"} <= set(users) and set(users["bob"]) == {"user", "groups", "7d", "30d"}
        assert sorted(users["bob"]["groups"]) == sorted(groups) and users["alice"]["7d"] == 0
        for group in groups:
            (entry,) = [g for g in answer["groups"] if g["group"] == group]
            assert entry["members"] == ["bob"] and entry["7d"] == users["bob"]["7d"]

        # Only admins cancel; the log names who did.
        refused = overview_call(hub, "DELETE", f"jobs/bob/{job.name}", tokens["alice"])
        assert refused.status_code == 403 and not (await bob.get(job.name)).done
        assert overview_call(hub, "DELETE", "jobs/bob/no-such-job", tokens["admin"]).status_code == 404
        assert overview_call(hub, "DELETE", f"jobs/nobody/{job.name}", tokens["admin"]).status_code == 400
        cancelled = overview_call(hub, "DELETE", f"jobs/bob/{job.name}", tokens["admin"])
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["phase"] == "Cancelled" and cancelled.json()["user"] == "bob"
        assert (await bob.get(job.name)).phase == "Cancelled"
        assert f"AUDIT: admin admin cancelled job {job.name} of user bob" in hub.log_tail(100_000)
        after = overview_call(hub, "GET", "overview", tokens["admin"]).json()
        assert job.name not in [r["name"] for r in after["jobs"]]
    finally:
        await bob.cancel(job.name)
