"""The Kubernetes hub (hub_config/jupyterhub_config.py, KubeSpawner) as the cluster tier runs
it, and helpers to act as its users: the `hub` fixture (conftest) starts one per session.

The hub and the proxy are real processes on this machine; notebook pods are real pods
admitted by the API server (Pod Security `restricted`). CPU notebooks run for real on
the real node from the notebook image (`make images`) and answer through the proxy;
GPU notebooks are placed on the KWOK GPU nodes (nothing runs there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import kubernetes
import requests

from cluster_helpers import GPU_TOLERATION, kubectl_exec, wait_for
from hubutil import LocalHub, check_spawn_accepted, free_port
from serverutil import sse_events
from paddle_ext.hub.settings import DEFAULT_PROFILES
from tools.k8s.cluster import IMAGE_REFS

REPO = Path(__file__).resolve().parents[2]
PREFIX = f"t5{uuid.uuid4().hex[:4]}"
DATASETS = [{"name": "imagenet", "mount_path": "/datasets/imagenet", "sub_path": "imagenet",
             "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}},
             "claim": {"accessModes": ["ReadOnlyMany"], "storageClassName": "datasets",
                       "resources": {"requests": {"storage": "1Gi"}}}}]
# The real node has 2 CPUs for notebooks and workers together: everything asks for little.
SMALL = {"cpu": "400m", "memory": "1Gi"}
GPU_SPAWN_GIVES_UP = 20  # seconds the hub waits for a (KWOK, never answering) GPU notebook


class KubeHub(LocalHub):
    """The Kubernetes hub config, run as a local process that talks to the test cluster.

    On a cluster with the real node its API listens on the node's bridge address, so notebook pods
    reach it; on a cluster of KWOK nodes only (the cluster tier's KWOK part), where no pod runs,
    on 127.0.0.1."""

    config = REPO / "hub_config" / "jupyterhub_config.py"
    extra_args = (f"--KubeSpawner.http_timeout={GPU_SPAWN_GIVES_UP}",)

    namespace = f"{PREFIX}-hub"

    def __init__(self, home: Path, kubeconfig: str, api_ip: str):
        super().__init__(home, password="any")
        self.kubeconfig = kubeconfig
        self.api_ip = api_ip
        self.quota_port = free_port()
        self.admin_token = ""

    def environment(self) -> dict[str, str]:
        env = super().environment()
        return {
            **env,
            "KUBECONFIG": self.kubeconfig,
            "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy",
            "PADDLECLOUD_ALLOWED_USERS": "alice,bob,carol,dave",
            "PADDLECLOUD_HUB_STATE_DIR": str(self.home),
            "PADDLECLOUD_HUB_IP": "127.0.0.1", "PADDLECLOUD_HUB_API_IP": self.api_ip,
            "PADDLECLOUD_HUB_CONNECT_URL": f"http://{self.api_ip}:{self.hub_api_port}",
            "PADDLECLOUD_HUB_NAMESPACE": self.namespace,
            "PADDLECLOUD_USER_NAMESPACE_TEMPLATE": PREFIX + "-{username}",
            "PADDLECLOUD_HOME_STORAGE_CLASS": "home",
            "PADDLECLOUD_JOBS_SHARE_HOME": "true",
            # The site's profiles, with a CPU notebook small enough for the real node.
            "PADDLECLOUD_PROFILES": json.dumps([*DEFAULT_PROFILES[:2], {**DEFAULT_PROFILES[2], "cpu": "250m",
                                                                        "memory": "1Gi"}]),
            "PADDLECLOUD_DATASETS": json.dumps(DATASETS),
            "PADDLECLOUD_WORKER_IMAGES": json.dumps([{"name": IMAGE_REFS["worker"]}]),
            "PADDLECLOUD_GPU_TOLERATIONS": json.dumps([GPU_TOLERATION]),
            # test_admission_policy.py's allowed class: the hub's pod policies apply to its namespaces too.
            "PADDLECLOUD_ALLOWED_PRIORITY_CLASSES": "research-low",
            "PADDLECLOUD_DEFAULT_QUOTA": json.dumps({"gpus": 2, "cpu": "40", "memory": "200Gi", "pods": 20}),
            "PADDLECLOUD_QUOTA_SERVICE_PORT": str(self.quota_port),
        }

    def restart(self) -> None:
        """Stop the hub as an upgrade or a crash would and start it again. Notebooks and
        jobs are left alone (the Kubernetes config keeps servers on a hub stop)."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.start()

    def start_server(self, name: str, token: str, profile: str) -> requests.Response:
        if self.hub_api("GET", f"/users/{name}", token).status_code == 404:
            assert self.hub_api("POST", f"/users/{name}", token).status_code == 201
        return self.hub_api("POST", f"/users/{name}/server", token, json={"profile": profile})

    def wait_gone(self, name: str, token: str, timeout: float = 120) -> None:
        wait_for(lambda: not self.server(name, token), timeout=timeout, what=f"{name}'s server gone")

    def ensure_stopped(self, name: str, token: str) -> None:
        """`name` has no server (stopped now if one runs or starts): for tests that start
        one of their own, whatever ran before them."""
        if self.server(name, token) is not None:
            assert self.hub_api("DELETE", f"/users/{name}/server", token).status_code in (202, 204)
            self.wait_gone(name, token)

    def ensure_running(self, name: str, token: str) -> None:
        """`name` has a ready CPU notebook (started now if it has none)."""
        if not (self.server(name, token) or {}).get("ready"):
            check_spawn_accepted(name, self.start_server(name, token, "paddle-cpu"))
            self.wait_ready(name, token, timeout=300)


POOL = [("home", ["ReadWriteMany"], 6), ("datasets", ["ReadOnlyMany"], 6)]


def storage_pool(core_v1, tmp_path):
    """Static PersistentVolumes for home and dataset claims (no provisioner runs here),
    on the real node's disk: homes are ReadWriteMany (jobs share them), writable by uid 1000."""
    for kind, modes, count in POOL:
        for i in range(count):
            folder = tmp_path / f"{kind}-{i}"
            folder.mkdir(mode=0o777)
            os.chmod(folder, 0o777)
            core_v1.create_persistent_volume({"metadata": {"name": f"{PREFIX}-{kind}-{i}"}, "spec": {
                "capacity": {"storage": "10Gi"}, "accessModes": modes, "storageClassName": kind,
                "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder)}}})


def remove_storage_pool(core_v1):
    for kind, _modes, count in POOL:
        for i in range(count):
            try:
                core_v1.delete_persistent_volume(f"{PREFIX}-{kind}-{i}")
            except kubernetes.client.ApiException:
                pass


def ns(user):
    return f"{PREFIX}-{user}"


def notebook_pod(core_v1, user):
    pods = core_v1.list_namespaced_pod(ns(user), label_selector="component=singleuser-server").items
    return pods[0] if len(pods) == 1 else None


def in_notebook(cluster, user, *command, timeout=600) -> subprocess.CompletedProcess:
    """Run a command inside the user's notebook container (kubectl exec: its own env and identity)."""
    return kubectl_exec(cluster, ns(user), f"jupyter-{user}", "notebook", *command, timeout=timeout)


def follow(base: str, headers: dict, name: str, timeout: float = 600) -> tuple[list[str], dict]:
    """Every log line of a job through the notebook server's SSE endpoint, and its end."""
    lines, end = [], None
    with requests.get(f"{base}/paddle/api/jobs/{name}/logs", params={"follow": "1"}, headers=headers,
                      stream=True, timeout=timeout) as response:
        assert response.status_code == 200, response.text
        for event, data in sse_events(response):
            if event == "end":
                end = json.loads(data)
            else:
                lines.append(data)
    return lines, end


MY_TRAIN = """import os
import paddle_ext
import model

rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
print(f"rank {rank}: model {model.VERSION}", flush=True)
paddle_ext.report(step=1, loss=0.5 + rank)
if rank == 0:
    with open(os.path.join(os.environ["PADDLECLOUD_OUTPUT_DIR"], "result.txt"), "w") as f:
        f.write(f"checkpoint of model {model.VERSION}\\n")
"""


def write_file(hub, user, path, text):
    """A file in `user`'s home through the notebook server's contents API (folders made first)."""
    parts = path.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = requests.put(f"{hub.url}/user/{user}/api/contents/{'/'.join(parts[:depth])}", timeout=30,
                              headers={"Authorization": f"token {hub.admin_token}"}, json={"type": "directory"})
        assert folder.status_code in (200, 201), folder.text
    response = requests.put(f"{hub.url}/user/{user}/api/contents/{path}",
                            headers={"Authorization": f"token {hub.admin_token}"}, timeout=30,
                            json={"type": "file", "format": "text", "content": text})
    assert response.status_code in (200, 201), response.text


def wait_job(hub, user, name, timeout=600) -> dict:
    headers = {"Authorization": f"token {hub.admin_token}"}
    url = f"{hub.url}/user/{user}/paddle/api/jobs/{name}"

    def ended():
        job = requests.get(url, headers=headers, timeout=60).json()
        return job if job["phase"] in ("Succeeded", "Failed", "Cancelled") else None
    return wait_for(ended, timeout=timeout, interval=1, what=f"{user}'s job {name} to end",
                    message=lambda: job_story(hub, user, name))


def write_test_script(hub, user, name: str) -> None:
    """One of tests/local/scripts (ticker.py, ...) in `user`'s home, where their jobs run."""
    write_file(hub, user, name, (Path(__file__).resolve().parents[1] / "local" / "scripts" / name).read_text())


def job_story(hub, user, name) -> str:
    """A job's state and the end of each worker's log, for an assertion's message: every
    worker's, since the one that failed first may not be the one whose log ends last (a worker
    stopped while it waits for its peers ends with Paddle's "No container in the pod")."""
    headers = {"Authorization": f"token {hub.admin_token}"}
    base = f"{hub.url}/user/{user}/paddle/api/jobs/{name}"
    job = requests.get(base, headers=headers, timeout=60).text
    logs = requests.get(f"{base}/logs", params={"tail": 40}, headers=headers, timeout=60).text
    return f"{job}\n--- each worker's last 40 lines ---\n{logs}"


def python_in_notebook(cluster, user, code: str) -> str:
    """Run `code` with the notebook's Python, as its kernels would; its last line of output."""
    done = in_notebook(cluster, user, "python", "-c", code)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
