"""Gives every pod of our jobs a log, since no container runs under KWOK.

A thread watches a namespace's pods (ours, by label) and, for each new one, writes a
CRI-format log file and points KWOK's log server at it, so `pods/log` (plain and
follow) returns these lines through the real API server.
"""

from __future__ import annotations

import os
import threading
import time

from tools.k8s.cluster import cri_log_lines

from paddle_ext.backends.kubernetes_status import worker_index
from paddle_ext.manifests import label_selector


def default_lines(pod: dict) -> list[str]:
    index = worker_index(pod)
    return [
        f"LAUNCH INFO worker {index} starting",
        f"rank {index}: all_reduce check ok: sum=3 over 2 workers",
        f"rank {index}: epoch 1/1 loss 0.00035",
        f"rank {index}: done",
    ]


class LogFeeder:
    def __init__(self, cluster, core_v1, namespace: str, log_dir: str, lines=default_lines):
        self.cluster, self.core_v1, self.namespace = cluster, core_v1, namespace
        self.log_dir, self.lines = log_dir, lines
        self.fed: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        os.makedirs(self.log_dir, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def _run(self):
        while not self._stop.is_set():
            pods = self.core_v1.list_namespaced_pod(self.namespace, label_selector=label_selector()).items
            for pod in pods:
                name = pod.metadata.name
                if name in self.fed:
                    continue
                as_dict = {"metadata": {"labels": pod.metadata.labels or {}}}
                path = os.path.join(self.log_dir, f"{name}.log")
                with open(path, "w") as f:
                    f.write(cri_log_lines(self.lines(as_dict)))
                self.cluster.set_pod_log(self.namespace, name, path)
                self.fed[name] = path
            time.sleep(0.1)

    def append(self, pod_name: str, lines: list[str]) -> None:
        with open(self.fed[pod_name], "a") as f:
            f.write(cri_log_lines(lines))
