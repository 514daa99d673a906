"""Pure parts of the launcher (no binaries needed)."""

import ipaddress

import pytest

from tools.k8s import cluster as launcher


def test_command_lines_bind_loopback_only():
    pki = {k: f"/pki/{k}" for k in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt",
                                   "admin.key", "kwok.crt", "kwok.key", "sa.key", "sa.pub")}
    cmds = [launcher.etcd_cmd("/b", "/d", 1, 2), launcher.apiserver_cmd("/b", pki, 1, 3),
            launcher.controller_manager_cmd("/b", "/k", pki, 4, "/c"),
            launcher.scheduler_cmd("/b", "/k", 5, "/c"), launcher.kwok_cmd("/b", "/k", "/cfg", pki, 6)]
    values = [a.split("=", 1)[1] for c in cmds for a in c if "=" in a]
    assert not [v for v in values if v.startswith(("0.0.0.0", "[::]", "http://0.0.0.0"))]
    assert "--bind-address=127.0.0.1" in cmds[1] and "--advertise-address=127.0.0.1" in cmds[1]
    assert "--server-address=127.0.0.1:6" in cmds[4]
    cidr = ipaddress.ip_network(next(a for a in cmds[4] if a.startswith("--cidr=")).split("=", 1)[1])
    assert cidr.subnet_of(ipaddress.ip_network("127.0.0.0/8"))


def test_free_ports_are_distinct():
    ports = launcher.pick_ports(list("abcdef"))
    assert len(set(ports.values())) == 6


def test_node_manifest_has_gpus_and_model_label():
    node = launcher.node_manifest("n0", gpus=4)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["capacity"]["pods"] == "110"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_job_pod_stages_split_on_exit_code():
    base = {"metadata": {"name": "pod-complete"},
            "spec": {"selector": {"matchExpressions": []},
                     "delay": {"durationMilliseconds": 1000, "jitterDurationMilliseconds": 5000},
                     "next": {"statusTemplate": "phase: Succeeded"}}}
    ok, fail = launcher.job_pod_stages(base, 2500)
    assert ok["spec"]["delay"]["durationMilliseconds"] == 2500
    assert "jitterDurationMilliseconds" not in ok["spec"]["delay"]
    assert launcher.COMPLETE_AFTER_ANNOTATION in ok["spec"]["delay"]["durationFrom"]["expressionFrom"]
    assert ok["spec"]["selector"]["matchExpressions"][-1]["operator"] == "In"
    assert fail["spec"]["selector"]["matchExpressions"][-1]["operator"] == "NotIn"
    assert "phase: Failed" in fail["spec"]["next"]["statusTemplate"]
    assert base["spec"]["selector"]["matchExpressions"] == []  # input untouched


def test_cri_log_lines_and_durations():
    text = launcher.cri_log_lines(["a", "b"], stream="stderr")
    assert [line.split(" ", 3)[1:] for line in text.splitlines()] == [["stderr", "F", "a"], ["stderr", "F", "b"]]
    assert launcher._duration_ms("500ms") == 500
    assert launcher._duration_ms("2s") == 2000
    assert launcher._duration_ms(7) == 7
    with pytest.raises(ValueError):
        launcher._duration_ms("soon")


def test_kwok_finishes_storage_helper_pods_and_only_those():
    from tools.k8s import storage
    base = {"metadata": {"name": "pod-complete"},
            "spec": {"selector": {"matchExpressions": [
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}]},
                "weightFrom": {"expressionFrom": "x"},
                "delay": {"durationMilliseconds": 1000, "durationFrom": {"expressionFrom": "y"}},
                "next": {"statusTemplate": "phase: Succeeded"}}}
    stage = storage.kwok_helper_stage(base)
    keys = [e["key"] for e in stage["spec"]["selector"]["matchExpressions"]]
    assert ".status.phase" in keys and not [k for k in keys if "ownerReferences" in k]
    label = stage["spec"]["selector"]["matchExpressions"][-1]
    assert label["values"] == [storage.helper_pod()["metadata"]["labels"][storage.HELPER_LABEL[0]]]
    assert stage["spec"]["delay"] == {"durationMilliseconds": 200}
    assert stage["metadata"]["name"] != "pod-complete" and base["metadata"]["name"] == "pod-complete"


def test_the_default_storage_class_and_the_provisioner_config():
    from tools.k8s import storage
    objs = dict((o["kind"], o) for _, o in storage.objects())
    sc = objs["StorageClass"]
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert (sc["provisioner"], sc["volumeBindingMode"], sc["reclaimPolicy"]) == (
        "rancher.io/local-path", "WaitForFirstConsumer", "Delete")
    assert 'mkdir -m 0777 -p "$VOL_DIR"' in objs["ConfigMap"]["data"]["setup"]
    config = storage.provisioner_config("/state/storage/volumes")
    assert config["nodePathMap"] == [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/state/storage/volumes"]}]
    assert storage.volume_dir("/state").startswith(storage.storage_dir("/state") + "/")
    pod = storage.helper_pod()
    container = pod["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never" and container["securityContext"]["runAsUser"] == 0
    assert "resources" not in container  # bound to its node directly: must be admitted even on a full node
    cmd = storage.provisioner_cmd("/b", "/k", "/c.json", "/h.json")
    assert cmd[:2] == ["/b/local-path-provisioner", "start"] and "--kubeconfig=/k" in cmd
    assert f"--namespace={storage.NAMESPACE}" in cmd


def test_storage_cleanup_removes_the_volumes(tmp_path):
    from tools.k8s import storage
    volume = tmp_path / "storage" / "volumes" / "pvc-1_ns_claim"
    volume.mkdir(parents=True)
    (volume / "db.sqlite").write_text("x")
    assert storage.cleanup(str(tmp_path)) == []
    assert not (tmp_path / "storage").exists()
    assert storage.cleanup(str(tmp_path)) == []  # idempotent
