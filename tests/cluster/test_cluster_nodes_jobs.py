"""Fake GPU nodes, scheduling, Job pod lifecycle and pod logs on the real control plane."""

import ipaddress
import json
import os
import subprocess

import kubernetes

from cluster_helpers import GPU_TOLERATION, on_kwok_nodes, wait_for
from tools.k8s.cluster import COMPLETE_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION, GPU_TAINT, cri_log_lines

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def versions():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "tools", "k8s", "VERSIONS")) as fh:
        return dict(line.strip().split("=", 1) for line in fh if "=" in line and not line.startswith("#"))


def gpu_job(name, completions=2, annotations=None, backoff_limit=0):
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed", "completions": completions, "parallelism": completions,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "containers": [{
                    "name": "worker", "image": "paddlepaddle/paddle:3.0.0",
                    "command": ["python", "train.py"],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}},
                }]},
            },
        },
    }


def job_pods(core_v1, namespace, job):
    return core_v1.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def test_server_and_kubectl_report_pinned_version(cluster, api_client, k8s_bin_dir):
    want = versions()["KUBERNETES"]
    assert kubernetes.client.VersionApi(api_client).get_code().git_version == want
    out = subprocess.run([os.path.join(k8s_bin_dir, "kubectl"), "--kubeconfig", cluster.kubeconfig,
                          "version", "-o", "json"], check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    assert info["clientVersion"]["gitVersion"] == want
    assert info["serverVersion"]["gitVersion"] == want


def test_nodes_ready_with_gpus(cluster, core_v1):
    nodes = core_v1.list_node().items
    real = [cluster.real_node_name] if cluster.real_node else []
    assert sorted(n.metadata.name for n in nodes) == sorted(cluster.node_names + real)
    for node in (n for n in nodes if n.metadata.name in cluster.node_names):
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True", node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "64"
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert ipaddress.ip_address(node.status.addresses[0].address) in LOOPBACK
        # tainted like real GPU nodes only when a real node is there to take everything else
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or [] if t.effect == "NoSchedule"]
        assert taints == ([(GPU_TAINT["key"], GPU_TAINT["value"], "NoSchedule")] if cluster.real_node else [])


def test_indexed_gpu_job_runs_logs_and_succeeds(cluster, core_v1, batch_v1, namespace, tmp_path):
    batch_v1.create_namespaced_job(namespace, gpu_job("train", annotations={COMPLETE_AFTER_ANNOTATION: "10s"}))

    def running():
        pods = job_pods(core_v1, namespace, "train")
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

    pods = wait_for(running, timeout=30, what="2 Running job pods")
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    for pod in pods:
        assert pod.spec.node_name in cluster.node_names
        ip = ipaddress.ip_address(pod.status.pod_ip)
        assert ip in LOOPBACK, pod.status.pod_ip
        assert ipaddress.ip_address(pod.status.host_ip) in LOOPBACK

    # Logs: plain read, then follow while the file grows.
    pod = pods[0].metadata.name
    log_file = tmp_path / "worker.log"
    log_file.write_text(cri_log_lines(["step 1 loss=0.9", "step 2 loss=0.5"]))
    cluster.set_pod_log(namespace, pod, str(log_file))
    text = wait_for(lambda: _read_log(core_v1, namespace, pod), timeout=15, what="pod log")
    assert text == "step 1 loss=0.9\nstep 2 loss=0.5\n"

    # Follow, in this thread (a read timeout guards against a hang): append a line
    # once the first two arrived and expect it on the same stream.
    resp = core_v1.read_namespaced_pod_log(pod, namespace, follow=True, _preload_content=False,
                                           _request_timeout=20)
    seen, buffer = [], b""
    try:
        for chunk in resp.stream(amt=None):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                seen.append(line.decode())
            if len(seen) == 2 and not log_file.read_text().count("step 3"):
                with open(log_file, "a") as fh:
                    fh.write(cri_log_lines(["step 3 loss=0.1"]))
            if len(seen) >= 3:
                break
    finally:
        resp.close()
    assert seen == ["step 1 loss=0.9", "step 2 loss=0.5", "step 3 loss=0.1"]

    def complete():
        # (the count reaches 2 with SuccessCriteriaMet; Complete follows in a later update)
        job = batch_v1.read_namespaced_job_status("train", namespace)
        done = any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])
        return job if done else None

    job = wait_for(complete, timeout=40, what="job Complete")
    assert job.status.succeeded == 2
    phases = {p.metadata.name: p.status.phase for p in job_pods(core_v1, namespace, "train")}
    assert sorted(phases.values()) == ["Succeeded", "Succeeded"], phases


def _read_log(core_v1, namespace, pod):
    try:
        return core_v1.read_namespaced_pod_log(pod, namespace)
    except kubernetes.client.ApiException:
        return None


def test_exit_code_annotation_fails_the_job(cluster, core_v1, batch_v1, namespace):
    job = gpu_job("broken", completions=1,
                  annotations={COMPLETE_AFTER_ANNOTATION: "500ms", EXIT_CODE_ANNOTATION: "3"})
    batch_v1.create_namespaced_job(namespace, job)

    def failed():
        j = batch_v1.read_namespaced_job_status("broken", namespace)
        return j if any(c.type == "Failed" and c.status == "True" for c in j.status.conditions or []) else None

    wait_for(failed, timeout=40, what="job Failed")
    pod = job_pods(core_v1, namespace, "broken")[0]
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def start_plain_pod(core_v1, namespace, name):
    """Create a pod with no owner and wait until kwok reports it Running."""
    core_v1.create_namespaced_pod(namespace, {
        "metadata": {"name": name},
        "spec": on_kwok_nodes({"containers": [{"name": "main", "image": "busybox"}]})})
    wait_for(lambda: core_v1.read_namespaced_pod(name, namespace).status.phase == "Running",
             timeout=20, what=f"pod {name} Running")


def test_pods_without_job_owner_keep_running(cluster, core_v1, batch_v1, namespace):
    start_plain_pod(core_v1, namespace, "notebook")
    batch_v1.create_namespaced_job(namespace, gpu_job("brief", completions=1,
                                                      annotations={COMPLETE_AFTER_ANNOTATION: "1s"}))
    wait_for(lambda: (batch_v1.read_namespaced_job_status("brief", namespace).status.succeeded or 0) == 1,
             timeout=60, what="a Job pod started after it to complete")
    assert core_v1.read_namespaced_pod("notebook", namespace).status.phase == "Running"


def test_deleted_pod_goes_away(cluster, core_v1, namespace):
    start_plain_pod(core_v1, namespace, "doomed")
    core_v1.delete_namespaced_pod("doomed", namespace)  # default 30s grace; kwok finishes it early

    def gone():
        try:
            core_v1.read_namespaced_pod("doomed", namespace)
            return False
        except kubernetes.client.ApiException as exc:
            return exc.status == 404

    wait_for(gone, timeout=15, what="pod deleted by kwok")
