"""Restarts lose nothing and tenants stay apart, on the real node (issue 13): a notebook pod
deleted mid-job, a hub restart, a kube-apiserver restart during a followed log; one user's
hub token, service account and cookie against another's server, namespace and quota."""

from __future__ import annotations

import asyncio
import json
import time

import kubernetes
import requests

from cluster_helpers import GATE, open_gate, wait_for, wait_for_async
from kubehub import SMALL, follow, job_story, notebook_pod, ns, write_file, write_test_script
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.spec import JobSpec
from tools.k8s.cluster import IMAGE_REFS


def worker_logs(core_v1, namespace, job) -> dict[int, list[str]]:
    """What the kubelet has of each worker's output: the reference a merged log must match."""
    pods = core_v1.list_namespaced_pod(namespace, label_selector=f"paddlecloud.io/job={job}").items
    return {int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]):
            core_v1.read_namespaced_pod_log(p.metadata.name, namespace, container="paddle").splitlines()
            for p in pods}


async def backend_story(jobs: KubernetesBackend, core_v1, namespace: str, name: str, lines: list[str],
                        follower: asyncio.Future) -> str:
    """Why a follow ended: how the follower ended, the job's view, its pods' container states
    and the last lines followed, for an assertion's message."""
    ended = "still running" if not follower.done() else repr(follower.exception()) if follower.exception() \
        else "returned"
    job = json.dumps((await jobs.get(name)).to_dict(), indent=1)
    listed = core_v1.list_namespaced_pod(namespace, label_selector=f"paddlecloud.io/job={name}").items
    pods = [(p.metadata.name, p.status.phase, [(c.name, c.restart_count, c.state.to_dict(), c.last_state.to_dict())
                                                for c in p.status.container_statuses or []]) for p in listed]
    tails = "".join(f"\n--- {p.metadata.name}'s log (end) ---\n{pod_log_end(core_v1, namespace, p.metadata.name)}"
                    for p in listed)
    return f"follower: {ended}\njob: {job}\npods: {pods}\nlast lines: {lines[-20:]}{tails}"


def pod_log_end(core_v1, namespace: str, pod: str) -> str:
    try:
        return core_v1.read_namespaced_pod_log(pod, namespace, tail_lines=20)
    except kubernetes.client.ApiException as exc:  # gone, or not started
        return f"(no log: {exc.status} {exc.reason})"


def split_merged(lines: list[str], workers: int) -> dict[int, list[str]]:
    return {i: [line.split("] ", 1)[1] for line in lines if line.startswith(f"[worker-{i}] ")] for i in range(workers)}


def submit_ticker(hub, name: str, args: list[str], **fields) -> tuple[dict, str]:
    """bob's notebook running, and job `name` of ticker.py submitted through it: the admin's
    headers and bob's server URL."""
    hub.ensure_running("bob", hub.admin_token)
    headers = {"Authorization": f"token {hub.admin_token}"}
    base = f"{hub.url}/user/bob"
    write_test_script(hub, "bob", "ticker.py")
    created = requests.post(f"{base}/paddle/api/jobs", headers=headers, timeout=120, json={
        "name": name, "command": ["python", "ticker.py", *args], **SMALL, **fields})
    assert created.status_code == 201, created.text
    return headers, base


def test_a_notebook_pod_deleted_mid_job_leaves_the_job_running_and_the_new_pod_follows_it_whole(hub, core_v1,
                                                                                             real_cluster):
    token = hub.admin_token
    headers, base = submit_ticker(hub, "survivor", ["--until", "survivor.gate", "--interval", "0.25"], workers=2)
    wait_for(lambda: requests.get(f"{base}/paddle/api/jobs/survivor", headers=headers, timeout=60)
             .json()["phase"] != "Pending", timeout=300, what="the job started",
             message=lambda: job_story(hub, "bob", "survivor"))
    seen = []
    with requests.get(f"{base}/paddle/api/jobs/survivor/logs", params={"follow": "1"}, headers=headers,
                      stream=True, timeout=(10, 120)) as response:  # a stall of 2 minutes fails
        for raw in response.iter_lines(decode_unicode=True):
            if raw and raw.startswith("data: [worker-") and " tick " in raw:
                seen.append(raw)
            if len(seen) >= 10:
                break
    old = notebook_pod(core_v1, "bob")
    core_v1.delete_namespaced_pod(old.metadata.name, ns("bob"), grace_period_seconds=0)
    hub.wait_gone("bob", token, timeout=180)
    jobs = kubernetes.client.BatchV1Api(core_v1.api_client)
    assert jobs.read_namespaced_job_status("survivor", ns("bob")).status.active == 2, \
        job_story(hub, "bob", "survivor")  # untouched (it runs until the test opens its gate)
    hub.ensure_running("bob", token)
    assert notebook_pod(core_v1, "bob").metadata.uid != old.metadata.uid
    write_file(hub, "bob", "survivor.gate", "")  # the workers run in the shared home: they see it
    lines, end = follow(base, headers, "survivor")  # re-attached from the new notebook pod
    assert end["phase"] == "Succeeded", job_story(hub, "bob", "survivor")
    assert split_merged(lines, 2) == worker_logs(core_v1, ns("bob"), "survivor")  # none lost, none repeated


