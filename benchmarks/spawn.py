"""Concurrent notebook spawns: what our hub hooks add per spawn, against plain KubeSpawner.

Starting N JupyterLab processes on 2 cores would measure the machine, not the hooks, and
the hub's HTTP check of a notebook cannot pass on KWOK. Instead one process per run plays
the hub (benchmarks/spawn_driver.py): it loads hub_config/jupyterhub_config.py as the hub
does and starts N spawners at once in one event loop, each running KubeSpawner's real
start() against the real API server until its pod runs on a KWOK node. `plain` is
KubeSpawner with the same configuration (user namespaces, profile, home volume, security
context); `ours` is the configured PaddleCloudSpawner, which adds per spawn: the
notebook's ServiceAccount, Role and RoleBinding, a LimitRange, the dataset claim, the
ResourceQuota (from the quota ConfigMap), the quota check, and once per process the
admission policy. Runs alternate plain/ours, each in fresh namespaces, with statically
provisioned volumes pre-bound to the claims (no provisioner runs here).

Spawn → running is taken from a pod watch in this process (the first moment the pod is
Running and ready), because start() itself notices that by polling with a growing
back-off (up to 5 s), which blurs differences between the modes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

from common import HERE, Row, Section, fmt_ratio, fmt_s, log, median, percentile, ratio

from paddle_ext.kubeapi import KubeApi, api_path
from tools.k8s.cluster import ClusterError


async def _create_volumes(kubeconfig: str, prefix: str, users: list[str], datasets: bool) -> None:
    api = KubeApi.connect(kubeconfig)
    gate = asyncio.Semaphore(16)

    async def volume(name: str, claim_ns: str, claim: str, storage_class: str, mode: str):
        body = {"metadata": {"name": name}, "spec": {
            "capacity": {"storage": "10Gi"}, "accessModes": [mode], "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"},
            "claimRef": {"namespace": claim_ns, "name": claim}}}
        async with gate:
            await api.create(api_path("v1", "persistentvolumes"), body)

    try:
        jobs = []
        for user in users:
            ns = f"{prefix}-{user}"
            jobs.append(volume(f"{prefix}-home-{user}", ns, f"home-{user}", "home", "ReadWriteOnce"))
            if datasets:
                jobs.append(volume(f"{prefix}-data-{user}", ns, "team-datasets", "datasets", "ReadOnlyMany"))
        await asyncio.gather(*jobs)
    finally:
        await api.close()


class PodWatch:
    """One cluster-wide watch of notebook pods: per namespace, when its pod was first seen
    bound to a node and first seen Running and ready (time.monotonic())."""

    def __init__(self, cluster, prefix: str):
        self.cluster, self.prefix = cluster, prefix
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ready = threading.Event()
        self._conn = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("the pod watch did not start")
        return self

    def __exit__(self, *exc):
        if self._conn is not None and self._conn.sock is not None:
            try:
                self._conn.sock.shutdown(2)
            except OSError:
                pass
        self._thread.join(10)

    def _run(self):
        url = urllib.parse.urlsplit(self.cluster.server)
        rv = self.cluster.request("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
        self._conn = http.client.HTTPSConnection(url.hostname, url.port, context=self.cluster._context(), timeout=900)
        self._conn.request("GET", f"/api/v1/pods?watch=1&resourceVersion={rv}"
                                  "&labelSelector=component%3Dsingleuser-server&allowWatchBookmarks=false")
        resp = self._conn.getresponse()
        self.ready.set()
        try:
            for line in resp:
                now = time.monotonic()
                event = json.loads(line)
                pod = event.get("object") or {}
                ns = (pod.get("metadata") or {}).get("namespace", "")
                if event.get("type") not in ("ADDED", "MODIFIED") or not ns.startswith(self.prefix):
                    continue
                status = pod.get("status") or {}
                if (pod.get("spec") or {}).get("nodeName"):
                    self.bound.setdefault(ns, now)
                statuses = status.get("containerStatuses") or []
                if status.get("phase") == "Running" and status.get("podIP") and statuses and \
                        all(s.get("ready") for s in statuses):
                    self.running.setdefault(ns, now)
        except (OSError, ValueError, http.client.HTTPException):
            pass


def spawn_section(bench, spawns: int, runs: int) -> Section:
    t_start = time.monotonic()
    hub_ns = "bench-hub"
    try:
        bench.cluster.create("/api/v1/namespaces", {"metadata": {"name": hub_ns}})
    except ClusterError:  # made by an earlier run on this cluster
        pass
    tag = uuid.uuid4().hex[:4]
    users = [f"u{i:03d}" for i in range(spawns)]
    results: dict[str, list[dict]] = {"plain": [], "ours": []}
    walls: dict[str, list[float]] = {"plain": [], "ours": []}
    errors: dict[str, list[str]] = {"plain": [], "ours": []}
    order = []
    for rep in range(runs):
        order += ["plain", "ours"] if rep % 2 == 0 else ["ours", "plain"]
    for number, mode in enumerate(order):
        prefix = f"sp{tag}{number}{mode[0]}"
        asyncio.run(_create_volumes(bench.cluster.kubeconfig, prefix, users, datasets=mode == "ours"))
        log(f"spawn: run {number + 1}/{len(order)}: {spawns} concurrent {mode} spawns")
        state = os.path.join(bench.state, f"hub-{prefix}")
        os.makedirs(state, exist_ok=True)
        with PodWatch(bench.cluster, prefix + "-") as watch:
            proc = subprocess.run(
                [sys.executable, os.path.join(HERE, "spawn_driver.py"), "--mode", mode, "--users", str(spawns),
                 "--prefix", prefix, "--hub-namespace", hub_ns, "--state-dir", state],
                env=bench.env, capture_output=True, text=True, timeout=900)
            time.sleep(0.5)  # the last watch events
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"the spawn driver failed ({proc.returncode}): {proc.stderr[-1500:]}")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        walls[mode].append(data["wall"])
        for spawn in data["spawns"]:
            ns = spawn["namespace"]
            spawn["running_seconds"] = watch.running[ns] - spawn["t0"] if ns in watch.running else None
            spawn["bound_seconds"] = watch.bound[ns] - spawn["t0"] if ns in watch.bound else None
            if spawn["error"]:
                errors[mode].append(spawn["error"])
            elif spawn["running_seconds"] is None:
                errors[mode].append("the watch never saw the pod running")
            else:
                results[mode].append(spawn)
        done = [s["running_seconds"] for s in results[mode][-spawns:]]
        log(f"  {mode}: {len(done)} of {spawns} ran; running p50 {median(done)} p95 {percentile(done, 95)}; "
            f"errors: {sorted(set(errors[mode]))[:3]}")

    def stats(mode: str, key: str) -> tuple:
        values = [s[key] for s in results[mode] if s.get(key) is not None]
        return median(values), percentile(values, 95)

    def gap(mode: str, later: str, earlier: str) -> tuple:
        values = [s[later] - s[earlier] for s in results[mode] if s.get(later) is not None
                  and s.get(earlier) is not None]
        return median(values), percentile(values, 95)

    plain50, plain95 = stats("plain", "running_seconds")
    ours50, ours95 = stats("ours", "running_seconds")
    hook50, hook95 = stats("ours", "hook_seconds")
    added95 = None if ours95 is None or not plain95 else ours95 / plain95 - 1
    # A spawn that start() failed is the spawner's result (reported), not the harness's;
    # a spawn that start() passed but whose pod the watch never saw running would be ours.
    unseen = [e for mode in errors for e in errors[mode] if e.startswith("the watch")]
    correct = not unseen and not errors["ours"] and len(results["ours"]) == spawns * runs
    failed = f"; plain KubeSpawner: {len(errors['plain'])} of {spawns * runs} spawns failed" if errors["plain"] else ""
    row = Row(f"{spawns} concurrent notebook spawns: spawn → pod running, p95 (KWOK)",
              f"{fmt_s(ours95)} (our hooks alone: p50 {fmt_s(hook50)}, p95 {fmt_s(hook95)})",
              f"{fmt_s(plain95)} (plain KubeSpawner{', spawns that ran' if errors['plain'] else ''})",
              f"{fmt_ratio(ratio(ours95, plain95))} ({added95 * 100:+.0f}%)" if added95 is not None else "—",
              "≤ +10%", bool(added95 is not None and added95 <= 0.10 and correct), failed.lstrip("; "))
    lines = [__doc__.split("\n\n", 1)[1].strip(), "",
             f"{runs} run(s) per mode of {spawns} spawns at once, alternating; per-spawn figures over all runs "
             "(p50 / p95). 'Our hooks' is PaddleCloudSpawner's namespace preparation minus KubeSpawner's own "
             "namespace creation within it, measured inside the same spawns. **Correct**: each of our spawns' "
             "start() returned without an error and its pod ran; a failed start() of plain KubeSpawner is its "
             "result, counted under errors (percentiles are over the spawns that ran).", "",
             "| mode | spawns that ran | spawn → pod running | start() returned | spawn → pod created | "
             "pod created → bound | bound → running | namespace creation | our hooks | all spawns of a run "
             "(wall) | errors |",
             "|---|---:|---|---|---|---|---|---|---|---|---|"]

    def pair(values: tuple) -> str:
        return f"{fmt_s(values[0])} / {fmt_s(values[1])}"

    for mode in ("plain", "ours"):
        lines.append(
            f"| {mode} | {len(results[mode])} of {spawns * runs} | {pair(stats(mode, 'running_seconds'))} | "
            f"{pair(stats(mode, 'seconds'))} | {pair(stats(mode, 'pod_created_seconds'))} | "
            f"{pair(gap(mode, 'bound_seconds', 'pod_created_seconds'))} | "
            f"{pair(gap(mode, 'running_seconds', 'bound_seconds'))} | {pair(stats(mode, 'namespace_seconds'))} | "
            f"{pair((hook50, hook95)) if mode == 'ours' else '—'} | {', '.join(fmt_s(w) for w in walls[mode])} | "
            f"{len(errors[mode])}{': ' + sorted(set(errors[mode]))[0][:160] if errors[mode] else ''} |")
    lines += ["", "Command (per run): `python benchmarks/spawn_driver.py --mode plain|ours --users "
              f"{spawns} --prefix P --hub-namespace {hub_ns} --state-dir DIR` with `KUBECONFIG` set."]
    return Section(f"{spawns} concurrent notebook spawns (KWOK)", [row], "\n".join(lines),
                   seconds=time.monotonic() - t_start, correct=correct)
