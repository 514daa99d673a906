"""JupyterHub with hub_config/jupyterhub_config.py (KubeSpawner) against the test cluster:
namespaces, profiles, quotas, the spawn page, the admin overview, who may log in, real
notebooks on the real node (tests/cluster/kubehub.py has the hub and its helpers)."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import re
import threading

import kubernetes
import pytest
import requests

from cluster_helpers import GPU_TOLERATION, wait_for
from hubutil import HubError
from kubehub import SMALL, KubeHub, follow, in_notebook, notebook_pod, ns
from paddle_ext import policies
from paddle_ext.capacity import node_accepts, node_usage
from serverutil import sse_events
from tools.k8s.cluster import COMPLETE_AFTER_ANNOTATION, IMAGE_REFS


def test_a_gpu_profile_gets_a_restricted_gpu_pod_on_a_gpu_node_in_a_prepared_namespace(hub, core_v1, real_cluster):
    rbac = kubernetes.client.RbacAuthorizationV1Api(core_v1.api_client)
    token = hub.admin_token
    hub.ensure_stopped("alice", token)
    response = hub.start_server("alice", token, "paddle-gpu")
    assert response.status_code in (201, 202), response.text
    pod = wait_for(lambda: (p := notebook_pod(core_v1, "alice")) and p.spec.node_name and p, timeout=60,
                   what="alice's GPU notebook placed")
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
    assert admission.read_validating_admission_policy_binding(policies.EXPOSURE_POLICY_NAME).spec.validation_actions \
        == ["Deny"]
    container = pod.spec.containers[0]
    assert container.image == "docker.io/paddlecloud/notebook:3.3.1-gpu"
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert pod.spec.node_name in real_cluster.node_names  # a (KWOK) GPU node, its taint tolerated
    assert pod.spec.service_account_name == "paddlecloud-notebook"
    volumes = {v.name: v for v in pod.spec.volumes}
    assert volumes["home"].persistent_volume_claim.claim_name == "home-alice"
    mounts = {m.name: m for m in container.volume_mounts}
    assert mounts["dataset-imagenet"].mount_path == "/datasets/imagenet" and mounts["dataset-imagenet"].read_only
    assert mounts["home"].mount_path == "/home/jovyan"
    assert container.security_context.allow_privilege_escalation is False
    # A KWOK pod never answers, so the server is still starting: the user stops it, and nothing is
    # left (the hub giving up on its own: the quota test below, which waits for that instead).
    hub.ensure_stopped("alice", token)
    wait_for(lambda: notebook_pod(core_v1, "alice") is None, timeout=90, what="the GPU notebook pod deleted")


def test_a_real_notebook_answers_through_the_proxy_and_runs_a_real_job_with_its_own_account(hub, core_v1, real_cluster):
    token = hub.admin_token
    hub.ensure_running("bob", token)
    pod = notebook_pod(core_v1, "bob")
    assert pod.status.pod_ip.startswith("198.18.") and pod.spec.containers[0].image == IMAGE_REFS["notebook"]
    headers = {"Authorization": f"token {token}"}
    base = f"{hub.url}/user/bob"
    assert requests.get(f"{hub.url}/user/bob/paddle/api/jobs", timeout=30, allow_redirects=False).status_code \
        in (302, 403)
    options = requests.get(f"{base}/paddle/api/options", headers=headers, timeout=30).json()
    assert options["backend"] == "kubernetes" and [d["name"] for d in options["datasets"]] == ["imagenet"]
    # A script that exists nowhere else: written through the notebook's own contents API.
    for name, text in (("hello.py", "import mod\nprint('hello from', mod.WHERE, flush=True)\n"),
                       ("mod.py", "WHERE = 'bob'\n")):
        put = requests.put(f"{base}/api/contents/{name}", headers=headers, timeout=30,
                           json={"type": "file", "format": "text", "content": text})
        assert put.status_code in (200, 201), put.text
    created = requests.post(f"{base}/paddle/api/jobs", headers=headers, timeout=120,
                            json={"name": "from-notebook", "command": ["python", "hello.py"], "workers": 2, **SMALL})
    assert created.status_code == 201, created.text
    lines, end = follow(base, headers, "from-notebook")
    assert end["phase"] == "Succeeded", lines[-20:]
    assert "[worker-0] hello from bob" in lines and "[worker-1] hello from bob" in lines
    listed = requests.get(f"{base}/paddle/api/jobs", headers=headers, timeout=30).json()["jobs"]
    assert "from-notebook" in [j["name"] for j in listed]


def test_the_spawn_page_shows_our_own_steps_before_the_pods_events(hub, real_cluster):
    """KubeSpawner's progress events (what the hub's spawn page shows) carry our steps:
    namespace, RBAC, dataset volumes, quota, quota check, home volume. (The page that lists them
    above its progress bar is rendered in tests/unit/test_spawn_page.py: fetched here it would
    depend on the spawn still being pending.)"""
    token = hub.admin_token
    # (an allowed user is in the hub's database from its start: 409 says it exists)
    assert hub.hub_api("POST", "/users/dave", token).status_code in (201, 409)
    # The hub's POST waits for a quick spawn to finish; the page listens while it is pending.
    starting = threading.Thread(target=hub.start_server, args=("dave", token, "paddle-cpu"))
    starting.start()
    wait_for(lambda: (hub.hub_api("GET", "/users/dave", token).json().get("servers", {}).get("", {})
                      .get("pending") == "spawn"), timeout=30, interval=0.05, what="the spawn to be pending")
    events = []
    with hub.hub_api("GET", "/users/dave/server/progress", token, stream=True, timeout=300) as response:
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
    seen = [m for m in messages if m.startswith(tuple(o.split(":")[0] for o in ours))]
    # The steps between the namespace and the quota check run at once: any order among them.
    assert seen[0] == ours[0] and seen[-2:] == ours[-2:] and sorted(seen[1:-2]) == sorted(ours[1:-2]), messages
    first_pod_event = next((i for i, e in enumerate(events) if "raw_event" in e), len(events))
    assert messages.index(ours[-1]) < first_pod_event
    assert [e["progress"] for e in events if e.get("message") in ours] == sorted(
        e["progress"] for e in events if e.get("message") in ours)
    assert hub.hub_api("DELETE", "/users/dave/server", token).status_code in (202, 204)


async def test_admin_overview_counts_kwok_gpu_nodes_and_cancels_any_users_job(hub, real_cluster):
    from paddle_ext.backends.kubernetes import KubernetesBackend
    from paddle_ext.spec import JobSpec

    token = hub.admin_token
    await asyncio.to_thread(hub.ensure_running, "bob", token)
    # a GPU job: placed on a KWOK GPU node, where it stays Running until cancelled
    jobs = KubernetesBackend(kubeconfig=real_cluster.kubeconfig, namespace=ns("bob"), user="bob",
                             gpu_tolerations=[GPU_TOLERATION],
                             pod_annotations={"kwok.paddlecloud.io/complete-after": "10m"})
    try:
        await jobs.submit(JobSpec(name="long-gpu", command=["python", "train.py"], workers=1, gpus_per_worker=1))
        base = f"{hub.url}/services/quota/api"
        admin = {"Authorization": f"token {token}"}
        carol = {"Authorization": f"token {hub.new_token(hub.login('carol'), 'carol')}"}
        assert requests.get(f"{base}/overview", headers=carol, timeout=60).status_code == 403

        def running():
            data = requests.get(f"{base}/overview", headers=admin, timeout=60).json()
            rows = [r for r in data["jobs"] if r["name"] == "long-gpu" and r["phase"] == "Running"]
            return (data, rows[0]) if rows else None

        data, row = await asyncio.to_thread(lambda: wait_for(running, timeout=60, interval=0.5, what="bob's job in the overview"))
        assert {k: row[k] for k in ("user", "workers", "gpus", "backend")} == {
            "user": "bob", "workers": 1, "gpus": 1, "backend": "kubernetes"}
        capacity = data["capacity"]
        assert capacity["source"] == "kubernetes"
        gpus = {n["name"]: n["capacity"]["gpus"] for n in capacity["nodes"]}
        assert gpus == {"kwok-gpu-0": 8, "kwok-gpu-1": 8, real_cluster.real_node_name: 0}
        assert capacity["total"]["capacity"]["gpus"] == 16
        assert capacity["total"]["used"]["gpus"] >= 1
        assert "bob" in [u["user"] for u in data["gpu_hours"]["users"]]

        assert requests.delete(f"{base}/jobs/bob/long-gpu", headers=carol, timeout=60).status_code == 403
        cancelled = requests.delete(f"{base}/jobs/bob/long-gpu", headers=admin, timeout=60)
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["phase"] == "Cancelled"
        assert (await jobs.get("long-gpu")).phase == "Cancelled"
        assert "AUDIT: admin admin cancelled job long-gpu of user bob" in hub.log_tail(200_000)
    finally:
        await jobs.close()


def test_a_users_account_can_create_jobs_in_their_namespace_only(hub, core_v1, real_cluster):
    token = hub.admin_token
    hub.ensure_running("bob", token)
    hub.ensure_running("alice", token)
    sa_token = core_v1.create_namespaced_service_account_token(
        "paddlecloud-notebook", ns("alice"), {"spec": {"expirationSeconds": 600}}).status.token
    configuration = kubernetes.client.Configuration()
    configuration.host = core_v1.api_client.configuration.host
    configuration.ssl_ca_cert = core_v1.api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {sa_token}"}
    batch = kubernetes.client.BatchV1Api(kubernetes.client.ApiClient(configuration))
    job = {"metadata": {"name": "direct"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE_REFS["worker"]}]}}}}
    batch.create_namespaced_job(ns("alice"), job, dry_run="All")
    with pytest.raises(kubernetes.client.ApiException) as info:
        batch.create_namespaced_job(ns("bob"), job, dry_run="All")
    assert info.value.status == 403


def test_a_profile_beyond_the_quota_is_refused_at_once(hub, real_cluster):
    token = hub.admin_token
    response = hub.start_server("carol", token, "paddle-gpu-x4")
    message = response.json()["message"]
    assert response.status_code == 403, message  # refused by the spawner's check, not by a pod that never starts
    assert message.startswith("This server needs 4 GPUs; your quota is 2 and ")
    assert message.endswith(" in use. Pick a smaller profile or ask an admin.")
    assert not hub.hub_api("GET", "/users/carol", token).json()["servers"]  # nothing left half-started


def gpu_nodes_of_the_gpu_profile(core_v1) -> list[dict]:
    """The schedulable GPU nodes a `paddle-gpu` notebook may be placed on (the site's GPU
    toleration, no node selector): other tests' own GPU nodes, tainted for them, are not."""
    serialize = core_v1.api_client.sanitize_for_serialization
    nodes = [serialize(node) for node in core_v1.list_node().items]
    return [node for node in nodes if node_accepts(node, {"tolerations": [GPU_TOLERATION]})
            and not (node.get("spec") or {}).get("unschedulable")
            and int((node["status"].get("allocatable") or {}).get("nvidia.com/gpu", "0")) > 0]


