"""JupyterHub with hub_config/jupyterhub_config.py (KubeSpawner) against the real control plane.

The hub, the proxy and the single-user servers are real processes; notebook pods are
real pods admitted by the API server (Pod Security `restricted`), scheduled onto KWOK
nodes, and run as local processes by tests/cluster/podrunner.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from pathlib import Path

import kubernetes
import pytest
import requests

from cluster_helpers import wait_for
from hubutil import HubError, LocalHub, free_port
from paddle_ext import tenancy
from podrunner import PodRunner, resolve_env
from serverutil import sse_events

REPO = Path(__file__).resolve().parents[2]
PREFIX = f"t5{uuid.uuid4().hex[:4]}"
DATASETS = [{"name": "imagenet", "mount_path": "/datasets/imagenet", "sub_path": "imagenet",
             "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}},
             "claim": {"accessModes": ["ReadOnlyMany"], "storageClassName": "datasets",
                       "resources": {"requests": {"storage": "1Gi"}}}}]


class KubeHub(LocalHub):
    """The Kubernetes hub config, run as a local process that talks to the test cluster."""

    config = REPO / "hub_config" / "jupyterhub_config.py"

    def __init__(self, home: Path, kubeconfig: str):
        super().__init__(home, password="any")
        self.kubeconfig = kubeconfig
        self.quota_port = free_port()

    def environment(self) -> dict[str, str]:
        env = super().environment()
        return {
            **env,
            "KUBECONFIG": self.kubeconfig,
            "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy",
            "PADDLECLOUD_ALLOWED_USERS": "alice,bob,carol",
            "PADDLECLOUD_HUB_STATE_DIR": str(self.home),
            "PADDLECLOUD_HUB_IP": "127.0.0.1", "PADDLECLOUD_HUB_API_IP": "127.0.0.1",
            "PADDLECLOUD_HUB_CONNECT_URL": f"http://127.0.0.1:{self.hub_api_port}",
            "PADDLECLOUD_HUB_NAMESPACE": f"{PREFIX}-hub",
            "PADDLECLOUD_USER_NAMESPACE_TEMPLATE": PREFIX + "-{username}",
            "PADDLECLOUD_HOME_STORAGE_CLASS": "home",
            "PADDLECLOUD_DATASETS": json.dumps(DATASETS),
            "PADDLECLOUD_WORKER_IMAGES": json.dumps([{"name": "paddle-worker:3.3.1-cpu"}]),
            "PADDLECLOUD_DEFAULT_QUOTA": json.dumps({"gpus": 2, "cpu": "40", "memory": "200Gi", "pods": 20}),
            "PADDLECLOUD_QUOTA_SERVICE_PORT": str(self.quota_port),
        }

    def start_server(self, name: str, token: str, profile: str) -> requests.Response:
        if self.hub_api("GET", f"/users/{name}", token).status_code == 404:
            assert self.hub_api("POST", f"/users/{name}", token).status_code == 201
        return self.hub_api("POST", f"/users/{name}/server", token, json={"profile": profile})

    def wait_ready(self, name: str, token: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.hub_api("GET", f"/users/{name}", token).json().get("servers", {}).get("")
            if server and server.get("ready"):
                return
            if not server:
                raise HubError(f"{name}'s server stopped while starting:\n{self.log_tail()}")
            time.sleep(0.5)
        raise HubError(f"{name}'s server not ready in {timeout}s:\n{self.log_tail()}")


def storage_pool(core_v1, tmp_path):
    """Static PersistentVolumes for home and dataset claims (no provisioner runs here)."""
    for kind, modes, count in (("home", ["ReadWriteOnce"], 6), ("datasets", ["ReadOnlyMany"], 6)):
        for i in range(count):
            core_v1.create_persistent_volume({"metadata": {"name": f"{PREFIX}-{kind}-{i}"}, "spec": {
                "capacity": {"storage": "10Gi"}, "accessModes": modes, "storageClassName": kind,
                "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(tmp_path / f"{kind}-{i}")}}})


@pytest.fixture(scope="module")
def hub(cluster, core_v1, tmp_path_factory):
    work = tmp_path_factory.mktemp("kubehub")
    storage_pool(core_v1, work)
    core_v1.create_namespace({"metadata": {"name": f"{PREFIX}-hub"}})
    hub = KubeHub(work / "hub", cluster.kubeconfig)
    with PodRunner(cluster, core_v1, str(work / "pods"), cluster.pki["ca.crt"]) as runner:
        hub.start()
        hub.runner = runner
        session = hub.login("admin")
        hub.admin_token = hub.new_token(session, "admin")
        try:
            yield hub
        finally:
            leftovers = hub.stop()
            print("hub leftovers:", leftovers, "pod runner errors:", runner.errors)


def ns(user):
    return f"{PREFIX}-{user}"


def test_spawn_prepares_the_namespace_and_a_restricted_gpu_pod(hub, core_v1):
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_v1.api_client)
    token = hub.admin_token
    response = hub.start_server("alice", token, "paddle-gpu")
    assert response.status_code in (201, 202), response.text
    hub.wait_ready("alice", token)
    namespace = core_v1.read_namespace(ns("alice"))
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    core_v1.read_namespaced_service_account("paddlecloud-notebook", ns("alice"))
    role = rbac.read_namespaced_role("paddlecloud-notebook", ns("alice"))
    assert any("jobs" in rule.resources for rule in role.rules)
    rbac.read_namespaced_role_binding("paddlecloud-notebook", ns("alice"))
    assert core_v1.list_namespaced_limit_range(ns("alice")).items
    quota = core_v1.read_namespaced_resource_quota("paddlecloud-quota", ns("alice"))
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "2"
    assert quota.spec.hard["services.nodeports"] == quota.spec.hard["services.loadbalancers"] == "0"
    admission = kubernetes.client.AdmissionregistrationV1Api(core_v1.api_client)
    assert admission.read_validating_admission_policy_binding(tenancy.EXPOSURE_POLICY_NAME).spec.validation_actions \
        == ["Deny"]
    (pod,) = core_v1.list_namespaced_pod(ns("alice"), label_selector="component=singleuser-server").items
    container = pod.spec.containers[0]
    assert container.image == "docker.io/paddlecloud/notebook:3.3.1-gpu"
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert pod.spec.service_account_name == "paddlecloud-notebook"
    volumes = {v.name: v for v in pod.spec.volumes}
    assert volumes["home"].persistent_volume_claim.claim_name == "home-alice"
    mounts = {m.name: m for m in container.volume_mounts}
    assert mounts["dataset-imagenet"].mount_path == "/datasets/imagenet" and mounts["dataset-imagenet"].read_only
    assert mounts["home"].mount_path == "/home/jovyan"
    assert pod.status.pod_ip.startswith("127.")
    assert container.security_context.allow_privilege_escalation is False


def test_the_notebook_answers_through_the_proxy_and_runs_jobs_in_its_namespace(hub, core_v1, batch_v1):
    token = hub.admin_token
    hub.wait_ready("alice", token)
    url = f"{hub.url}/user/alice/paddle/api"
    headers = {"Authorization": f"token {token}"}
    options = requests.get(f"{url}/options", headers=headers, timeout=30).json()
    assert options["backend"] == "kubernetes"
    assert [d["name"] for d in options["datasets"]] == ["imagenet"]
    created = requests.post(f"{url}/jobs", headers=headers, timeout=60,
                            json={"name": "from-notebook", "command": ["python", "train.py"], "workers": 2,
                                  "datasets": ["imagenet"]})
    assert created.status_code == 201, created.text
    job = batch_v1.read_namespaced_job("from-notebook", ns("alice"))
    assert job.spec.completions == 2
    listed = requests.get(f"{url}/jobs", headers=headers, timeout=30).json()["jobs"]
    assert [j["name"] for j in listed] == ["from-notebook"]
    assert requests.get(f"{url}/jobs", timeout=30, allow_redirects=False).status_code in (302, 403)


def test_the_spawn_page_shows_our_own_steps_before_the_pods_events(hub):
    """KubeSpawner's progress events (what the hub's spawn page shows) carry our steps:
    namespace, RBAC, dataset volumes, quota, quota check, home volume."""
    token = hub.admin_token
    assert hub.hub_api("POST", "/users/dave", token).status_code == 201
    # The hub's POST waits for a quick spawn to finish; the page listens while it is pending.
    starting = threading.Thread(target=hub.start_server, args=("dave", token, "paddle-cpu"))
    starting.start()
    wait_for(lambda: (hub.hub_api("GET", "/users/dave", token).json().get("servers", {}).get("", {})
                      .get("pending") == "spawn"), timeout=30, interval=0.05, what="the spawn to be pending")
    events = []
    with hub.hub_api("GET", "/users/dave/server/progress", token, stream=True, timeout=180) as response:
        assert response.status_code == 200, response.text
        for _event, data in sse_events(response):
            events.append(json.loads(data))
            if events[-1].get("ready") or events[-1].get("failed"):
                break
    starting.join(60)
    messages = [event.get("message", "") for event in events]
    print("\n".join(messages))
    assert events[-1].get("ready"), messages
    ours = [
        f"Namespace {ns('dave')} ready",
        "Service account and role for training jobs ready",
        "Dataset volumes ready: team-datasets",
        "Quota applied: pods=20, requests.cpu=40, requests.memory=200Gi, requests.nvidia.com/gpu=2, "
        "services.loadbalancers=0, services.nodeports=0",
        "Quota check passed: the server fits",
        "Home volume home-dave ready",
    ]
    assert [m for m in messages if m.startswith(tuple(o.split(":")[0] for o in ours))] == ours, messages
    first_pod_event = next((i for i, e in enumerate(events) if "raw_event" in e), len(events))
    assert messages.index(ours[-1]) < first_pod_event
    assert [e["progress"] for e in events if e.get("message") in ours] == sorted(
        e["progress"] for e in events if e.get("message") in ours)
    assert hub.hub_api("DELETE", "/users/dave/server", token).status_code in (202, 204)


async def test_admin_overview_counts_kwok_gpu_nodes_and_cancels_any_users_job(hub, cluster):
    from paddle_ext.backends.kubernetes import KubernetesBackend
    from paddle_ext.spec import JobSpec

    token = hub.admin_token
    hub.wait_ready("alice", token)
    jobs = KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=ns("alice"), user="alice",
                             pod_annotations={"kwok.paddlecloud.io/complete-after": "10m"})
    try:
        # alice's quota: 2 GPUs, one of them held by her GPU notebook
        await jobs.submit(JobSpec(name="long-gpu", command=["python", "train.py"], workers=1, gpus_per_worker=1))
        base = f"{hub.url}/services/quota/api"
        admin = {"Authorization": f"token {token}"}
        bob = {"Authorization": f"token {hub.new_token(hub.login('bob'), 'bob')}"}
        assert requests.get(f"{base}/overview", headers=bob, timeout=60).status_code == 403

        def running():
            data = requests.get(f"{base}/overview", headers=admin, timeout=60).json()
            rows = [r for r in data["jobs"] if r["name"] == "long-gpu" and r["phase"] == "Running"]
            return (data, rows[0]) if rows else None

        data, row = await asyncio.to_thread(wait_for, running, 60, 0.5, "alice's job in the overview")
        assert {k: row[k] for k in ("user", "workers", "gpus", "backend")} == {
            "user": "alice", "workers": 1, "gpus": 1, "backend": "kubernetes"}
        capacity = data["capacity"]
        assert capacity["source"] == "kubernetes"
        assert [(n["name"], n["capacity"]["gpus"]) for n in capacity["nodes"]] == [("kwok-gpu-0", 8), ("kwok-gpu-1", 8)]
        assert capacity["total"]["capacity"]["gpus"] == 16
        assert capacity["total"]["used"]["gpus"] >= 2  # the job's and alice's GPU notebook's
        assert "alice" in [u["user"] for u in data["gpu_hours"]["users"]]

        assert requests.delete(f"{base}/jobs/alice/long-gpu", headers=bob, timeout=60).status_code == 403
        cancelled = requests.delete(f"{base}/jobs/alice/long-gpu", headers=admin, timeout=60)
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["phase"] == "Cancelled"
        assert (await jobs.get("long-gpu")).phase == "Cancelled"
        assert "AUDIT: admin admin cancelled job long-gpu of user alice" in hub.log_tail(200_000)
    finally:
        await jobs.close()


def test_alices_token_can_create_jobs_in_her_namespace_only(hub, core_v1):
    token = hub.admin_token
    assert hub.start_server("bob", token, "paddle-cpu").status_code in (201, 202)
    hub.wait_ready("bob", token)
    sa_token = core_v1.create_namespaced_service_account_token(
        "paddlecloud-notebook", ns("alice"), {"spec": {"expirationSeconds": 600}}).status.token
    configuration = kubernetes.client.Configuration()
    configuration.host = core_v1.api_client.configuration.host
    configuration.ssl_ca_cert = core_v1.api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {sa_token}"}
    batch = kubernetes.client.BatchV1Api(kubernetes.client.ApiClient(configuration))
    job = {"metadata": {"name": "direct"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
    batch.create_namespaced_job(ns("alice"), job, dry_run="All")
    with pytest.raises(kubernetes.client.ApiException) as info:
        batch.create_namespaced_job(ns("bob"), job, dry_run="All")
    assert info.value.status == 403


def test_a_profile_beyond_the_quota_is_refused_within_seconds(hub):
    token = hub.admin_token
    start = time.monotonic()
    response = hub.start_server("carol", token, "paddle-gpu-x4")
    elapsed = time.monotonic() - start
    message = response.json()["message"]
    print(f"refused after {elapsed:.1f}s: {message}")
    assert response.status_code == 403 and elapsed < 5
    assert message.startswith("This server needs 4 GPUs; your quota is 2 and ")
    assert message.endswith(" in use. Pick a smaller profile or ask an admin.")
    assert not hub.hub_api("GET", "/users/carol", token).json()["servers"]  # nothing left half-started


def test_an_admin_raising_the_quota_in_the_panel_api_lets_the_profile_start(hub, core_v1):
    token = hub.admin_token
    response = requests.put(f"{hub.url}/services/quota/api/quotas/users/carol", json={"gpus": 4},
                            headers={"Authorization": f"token {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    quota = core_v1.read_namespaced_resource_quota("paddlecloud-quota", ns("carol"))
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "4"
    assert hub.start_server("carol", token, "paddle-gpu-x4").status_code in (201, 202)
    hub.wait_ready("carol", token)
    (pod,) = core_v1.list_namespaced_pod(ns("carol"), label_selector="component=singleuser-server").items
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
    assert hub.hub_api("DELETE", "/users/carol/server", token).status_code in (202, 204)


def test_stop_and_start_keeps_the_home_volume(hub, core_v1):
    token = hub.admin_token
    hub.wait_ready("alice", token)
    claim = core_v1.read_namespaced_persistent_volume_claim("home-alice", ns("alice"))
    assert hub.hub_api("DELETE", "/users/alice/server", token).status_code in (202, 204)
    wait_for(lambda: not hub.hub_api("GET", "/users/alice", token).json()["servers"], timeout=60, what="stopped")
    wait_for(lambda: not core_v1.list_namespaced_pod(ns("alice"), label_selector="component=singleuser-server").items,
             timeout=60, what="pod deleted")
    assert hub.start_server("alice", token, "paddle-cpu").status_code in (201, 202)
    hub.wait_ready("alice", token)
    again = core_v1.read_namespaced_persistent_volume_claim("home-alice", ns("alice"))
    assert again.metadata.uid == claim.metadata.uid


def test_the_hub_refuses_to_start_without_a_chosen_authenticator(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PADDLECLOUD_AUTHENTICATOR_CLASS"}
    env["PADDLECLOUD_HUB_STATE_DIR"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(KubeHub.config), "--show-config"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "set PADDLECLOUD_AUTHENTICATOR_CLASS" in result.stdout + result.stderr


def test_only_allowed_users_may_log_in(hub):
    with pytest.raises(HubError, match="HTTP 403"):
        hub.login("mallory")  # the dummy authenticator takes any password; the allow list does not
    hub.login("alice")
    hub.login("admin")  # admins always may


@pytest.mark.parametrize("settings, words", [
    ({}, "choose who may log in"),
    ({"PADDLECLOUD_ALLOWED_GROUPS": "ml"}, "DummyAuthenticator does not know groups"),
    ({"PADDLECLOUD_ALLOW_ALL": "true", "PADDLECLOUD_ALLOWED_USERS": "alice"}, "cannot be combined"),
    ({"PADDLECLOUD_ALLOW_ALL": "maybe"}, "PADDLECLOUD_ALLOW_ALL must be true or false"),
])
def test_the_hub_refuses_to_start_without_a_choice_of_who_may_log_in(tmp_path, settings, words):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLECLOUD_ALLOW", "PADDLECLOUD_VALUES"))}
    env.update({"PADDLECLOUD_HUB_STATE_DIR": str(tmp_path), "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy", **settings})
    result = subprocess.run([sys.executable, "-m", "jupyterhub", "-f", str(KubeHub.config), "--show-config"],
                            env=env, capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and words in output and "Traceback" not in output, output[-2000:]


def test_the_idle_culler_runs_as_a_hub_service(hub):
    import psutil

    service = hub.hub_api("GET", "/services/idle-culler", hub.admin_token)
    assert service.status_code == 200 and service.json()["command"][1:3] == ["-m", "jupyterhub_idle_culler"]
    hub_children = psutil.Process(hub.proc.pid).children(recursive=True)
    assert any("jupyterhub_idle_culler" in " ".join(p.cmdline()) for p in hub_children)


def test_no_token_or_secret_appears_in_any_log(hub, core_v1):
    """The hub (at debug level, with its quota service), and every notebook server it started."""
    runner = hub.runner
    pod_secrets = {value for pod in runner.pods.values() for key, value in resolve_env(pod, core_v1).items()
                   if "TOKEN" in key or "SECRET" in key}
    account_tokens = {path.read_text().strip() for path in Path(runner.work_dir).glob("sa/*/token")}
    assert pod_secrets and account_tokens, "found no notebook pod to take secrets from"
    secrets = {hub.admin_token, *pod_secrets, *account_tokens,
               (hub.home / "jupyterhub_cookie_secret").read_text().strip()}
    logs = [hub.log_path, *Path(runner.work_dir).glob("*.log")]
    assert len(logs) >= 3  # the hub's and the notebook servers'
    for path in logs:
        text = path.read_text(errors="replace")
        assert not [s for s in secrets if s and len(s) >= 16 and s in text], f"a secret appears in {path}"