def test_a_hub_restart_leaves_notebooks_and_jobs_running_and_the_quota_page_comes_back(hub, core_v1, real_cluster):
    headers, base = submit_ticker(hub, "outlives-hub", ["--count", "100000"])
    wait_for(lambda: requests.get(f"{base}/paddle/api/jobs/outlives-hub", headers=headers, timeout=60)
             .json()["phase"] == "Running", timeout=300, what="the job running")
    pod = notebook_pod(core_v1, "bob")
    hub.restart()
    started = time.monotonic()
    wait_for(lambda: requests.get(f"{hub.url}/services/quota/api/quotas/users/bob", headers=headers,
                                  timeout=10).status_code == 200, timeout=120, interval=0.5,
             what="the quota page after the hub's restart")
    print(f"\nquota page back {time.monotonic() - started:.1f}s after the hub started again")
    assert notebook_pod(core_v1, "bob").metadata.uid == pod.metadata.uid  # the same pod, never restarted
    job = requests.get(f"{base}/paddle/api/jobs/outlives-hub", headers=headers, timeout=60).json()
    assert job["phase"] == "Running", job_story(hub, "bob", "outlives-hub")
    assert requests.delete(f"{base}/paddle/api/jobs/outlives-hub", headers=headers, timeout=60).status_code == 202


async def test_a_kube_apiserver_restart_during_logs_follow_loses_and_repeats_nothing(real_cluster, core_v1,
                                                                                   namespace):
    """Both workers tick until the test opens their gates, after the API server has restarted
    and the follower has read lines written since: the restart happens mid-stream."""
    jobs = KubernetesBackend(kubeconfig=real_cluster.kubeconfig, namespace=namespace,
                             images=[{"name": IMAGE_REFS["worker"]}], log_idle_check_seconds=0.5)
    lines: list[str] = []
    try:
        await jobs.submit(JobSpec(name="steady", command=["python", "ticker.py", "--until", GATE, "--interval",
                                                           "0.25"], workers=2, **SMALL))

        async def follow_all():
            async for line in jobs.logs("steady", follow=True):
                lines.append(line)

        def ticks(worker: int) -> int:
            return sum(line.startswith(f"[worker-{worker}] tick") for line in lines)

        follower = asyncio.ensure_future(follow_all())
        await wait_for_async(lambda: ticks(1) >= 10 or follower.done(), timeout=300,
                             what="10 of worker 1's ticks followed")
        assert not follower.done(), "the follower ended before the restart: " + \
            await backend_story(jobs, core_v1, namespace, "steady", lines, follower)
        await asyncio.to_thread(real_cluster.restart_component, "kube-apiserver")
        before = {worker: ticks(worker) for worker in (0, 1)}
        await wait_for_async(lambda: all(ticks(w) >= before[w] + 10 for w in (0, 1)) or follower.done(),
                             timeout=300, what="10 more ticks of each worker followed after the restart")
        assert not follower.done(), "the follower ended after the restart while both workers were ticking: " + \
            await backend_story(jobs, core_v1, namespace, "steady", lines, follower)
        for pod in core_v1.list_namespaced_pod(namespace, label_selector="paddlecloud.io/job=steady").items:
            open_gate(real_cluster, namespace, pod.metadata.name, GATE)
        await asyncio.wait_for(follower, 600)
        assert (await jobs.get("steady")).phase == "Succeeded"
        assert split_merged(lines, 2) == worker_logs(core_v1, namespace, "steady")
    finally:
        await jobs.close()


# ---------------------------------------------------------------- tenants


