"""Quotas on the real control plane: the ConfigMap store, each user's ResourceQuota
written from it, the Kubernetes backend's preflight, and the API server's own refusal."""

from __future__ import annotations

import asyncio

import kubernetes
import pytest

from cluster_helpers import GPU_TOLERATION, on_kwok_nodes, wait_for, wait_for_async
from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.errors import QuotaExceeded
from paddle_ext.constants import QUOTA_CONFIGMAP
from paddle_ext.capacity import LIVE_PODS_SELECTOR
from paddle_ext.hub.quota_sync import QuotaSync
from paddle_ext.hub.watched import WatchedCopy, WatchedList
from paddle_ext.kubeapi import KubeApi, api_path
from paddle_ext.quota.model import Limits, QuotaConflict, parse_patch
from paddle_ext.quota.store import KubernetesQuotaStore
from paddle_ext.spec import JobSpec
from paddle_ext.tenancy import NO_EXPOSURE_HARD, OBJECT_QUOTA

COMPLETE_AFTER = "kwok.paddlecloud.io/complete-after"


def quota_status(core_v1, namespace):
    return core_v1.read_namespaced_resource_quota("paddlecloud-quota", namespace)


def gpu_pod(name: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": on_kwok_nodes({"containers": [{"name": "c", "image": "paddle:3.3.1-gpu",
                                                   "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                                 "limits": {"nvidia.com/gpu": str(gpus)}}}]})}


async def test_alice_gpu_quota_is_enforced_by_preflight_and_api_server(cluster, core_v1, make_namespace):
    hub_ns, alice_ns = make_namespace("hub"), make_namespace("paddlecloud-alice")
    api = KubeApi.connect(cluster.kubeconfig)
    try:
        store = KubernetesQuotaStore(api, hub_ns)
        await store.update("users", "alice", parse_patch({"gpus": 2}))
        written = await QuotaSync(api, store).sync_user("alice", [], namespace=alice_ns)
        assert written["spec"]["hard"] == {"requests.nvidia.com/gpu": "2", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
    finally:
        await api.close()

    configmap = core_v1.read_namespaced_config_map(QUOTA_CONFIGMAP, hub_ns)
    assert '"gpus": 2' in configmap.data["quotas.json"]
    assert quota_status(core_v1, alice_ns).spec.hard == {"requests.nvidia.com/gpu": "2", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
    wait_for(lambda: quota_status(core_v1, alice_ns).status.hard, what="the ResourceQuota's status")

    jobs = KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=alice_ns, images=[{"name": "paddle:3.3.1-gpu"}],
                             gpu_tolerations=[GPU_TOLERATION],
                             pod_annotations={COMPLETE_AFTER: "10m"})
    try:
        with pytest.raises(QuotaExceeded) as info:
            await jobs.submit(JobSpec(command=["python", "train.py"], workers=2, gpus_per_worker=2))
        assert info.value.message == "Needs 4 GPUs; your quota is 2 and 0 are in use."
        assert await jobs.list() == []

        # The API server refuses a pod made without us just the same.
        with pytest.raises(kubernetes.client.ApiException) as refused:
            core_v1.create_namespaced_pod(alice_ns, gpu_pod("sneaky", 4))
        assert refused.value.status == 403 and "exceeded quota" in refused.value.body
        assert "requests.nvidia.com/gpu=2" in refused.value.body

        # With 2 GPUs in use by a running job, the refusal names it.
        await jobs.submit(JobSpec(name="resnet-3", command=["python", "train.py"], workers=1, gpus_per_worker=2))
        wait_for(lambda: (quota_status(core_v1, alice_ns).status.used or {}).get("requests.nvidia.com/gpu") == "2",
                 timeout=60, what="resnet-3's pod to count against the quota")
        with pytest.raises(QuotaExceeded) as info:
            await jobs.submit(JobSpec(command=["python", "train.py"], workers=1, gpus_per_worker=2))
        assert info.value.message == "Needs 2 GPUs; your quota is 2 and 2 are in use by job resnet-3."
        quota = (await jobs.quota()).to_dict()
        assert quota["limits"] == {"gpus": 2} and quota["used"]["gpus"] == 2
        assert quota["sources"] == {"gpus": "user"} and quota["running"] == ["resnet-3"]
    finally:
        await jobs.close()


async def test_group_limit_for_a_new_member_user_override_wins_and_running_jobs_cap(cluster, core_v1, make_namespace):
    hub_ns, newbie_ns = make_namespace("hub"), make_namespace("paddlecloud-newbie")
    api = KubeApi.connect(cluster.kubeconfig)
    try:
        store = KubernetesQuotaStore(api, hub_ns)
        sync = QuotaSync(api, store)
        await store.update("default", None, parse_patch({"gpus": 1, "cpu": "4", "running_jobs": 1}))
        await store.update("groups", "ml", parse_patch({"gpus": 4, "cpu": "16"}))

        await sync.sync_user("newbie", ["ml"], namespace=newbie_ns)
        hard = quota_status(core_v1, newbie_ns).spec.hard
        assert hard == {"requests.nvidia.com/gpu": "4", "requests.cpu": "16", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}

        await store.update("users", "newbie", parse_patch({"gpus": 1}))
        await sync.sync_user("newbie", ["ml"], namespace=newbie_ns)
        quota = quota_status(core_v1, newbie_ns)
        assert quota.spec.hard == {"requests.nvidia.com/gpu": "1", "requests.cpu": "16", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
        assert quota.metadata.annotations["paddlecloud.io/running-jobs"] == "1"
    finally:
        await api.close()

    # The running-jobs cap (not a ResourceQuota item) comes from the annotation.
    wait_for(lambda: quota_status(core_v1, newbie_ns).status.hard, what="the ResourceQuota's status")
    jobs = KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=newbie_ns, images=[{"name": "paddle:3.3.1-cpu"}],
                             pod_annotations={COMPLETE_AFTER: "10m"})
    try:
        await jobs.submit(JobSpec(name="first", command=["python", "train.py"], workers=1))
        with pytest.raises(QuotaExceeded) as info:
            await jobs.submit(JobSpec(name="second", command=["python", "train.py"], workers=1))
        assert info.value.message == ("Your quota allows 1 running job and 1 is running (first); "
                                      "wait for one to finish or cancel one.")
        assert (await jobs.quota()).limits.running_jobs == 1
        await jobs.cancel("first")
        await jobs.submit(JobSpec(name="third", command=["python", "train.py"], workers=1))
    finally:
        await jobs.close()


async def test_configmap_store_loses_no_concurrent_update_and_refuses_stale_ones(cluster, core_v1, make_namespace):
    hub_ns = make_namespace("hub")
    api = KubeApi.connect(cluster.kubeconfig)
    try:
        store = KubernetesQuotaStore(api, hub_ns, retries=20)
        await asyncio.gather(*(store.update("users", f"user{i}", parse_patch({"pods": i + 1})) for i in range(6)))
        config = await store.load()
        assert config.version == 6
        assert {name: entry.limits.pods for name, entry in config.users.items()} == {f"user{i}": i + 1 for i in range(6)}

        revision = config.users["user0"].revision
        await store.update("users", "user0", parse_patch({"pods": 10, "revision": revision}, allow_revision=True))
        with pytest.raises(QuotaConflict):
            await store.update("users", "user0", parse_patch({"pods": 20, "revision": revision}, allow_revision=True))
        assert (await store.load()).users["user0"].limits.pods == 10
    finally:
        await api.close()


async def test_the_site_default_survives_every_save(cluster, core_v1, make_namespace):
    """What PaddleCloudSpawner does before each start, with the chart's default quota as the
    store's site default: it applies before anything is saved, and still applies to every field
    nobody set after an admin saves a group, a user or the default (issue 28: the first save
    used to drop it for everyone)."""
    hub_ns, user_ns = make_namespace("hub"), make_namespace("paddlecloud-dora")
    api = KubeApi.connect(cluster.kubeconfig)
    try:
        store = KubernetesQuotaStore(api, hub_ns, site_default=Limits(gpus=1, memory="8Gi"))
        sync = QuotaSync(api, store)
        await sync.sync_user("dora", ["ml"], namespace=user_ns)  # nothing saved yet: the site default applies
        assert quota_status(core_v1, user_ns).spec.hard == {"requests.nvidia.com/gpu": "1", "requests.memory": "8Gi",
                                                            **NO_EXPOSURE_HARD, **OBJECT_QUOTA}

        await store.update("users", "someone-else", parse_patch({"gpus": 5}))  # an unrelated save
        await sync.sync_user("dora", ["ml"], namespace=user_ns)
        assert quota_status(core_v1, user_ns).spec.hard == {"requests.nvidia.com/gpu": "1", "requests.memory": "8Gi",
                                                            **NO_EXPOSURE_HARD, **OBJECT_QUOTA}

        await store.update("groups", "ml", parse_patch({"gpus": 3}))  # the group raises GPUs, memory stays
        await sync.sync_user("dora", ["ml"], namespace=user_ns)
        assert quota_status(core_v1, user_ns).spec.hard == {"requests.nvidia.com/gpu": "3", "requests.memory": "8Gi",
                                                            **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
    finally:
        await api.close()


async def test_service_changes_reach_every_affected_namespace(cluster, core_v1, tmp_path, monkeypatch):
    """The quota service's Kubernetes mode, with the real local hub answering who is in
    which group: a group change rewrites its members' ResourceQuotas (and no one
    else's), a default change everyone's; the overview reads usage from the namespaces."""
    import uuid

    from hubutil import LocalHub
    from paddle_ext.hub.quota_service import QuotaService

    prefix = f"pcq-{uuid.uuid4().hex[:6]}-"
    hub_ns = prefix + "hub"
    names = [hub_ns] + [prefix + user for user in ("ann", "ben")]
    for name in names:
        core_v1.create_namespace({"metadata": {"name": name}})
    hub = LocalHub(tmp_path / "paddlecloud")
    try:
        hub.start()
        token = hub.new_token(hub.login("admin"), "admin")
        for user in ("ann", "ben"):
            assert hub.hub_api("POST", f"/users/{user}", token).status_code == 201
        assert hub.hub_api("POST", "/groups/ml", token).status_code == 201
        assert hub.hub_api("POST", "/groups/ml/users", token, json={"users": ["ann"]}).status_code == 200

        service = QuotaService(store_kind="kubernetes", kubeconfig=cluster.kubeconfig, hub_namespace=hub_ns,
                               namespace_template=prefix + "{username}")
        monkeypatch.setenv("JUPYTERHUB_API_URL", f"{hub.url}/hub/api")
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)  # the admin's, standing in for the service's own
        await service.setup()
        try:
            view = await service.update("groups", "ml", parse_patch({"gpus": 4}))
            assert view["members"] == ["ann"] and "sync_errors" not in view
            assert quota_status(core_v1, prefix + "ann").spec.hard == {
                "requests.nvidia.com/gpu": "4", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
            with pytest.raises(kubernetes.client.ApiException):
                quota_status(core_v1, prefix + "ben")  # not in ml: not written

            view = await service.update("default", None, parse_patch({"gpus": 1, "running_jobs": 2}))
            assert "sync_errors" not in view  # admin has no namespace yet: skipped, written at spawn
            assert quota_status(core_v1, prefix + "ben").spec.hard == {
                "requests.nvidia.com/gpu": "1", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
            assert quota_status(core_v1, prefix + "ann").spec.hard == {
                "requests.nvidia.com/gpu": "4", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}
            assert quota_status(core_v1, prefix + "ann").metadata.annotations["paddlecloud.io/running-jobs"] == "2"

            await service.update("users", "ann", parse_patch({"gpus": 2}))
            assert quota_status(core_v1, prefix + "ann").spec.hard == {
                "requests.nvidia.com/gpu": "2", **NO_EXPOSURE_HARD, **OBJECT_QUOTA}

            overview = await service.overview()
            users = {u["user"]: u for u in overview["users"]}
            assert users["ann"]["limits"] == {"gpus": 2, "running_jobs": 2}
            assert users["ann"]["used"]["running_jobs"] == 0 and users["ann"]["gpu_hours"] == {"7d": 0.0, "30d": 0.0}
            assert users["ben"]["sources"] == {"gpus": "default", "running_jobs": "default"}
        finally:
            await service.store.api.close()
    finally:
        hub.stop()
        for name in names:
            try:
                core_v1.delete_namespace(name)
            except kubernetes.client.ApiException:
                pass


async def test_every_users_usage_is_read_across_namespaces_as_each_namespace_reads_it(
        cluster, core_v1, batch_v1, rbac_v1, caplog):
    """Issue 29: the quota pages read every user's jobs and quota report in a few lists across
    namespaces, each user's as their own namespace's listing reads it: a running and a succeeded
    job, and one whose workers a LimitRange refuses for good, which reads as failed and is left as
    it is (reading changes nothing); a namespace of no hub user is left out and a user without a
    namespace has no jobs. A service that keeps watched copies of the live pods, the nodes and
    the ResourceQuotas (as the hub's quota service does) reads the same: its copy of the live pods gained each
    worker and lost the succeeded one (the API server's DELETED for a pod that left the field
    selector). An account that may list only in the users' namespaces gets the same answers,
    user by user, and the service says why once."""
    import logging
    import uuid

    from paddle_ext.constants import FAILED_ANNOTATION
    from paddle_ext.hub.usage import KubernetesUsage
    from paddle_ext.kubeapi import Credentials
    from paddle_ext.quota.model import Effective

    prefix = f"pcu-{uuid.uuid4().hex[:6]}-"
    namespaces = {user: prefix + user for user in ("ann", "bob", "stranger")}
    for name in namespaces.values():
        core_v1.create_namespace({"metadata": {"name": name}})
    core_v1.create_namespaced_limit_range(namespaces["bob"], {
        "metadata": {"name": "small"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}})
    reader_role = f"{prefix}reader"
    backends = []

    def backend(user: str, complete_after: str) -> KubernetesBackend:
        made = KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=namespaces[user], user=user,
                                 gpu_tolerations=[GPU_TOLERATION], pod_annotations={COMPLETE_AFTER: complete_after})
        backends.append(made)
        return made

    def without_hours(answers: dict) -> dict:
        found = {}
        for user, answer in answers.items():
            if isinstance(answer, list):
                found[user] = [job.to_dict() for job in answer]
            else:
                found[user] = {k: v for k, v in answer.to_dict().items() if k != "gpu_hours"}
        return found

    api = KubeApi.connect(cluster.kubeconfig)
    usage = KubernetesUsage(api, prefix + "{username}", "nvidia.com/gpu")
    watching = KubernetesUsage(api, prefix + "{username}", "nvidia.com/gpu")
    live_pods = WatchedCopy(api, WatchedList(api_path("v1", "pods"), LIVE_PODS_SELECTOR, "live pods"))
    users = ["ann", "bob", "cid"]
    watching.start_watching()
    live_pods.start()
    try:
        gpu = {"command": ["python", "train.py"], "workers": 1, "gpus_per_worker": 1}
        await backend("ann", "10m").submit(JobSpec(name="long", **gpu))
        await backend("ann", "1s").submit(JobSpec(name="quick", **gpu))
        await backend("stranger", "10m").submit(JobSpec(name="long", **gpu))
        await backend("bob", "10m").submit(JobSpec(name="too-big", command=["python", "train.py"], cpu="2"))

        async def settled():
            phases = {user: {job.name: job.phase for job in await usage.jobs(user)} for user in users}
            return phases == {"ann": {"long": "Running", "quick": "Succeeded"}, "bob": {"too-big": "Failed"},
                              "cid": {}} and phases
        await wait_for_async(settled, timeout=90, what="ann's jobs running and done, bob's refused")

        def ours(pods: list[dict]) -> list[str]:
            return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                          if p["metadata"]["namespace"].startswith(prefix))

        def copy_as_listed():
            copied = live_pods.items()
            listed = core_v1.api_client.sanitize_for_serialization(
                core_v1.list_pod_for_all_namespaces(field_selector=LIVE_PODS_SELECTOR).items)
            return copied is not None and ours(copied) == ours(listed) and ours(copied)
        copied = wait_for(copy_as_listed, timeout=30, what="the watched copy of the live pods as a list reads them")
        assert [name.rsplit("-", 2)[0] for name in copied] == [namespaces["ann"] + "/long",
                                                               namespaces["stranger"] + "/long"], copied

        async def as_each_reads():
            found = await usage.jobs_of(users, concurrency=8)
            each = {user: await usage.jobs(user) for user in users}
            seen = await watching.jobs_of(users, concurrency=8)
            return without_hours(found) == without_hours(each) == without_hours(seen) and found
        found = await wait_for_async(as_each_reads, timeout=30, what="the same jobs as each namespace's own listing")
        assert set(found) == set(users) and found["cid"] == []
        assert "Kubernetes refused to create the workers" in found["bob"][0].message
        refused = batch_v1.read_namespaced_job("too-big", namespaces["bob"])
        assert FAILED_ANNOTATION not in (refused.metadata.annotations or {}) and not refused.spec.suspend

        limits = {user: Effective(Limits(gpus=8), {}) for user in users}

        async def reports_as_each_reads():
            found = await usage.reports(limits, concurrency=8)
            each = {user: await usage.report(user, limits[user]) for user in users}
            seen = await watching.reports(limits, concurrency=8)
            return without_hours(found) == without_hours(each) == without_hours(seen) and found
        reports = await wait_for_async(reports_as_each_reads, timeout=30, what="the same reports as each user's own")
        assert reports["ann"].running == ("long",) and reports["ann"].used["gpus"] == 1

        # An account that may list only in ann's and bob's namespaces: user by user, the same.
        reader_ns = namespaces["stranger"]
        core_v1.create_namespaced_service_account(reader_ns, {"metadata": {"name": "reader"}})
        rbac_v1.create_cluster_role({"metadata": {"name": reader_role}, "rules": [
            {"apiGroups": ["", "batch"], "resources": ["jobs", "pods", "events", "resourcequotas"],
             "verbs": ["get", "list"]}]})
        for user in ("ann", "bob"):
            rbac_v1.create_namespaced_role_binding(namespaces[user], {
                "metadata": {"name": "reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader_role},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": reader_ns}]})
        token = core_v1.create_namespaced_service_account_token(
            "reader", reader_ns, {"spec": {"expirationSeconds": 900}}).status.token
        reader_api = KubeApi(Credentials(server=cluster.server, ca_file=cluster.pki["ca.crt"], token=token))
        reader = KubernetesUsage(reader_api, prefix + "{username}", "nvidia.com/gpu")
        try:
            async def reader_reads_the_same():
                found = await reader.jobs_of(["ann", "bob"], concurrency=8)
                each = {user: await usage.jobs(user) for user in ("ann", "bob")}
                return without_hours(found) == without_hours(each)
            with caplog.at_level(logging.WARNING, logger="paddle_ext.hub.usage"):
                await wait_for_async(reader_reads_the_same, timeout=30, what="the same jobs, user by user")
            (told,) = [r.getMessage() for r in caplog.records if r.name == "paddle_ext.hub.usage"]
            assert "across all namespaces" in told
        finally:
            await reader_api.close()
    finally:
        await live_pods.stop()
        await watching.stop_watching()
        await api.close()
        for made in backends:
            await made.close()
        try:
            rbac_v1.delete_cluster_role(reader_role)
        except kubernetes.client.ApiException:
            pass
        # The jobs' GPU pods gone before the next test, which may need every GPU of the KWOK nodes.
        for name in namespaces.values():
            batch_v1.delete_collection_namespaced_job(name, propagation_policy="Background")
        wait_for(lambda: not any(core_v1.list_namespaced_pod(name).items for name in namespaces.values()),
                 timeout=120, what="the test's pods gone")
        for name in namespaces.values():
            try:
                core_v1.delete_namespace(name)
            except kubernetes.client.ApiException:
                pass
