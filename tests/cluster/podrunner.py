"""Runs notebook pods' commands as local processes, since no container runtime runs here.

KWOK marks a pod Running and gives it a 127.x IP. This harness then starts the pod's
own command, with the pod's own environment, as a local process listening on that
IP, so the real single-user server answers the hub. What a kubelet would provide is
provided explicitly:
- the service-account token (TokenRequest for the pod's service account), CA and
  namespace in a folder named by PADDLECLOUD_SERVICEACCOUNT_DIR;
- KUBERNETES_SERVICE_HOST/PORT pointing at the API server on 127.0.0.1 (never the
  Service IP, which nothing routes here);
- the home volume as a local folder named after the pod's home PVC, so a restart
  with the same claim sees the same files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse, urlunparse

import kubernetes

SINGLEUSER_SELECTOR = "component=singleuser-server"


def resolve_env(pod, core_v1) -> dict[str, str]:
    """The container's environment as a kubelet would build it (value, fieldRef, secretKeyRef)."""
    env = {}
    for var in pod.spec.containers[0].env or []:
        if var.value is not None:
            env[var.name] = var.value
        elif var.value_from and var.value_from.field_ref:
            path = var.value_from.field_ref.field_path
            env[var.name] = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
                             "status.podIP": pod.status.pod_ip, "spec.nodeName": pod.spec.node_name,
                             "spec.serviceAccountName": pod.spec.service_account_name}.get(path, "")
        elif var.value_from and var.value_from.secret_key_ref:
            ref = var.value_from.secret_key_ref
            import base64
            secret = core_v1.read_namespaced_secret(ref.name, pod.metadata.namespace)
            env[var.name] = base64.b64decode(secret.data[ref.key]).decode()
    return env


def home_claim(pod) -> str | None:
    for volume in pod.spec.volumes or []:
        if volume.name == "home" and volume.persistent_volume_claim:
            return volume.persistent_volume_claim.claim_name
    return None


class PodRunner:
    def __init__(self, cluster, core_v1, work_dir: str, ca_path: str):
        self.cluster, self.core_v1, self.work_dir, self.ca_path = cluster, core_v1, work_dir, ca_path
        self.processes: dict[str, subprocess.Popen] = {}  # pod uid -> process
        self.pods: dict[str, object] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        for uid in list(self.processes):
            self._kill(uid)

    def _run(self):
        while not self._stop.is_set():
            try:
                pods = self.core_v1.list_pod_for_all_namespaces(label_selector=SINGLEUSER_SELECTOR).items
            except kubernetes.client.ApiException as exc:
                self.errors.append(str(exc))
                time.sleep(0.5)
                continue
            live = set()
            for pod in pods:
                uid = pod.metadata.uid
                if pod.metadata.deletion_timestamp is None:
                    live.add(uid)
                if uid not in self.processes and pod.status.phase == "Running" and pod.status.pod_ip \
                        and pod.metadata.deletion_timestamp is None:
                    try:
                        self._start(pod)
                    except Exception as exc:  # recorded for the test to show
                        self.errors.append(f"{pod.metadata.name}: {exc!r}")
                        self.processes[uid] = None
            for uid in list(self.processes):
                if uid not in live:
                    self._kill(uid)
            time.sleep(0.2)

    def _service_account_dir(self, pod) -> str:
        ns, sa = pod.metadata.namespace, pod.spec.service_account_name or "default"
        path = os.path.join(self.work_dir, "sa", pod.metadata.uid)
        os.makedirs(path, exist_ok=True)
        token = self.core_v1.create_namespaced_service_account_token(
            sa, ns, {"spec": {"expirationSeconds": 3600}}).status.token
        for name, text in (("token", token), ("namespace", ns), ("ca.crt", open(self.ca_path).read())):
            with open(os.path.join(path, name), "w") as f:
                f.write(text)
        return path

    def _start(self, pod):
        container = pod.spec.containers[0]
        env = resolve_env(pod, self.core_v1)
        service_url = urlparse(env["JUPYTERHUB_SERVICE_URL"])
        env["JUPYTERHUB_SERVICE_URL"] = urlunparse(service_url._replace(
            netloc=f"{pod.status.pod_ip}:{service_url.port}"))
        home = os.path.join(self.work_dir, "volumes", pod.metadata.namespace, home_claim(pod) or pod.metadata.name)
        os.makedirs(home, exist_ok=True)
        api_port = urlparse(self.cluster.server).port
        env.update({
            "HOME": home,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api_port),
            "PADDLECLOUD_SERVICEACCOUNT_DIR": self._service_account_dir(pod),
            "JUPYTER_RUNTIME_DIR": os.path.join(home, ".runtime"),
        })
        argv = list(container.command or []) + list(container.args or [])
        if argv and argv[0] == "jupyterhub-singleuser":
            argv = [sys.executable, "-m", "jupyterhub.singleuser", *argv[1:]]
        argv.append("--allow-root")  # the pod runs as uid 1000; this harness runs as whoever runs tests
        log = open(os.path.join(self.work_dir, f"{pod.metadata.name}.log"), "ab")
        self.processes[pod.metadata.uid] = subprocess.Popen(
            argv, env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pods[pod.metadata.uid] = pod

    def _kill(self, uid):
        proc = self.processes.pop(uid, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def alive(self) -> list[int]:
        return [p.pid for p in self.processes.values() if p is not None and p.poll() is None]
