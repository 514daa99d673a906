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