def account_api(core_v1, namespace) -> kubernetes.client.ApiClient:
    """An API client with the notebook service account's own token in `namespace`."""
    token = core_v1.create_namespaced_service_account_token(
        "paddlecloud-notebook", namespace, {"spec": {"expirationSeconds": 600}}).status.token
    configuration = kubernetes.client.Configuration()
    configuration.host = core_v1.api_client.configuration.host
    configuration.ssl_ca_cert = core_v1.api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return kubernetes.client.ApiClient(configuration)


def refused(action) -> bool:
    try:
        action()
    except kubernetes.client.ApiException as exc:
        return exc.status == 403
    return False


def test_tenants_stay_apart(hub, core_v1, real_cluster):
    token = hub.admin_token
    for user in ("alice", "bob"):
        hub.ensure_running(user, token)
    alice, bob = ns("alice"), ns("bob")
    tried = 0

    # alice's hub token on bob's server
    alice_token = hub.new_token(hub.login("alice"), "alice")
    for method, path in (("GET", "/api/status"), ("GET", "/paddle/api/jobs"), ("POST", "/paddle/api/jobs"),
                         ("GET", "/api/contents")):
        response = requests.request(method, f"{hub.url}/user/bob{path}", json={"command": ["x"]}, timeout=30,
                                    headers={"Authorization": f"token {alice_token}"}, allow_redirects=False)
        assert response.status_code == 403, (method, path, response.status_code)
        tried += 1

    # alice's service account on bob's namespace, and on what rules her own
    with account_api(core_v1, alice) as api:
        core, batch = kubernetes.client.CoreV1Api(api), kubernetes.client.BatchV1Api(api)
        rbac = kubernetes.client.RbacAuthorizationV1Api(api)
        bobs_pod = notebook_pod(core_v1, "bob").metadata.name
        job = {"metadata": {"name": "sneak"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE_REFS["worker"]}]}}}}
        actions = [
            lambda: batch.list_namespaced_job(bob), lambda: batch.create_namespaced_job(bob, job, dry_run="All"),
            lambda: core.list_namespaced_pod(bob), lambda: core.read_namespaced_pod_log(bobs_pod, bob),
            lambda: core.delete_namespaced_pod(bobs_pod, bob, dry_run="All"),
            lambda: core.list_namespaced_service(bob),
            lambda: core.create_namespaced_service(bob, {"metadata": {"name": "s"}, "spec": {
                "clusterIP": "None", "ports": [{"port": 1}]}}, dry_run="All"),
            lambda: core.read_namespaced_resource_quota("paddlecloud-quota", bob),
            lambda: rbac.read_namespaced_role("paddlecloud-notebook", bob),
            lambda: core.list_namespaced_secret(alice),
            lambda: core.patch_namespaced_resource_quota("paddlecloud-quota", alice,
                                                         {"spec": {"hard": {"requests.nvidia.com/gpu": "100"}}}),
            lambda: core.delete_namespaced_resource_quota("paddlecloud-quota", alice),
            lambda: rbac.patch_namespaced_role("paddlecloud-notebook", alice, {"rules": []}),
            lambda: rbac.create_namespaced_role_binding(alice, {
                "metadata": {"name": "more"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                          "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "paddlecloud-notebook", "namespace": alice}]}),
            lambda: core.patch_namespaced_limit_range("paddlecloud-defaults", alice, {"spec": {"limits": []}}),
            lambda: core.patch_namespace(alice, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                         "privileged"}}}),
        ]
        for action in actions:
            assert refused(action), action.__code__.co_consts
        tried += len(actions)
        assert batch.list_namespaced_job(alice) is not None  # her own jobs she may see

    # non-admins on the quota service's writes
    for path, body in (("quotas/users/alice", {"gpus": 100}), ("quotas/groups/ml", {"gpus": 100}),
                       ("quotas/default", {"gpus": 100})):
        response = requests.put(f"{hub.url}/services/quota/api/{path}", json=body, timeout=30,
                                headers={"Authorization": f"token {alice_token}"})
        assert response.status_code == 403, (path, response.text)
        tried += 1

    # cookie-authenticated writes without the XSRF token
    browser = hub.login("alice")
    assert browser.get(f"{hub.url}/user/alice/lab", timeout=60).status_code == 200  # the OAuth dance sets cookies
    for method in ("POST", "DELETE"):
        path = "/paddle/api/jobs" if method == "POST" else "/paddle/api/jobs/anything"
        response = browser.request(method, f"{hub.url}/user/alice{path}", json={"command": ["python", "x.py"]},
                                   timeout=30)
        assert response.status_code == 403, (method, response.status_code, response.text[:200])
        tried += 1
    print(f"\ntenant checks: {tried} tried, all refused")