def live_pods(core_v1) -> list[dict]:
    serialize = core_v1.api_client.sanitize_for_serialization
    return [serialize(pod) for pod in core_v1.list_pod_for_all_namespaces().items]


def test_a_gpu_notebook_on_full_gpu_nodes_is_refused_at_once_with_the_numbers(hub, core_v1, batch_v1, namespace,
                                                                              real_cluster):
    """No node has a GPU free: the spawn is refused at once (not a spawn page waiting on a
    Pending pod), with the nodes' GPUs and when the running jobs' time limits free some."""
    token = hub.admin_token
    hub.ensure_stopped("alice", token)
    wait_for(lambda: notebook_pod(core_v1, "alice") is None, timeout=90, what="no notebook pod of alice's left")
    nodes = gpu_nodes_of_the_gpu_profile(core_v1)
    assert nodes, "the cluster has KWOK GPU nodes"
    names = {node["metadata"]["name"] for node in nodes}

    def settled():  # no pod going away on those nodes: what is free now stays free until we fill it
        pods = live_pods(core_v1)
        return not any(p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") in names for p in pods)
    wait_for(settled, timeout=120, what="no pod terminating on the GPU nodes")
    limit = 3600
    free = {usage.name: usage.free_gpus for usage in node_usage(nodes, live_pods(core_v1))}
    for name, gpus in free.items():
        if gpus <= 0:
            continue
        batch_v1.create_namespaced_job(namespace, {
            "metadata": {"name": f"fill-{name}"},
            # (KWOK completes a Job's pods after a few seconds unless told otherwise: these hold their GPUs)
            "spec": {"activeDeadlineSeconds": limit, "backoffLimit": 0, "template": {
                "metadata": {"annotations": {COMPLETE_AFTER_ANNOTATION: "24h"}}, "spec": {
                "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": name},
                "tolerations": [GPU_TOLERATION],
                "containers": [{"name": "c", "image": IMAGE_REFS["worker"],
                                "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                              "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}})
    try:
        def full():
            usage = node_usage(nodes, live_pods(core_v1))
            return all(u.free_gpus <= 0 for u in usage) and usage
        usage = wait_for(full, timeout=90, what="every GPU of the GPU nodes held by the fill jobs")
        capacity = sum(u.capacity.gpus for u in usage)
        response = hub.start_server("alice", token, "paddle-gpu")
        message = response.json()["message"]
        assert response.status_code == 403, message  # refused by the spawner's check, not a pod that waits
        nodes_word = "the GPU node has" if len(nodes) == 1 else f"the {len(nodes)} GPU nodes have"
        assert message.startswith(f"No node has 1 GPU free for this notebook now: {nodes_word} {capacity} GPUs, "
                                  "all in use. GPUs are expected back at "), message
        assert message.endswith(", when a running job reaches its time limit. "
                                "Try again later, or pick a profile without GPUs."), message
        # no later than our fill jobs' end (another job may hold GPUs with a sooner limit)
        at = re.search(r"at (\d\d:\d\d) UTC on (\d{4}-\d\d-\d\d)", message)
        expected = datetime.datetime.fromisoformat(f"{at[2]}T{at[1]}:00+00:00")
        ends = [job.status.start_time + datetime.timedelta(seconds=limit)
                for job in batch_v1.list_namespaced_job(namespace).items if job.status.start_time]
        assert ends and expected <= max(ends), (message, ends)
        assert not hub.hub_api("GET", "/users/alice", token).json()["servers"]  # nothing left half-started
        assert notebook_pod(core_v1, "alice") is None
        assert "Refusing alice's GPU server: No node has 1 GPU free" in hub.log_tail(200_000)
    finally:  # the GPUs back for the other GPU tests (any order)
        for job in batch_v1.list_namespaced_job(namespace).items:
            batch_v1.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Foreground")
        wait_for(lambda: not core_v1.list_namespaced_pod(namespace).items, timeout=120,
                 what="the fill jobs' pods gone")


def test_an_admin_raising_the_quota_in_the_panel_api_lets_the_profile_start(hub, core_v1, real_cluster):
    token = hub.admin_token
    carol_quota = f"{hub.url}/services/quota/api/quotas/users/carol"
    admin = {"Authorization": f"token {token}"}
    response = requests.put(carol_quota, json={"gpus": 4}, headers=admin, timeout=30)
    assert response.status_code == 200, response.text
    try:  # (carol's namespace may not exist yet: the spawn makes it, with the raised quota)
        assert hub.start_server("carol", token, "paddle-gpu-x4").status_code in (201, 202)
        pod = wait_for(lambda: notebook_pod(core_v1, "carol"), timeout=60, what="carol's GPU x4 notebook pod")
        quota = core_v1.read_namespaced_resource_quota("paddlecloud-quota", ns("carol"))
        assert quota.spec.hard["requests.nvidia.com/gpu"] == "4"
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
        hub.wait_gone("carol", token)  # a KWOK pod never answers: the hub gives up, nothing is left
        wait_for(lambda: notebook_pod(core_v1, "carol") is None, timeout=90, what="carol's GPU notebook pod deleted")
    finally:  # carol's quota back to the site's, for the tests that rely on it (any order)
        reset = requests.put(carol_quota, json={"gpus": None}, headers=admin, timeout=30)
        assert reset.status_code == 200, reset.text


def test_stop_and_start_keeps_the_home_volume_and_its_files(hub, core_v1, real_cluster):
    """...and the examples the first start copied in (the postStart hook) are not copied again:
    the user's own train.py stays theirs, a deleted quickstart stays deleted."""
    token = hub.admin_token
    hub.ensure_running("bob", token)
    headers = {"Authorization": f"token {token}"}
    contents = f"{hub.url}/user/bob/api/contents"
    home = requests.get(contents, headers=headers, timeout=30).json()
    assert {"quickstart.ipynb", "train.py"} <= {item["name"] for item in home["content"]}, home
    for name, text in (("kept.txt", "still here"), ("train.py", "print('mine')\n")):
        put = requests.put(f"{contents}/{name}", headers=headers, timeout=30,
                           json={"type": "file", "format": "text", "content": text})
        assert put.status_code in (200, 201), put.text
    assert requests.delete(f"{contents}/quickstart.ipynb", headers=headers, timeout=30).status_code == 204
    claim = core_v1.read_namespaced_persistent_volume_claim("home-bob", ns("bob"))
    assert hub.hub_api("DELETE", "/users/bob/server", token).status_code in (202, 204)
    hub.wait_gone("bob", token)
    wait_for(lambda: notebook_pod(core_v1, "bob") is None, timeout=120, what="pod deleted")
    hub.ensure_running("bob", token)
    assert core_v1.read_namespaced_persistent_volume_claim("home-bob", ns("bob")).metadata.uid == claim.metadata.uid
    got = requests.get(f"{contents}/kept.txt", headers=headers, timeout=30).json()
    assert got["content"] == "still here"
    assert requests.get(f"{contents}/train.py", headers=headers, timeout=30).json()["content"] == "print('mine')\n"
    assert requests.get(f"{contents}/quickstart.ipynb", headers=headers, timeout=30).status_code == 404


def test_the_hub_refuses_to_start_without_a_chosen_authenticator(tmp_path):
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


def test_no_token_or_secret_appears_in_any_log(hub, core_v1, real_cluster):
    """The hub (at debug level, with its quota service), and the notebook servers it started."""
    hub.ensure_running("bob", hub.admin_token)
    pod = notebook_pod(core_v1, "bob")
    pod_secrets = {e.value for e in pod.spec.containers[0].env or [] if e.value and ("TOKEN" in e.name or "SECRET" in e.name)}
    account_token = in_notebook(real_cluster, "bob", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
    assert account_token.returncode == 0 and pod_secrets, "found no notebook secrets to look for"
    secrets = {hub.admin_token, *pod_secrets, account_token.stdout.strip(),
               (hub.home / "jupyterhub_cookie_secret").read_text().strip()}
    logs = {"hub": hub.log_path.read_text(errors="replace"),
            "bob's notebook": core_v1.read_namespaced_pod_log(pod.metadata.name, ns("bob"), container="notebook")}
    for where, text in logs.items():
        assert not [s for s in secrets if s and len(s) >= 16 and s in text], f"a secret appears in {where}'s log"
