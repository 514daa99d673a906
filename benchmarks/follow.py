"""Following a busy job's log: `paddlecloud logs -f`, `kubectl logs -f` and the notebook
server's SSE endpoint (GET /paddle/api/jobs/NAME/logs?follow=1), all three at once.

A W-worker job writes R lines per second per worker for S seconds, each line carrying its
write time, once every follower has printed a first line of every worker. Three reader
processes (benchmarks/follow_io.py read, one per follower) stamp the output as it
arrives: latency = arrival - write time. Correctness in the same run: every line of
every worker arrives once and in the worker's order.

Two sections: on the real node (`follow-node`: the job's containers print the lines
(benchmarks/follow_worker.py), containerd writes them to the pods' log files and the
kubelet serves them through the API server's pods/log), the goal's setting; and on KWOK
(`follow`: benchmarks/follow_io.py write appends the lines to CRI files that KWOK serves),
which needs no root and no images.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import psutil

from common import HERE, Row, Section, fmt_ms, fmt_ratio, log, ratio, wait_until

from paddle_ext.constants import CONTAINER_NAME, JOB_LABEL
from paddle_ext.spec import JobSpec
from tools.k8s.cluster import Cluster, ClusterError, IMAGE_REFS, cri_log_lines, free_port

FOLLOW_NS, FOLLOW_JOB = "bench-follow", "bench-follow"
IO = os.path.join(HERE, "follow_io.py")
WORKER = os.path.join(HERE, "follow_worker.py")
PODS_RUNNING_SECONDS = 120  # submit -> every worker's pod running on the real node
# Where each real-node worker waits for its start time (follow_worker.py), written into its
# container once every follower has a line of every worker.
START_GATE = "/tmp/paddlecloud-follow-start"


def start_lead_seconds(workers: int) -> float:
    """Gates written -> the workers start writing: room for a `kubectl exec` into each worker, all at once."""
    return 5.0 + 0.5 * workers


def cpu_seconds(proc) -> float:
    """User + system CPU seconds a process has used so far (nan if it is gone)."""
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except (psutil.Error, AttributeError):
        return float("nan")


class CpuSampler:
    """The CPU seconds each process has used, read every half second while in the `with`
    block: `last` keeps the newest reading of each, also of a process gone since."""

    def __init__(self, processes: dict):
        self.processes = processes
        self.last = {name: cpu_seconds(p) for name, p in processes.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for name, proc in self.processes.items():
            value = cpu_seconds(proc)
            if value == value:  # not nan: the process is still there
                self.last[name] = value

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def stop(proc: subprocess.Popen | None, timeout: float = 15) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class NotebookServer:
    """`jupyter server` with the paddle_ext extension on the Kubernetes backend (127.0.0.1)."""

    def __init__(self, state: str, env: dict, namespace: str):
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = os.path.join(state, "notebook-server")
        os.makedirs(os.path.join(self.home, "root"), exist_ok=True)
        self.log_path = os.path.join(self.home, "server.log")
        self.env = {**env, "PADDLECLOUD_HOME": self.home, "PADDLECLOUD_BACKEND": "kubernetes",
                    "JUPYTER_RUNTIME_DIR": os.path.join(self.home, "runtime"), "JUPYTER_TOKEN": self.token}
        self.cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
                    f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
                    f"--ServerApp.root_dir={os.path.join(self.home, 'root')}",
                    f"--KubernetesBackend.namespace={namespace}"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {open(self.log_path).read()[-1500:]}")
            try:
                req = urllib.request.Request(self.url + "/paddle/api/options",
                                             headers={"Authorization": f"token {self.token}"})
                with urllib.request.urlopen(req, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter server not up in {timeout}s: {open(self.log_path).read()[-1500:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        stop(self.proc)


def _wait_pods_running(cluster, workers: int, timeout: float) -> list[dict]:
    selector = f"{JOB_LABEL}={FOLLOW_JOB}"
    deadline = time.monotonic() + timeout
    while True:
        pods = cluster.request("GET", f"/api/v1/namespaces/{FOLLOW_NS}/pods?labelSelector={selector}")["items"]
        if len(pods) == workers and all(p.get("status", {}).get("phase") == "Running" and any(
                "running" in (s.get("state") or {}) for s in p["status"].get("containerStatuses") or [])
                for p in pods):
            return pods
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {workers} follow pods did not run within {timeout:.0f}s")
        time.sleep(0.3)


def _open_start_gates(kube, env: dict, pods: list[str], start_at: float) -> None:
    """Write `start_at` into START_GATE in every worker's container at once (by a rename: a
    worker reads the whole time or no file)."""
    script = (f"import os; open('{START_GATE}.new', 'w').write('{start_at:.6f}'); "
              f"os.rename('{START_GATE}.new', '{START_GATE}')")
    execs = {pod: subprocess.Popen(kube(FOLLOW_NS, "exec", pod, "-c", CONTAINER_NAME, "--", "python", "-c", script),
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for pod in pods}
    failed = []
    for pod, proc in execs.items():
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{pod}: {err.strip() or f'exit status {proc.returncode}'}")
    if failed:
        raise RuntimeError(f"could not write the start time into the workers' containers: {'; '.join(failed)}")


def _submit(backend, workers: int, command: list[str], workdir: str, **resources) -> None:
    async def submit():
        try:
            await backend.submit(JobSpec(name=FOLLOW_JOB, command=command, workers=workers, **resources),
                                 workdir=workdir)
        finally:
            await backend.close()

    asyncio.run(submit())


def _kubectl_follow(bench_kube, workers: int) -> list[str]:
    return bench_kube(FOLLOW_NS, "logs", "-f", "-l", f"{JOB_LABEL}={FOLLOW_JOB}", "--prefix",
                      "--max-log-requests", str(workers + 4), "--tail=-1")


def _measure(env: dict, ours_cmd: list[str], kubectl_cmd: list[str], server: NotebookServer, workers: int,
             lines: int, work: str, write) -> tuple[dict, dict, float, dict]:
    """Start the three followers, wait until each has a first line of every worker, then
    `write()` (returns once every line is written; gives the writer's figures). Returns
    each follower's tally, the CPU each used while the lines were written, the load, and
    the writer's figures."""
    server.wait_ready()
    commands = {
        "paddlecloud logs -f": ["--", *ours_cmd],
        "kubectl logs -f": ["--", *kubectl_cmd],
        "SSE (notebook server)": ["--sse", f"{server.url}/paddle/api/jobs/{FOLLOW_JOB}/logs?follow=1"],
    }
    readers: dict[str, subprocess.Popen] = {}
    try:
        for name, how in commands.items():
            tag = name.split()[0].lower()
            readers[name] = subprocess.Popen(
                [sys.executable, IO, "read", "--workers", str(workers), "--lines", str(lines),
                 "--out", os.path.join(work, f"{tag}.json"), "--ready", os.path.join(work, f"{tag}.ready"), *how],
                env={**env, "BENCH_TOKEN": server.token}, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while not all(os.path.exists(os.path.join(work, f"{n.split()[0].lower()}.ready")) for n in commands):
            dead = [n for n, p in readers.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"followers not ready (exited: {dead}) within 90s")
            time.sleep(0.2)
        followers = {name: (psutil.Process(proc.pid).children() or [None])[0] for name, proc in readers.items()}
        followers["SSE (notebook server)"] = psutil.Process(server.proc.pid)
        cpu_before = {name: cpu_seconds(p) for name, p in followers.items()}
        with CpuSampler(followers) as sampler:  # a follower may exit as soon as its last line is in
            wrote = write()
        cpu = {name: sampler.last[name] - cpu_before[name] for name in followers}
        load = os.getloadavg()[0]  # the last minute: the writing (most of it, at full size)
        deadline = time.monotonic() + 30  # every line should be there long before
        while any(p.poll() is None for p in readers.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for proc in readers.values():
            stop(proc)
    results = {}
    for name in commands:
        with open(os.path.join(work, f"{name.split()[0].lower()}.json")) as f:
            results[name] = json.load(f)
        r = results[name]
        log(f"  {name}: p50 {fmt_ms(r['p50'])} p99 {fmt_ms(r['p99'])} max {fmt_ms(r['max'])} "
            f"received {r['received']}/{r['expected']} lost {r['lost']} dup {r['duplicated']} "
            f"disorder {r['out_of_order']} {r['error']}")
    return results, cpu, load, wrote


def follow_section(bench, ours: list[str], workers: int, rate: int, seconds: int) -> Section:
    """On KWOK: each worker pod's log is a CRI file the benchmark appends to."""
    t_start = time.monotonic()
    cluster = bench.cluster
    cluster.create("/api/v1/namespaces", {"metadata": {"name": FOLLOW_NS}})
    server = NotebookServer(bench.state, bench.env, FOLLOW_NS)
    server.start()  # it starts while the job's pods come up
    work = os.path.join(bench.state, "follow")
    os.makedirs(work, exist_ok=True)
    try:
        _submit(bench.backend(FOLLOW_NS, max_workers=workers), workers, ["python", "train.py"],
                tempfile.mkdtemp(prefix="bench-code-", dir=bench.state))
        pods = _wait_pods_running(cluster, workers, 120)
        index = {p["metadata"]["name"]: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
                 for p in pods}
        from follow_io import payload

        paths = {}
        for name, i in index.items():
            paths[i] = os.path.join(work, f"{name}.log")
            with open(paths[i], "w") as f:
                f.write(cri_log_lines([payload(i, -1, time.monotonic())]))
            cluster.set_pod_log(FOLLOW_NS, name, paths[i])
        kubectl_cmd = _kubectl_follow(bench.kube, workers)
        check = [c for c in kubectl_cmd if c != "-f"]
        deadline = time.monotonic() + 60  # KWOK picks the Logs objects up shortly after they are created
        while len(subprocess.run(check, env=bench.env, capture_output=True, timeout=60).stdout.splitlines()) \
                != workers:
            if time.monotonic() > deadline:
                raise RuntimeError("KWOK did not serve the follow pods' logs within 60s")
            time.sleep(0.5)

        def write() -> dict:
            log(f"follow: followers ready; writing {rate} lines/s to each of {workers} logs for {seconds}s")
            out = os.path.join(work, "writer.json")
            writer = subprocess.Popen([sys.executable, IO, "write", "--rate", str(rate), "--seconds", str(seconds),
                                       "--out", out, *[paths[i] for i in range(workers)]], stdin=subprocess.DEVNULL)
            try:
                writer.wait(seconds * 3 + 60)
            finally:
                stop(writer)
            with open(out) as f:
                return json.load(f)

        measured = _measure(bench.env, bench.our(FOLLOW_NS, "logs", FOLLOW_JOB, "-f"), kubectl_cmd, server,
                            workers, int(rate * seconds), work, write)
    finally:
        server.stop()
        try:
            cluster.request("DELETE", f"/apis/batch/v1/namespaces/{FOLLOW_NS}/jobs/{FOLLOW_JOB}"
                                      "?propagationPolicy=Background")
        except Exception:  # noqa: BLE001 (the cluster may be gone when interrupted)
            pass
    return _report(measured, workers, rate, seconds, real_node=False, seconds_taken=time.monotonic() - t_start)


def node_unavailable(bin_dir: str) -> str | None:
    """Why the real-node section cannot run here (None: it can)."""
    from tools.k8s import images, node

    reason = node.unavailable_reason(bin_dir)
    if reason:
        return reason
    stale = images.stale_images(IMAGE_REFS.values(), os.path.join(bin_dir, "pause"))
    return f"images not built from this tree: {', '.join(stale)} (run `make images`)" if stale else None


def follow_node_section(bin_dir: str, kubectl: str, ours: list[str], workers: int, rate: int,
                        seconds: int, cluster_state: str | None = None) -> Section:
    """On the real node: the job's containers print the lines; the kubelet serves the logs.

    On a cluster of its own, or on the running one whose state dir is `cluster_state` (as
    `cluster.py up` or the cluster tier's session made it: its real node is then already
    taken by that cluster); there the section makes and deletes only its namespace."""
    t_start = time.monotonic()
    title = f"Follow: {workers} workers × {rate} lines/s (real node)"
    shared = Cluster.from_state_dir(cluster_state) if cluster_state else None
    if shared is None:
        why_not = node_unavailable(bin_dir)
    else:
        why_not = None if shared.real_node else f"the cluster of {cluster_state} has no real node"
    if why_not:
        row = Row(f"follow on the real node ({workers} workers × {rate} lines/s for {seconds} s)", "—", "—", "—",
                  "p99 ≤ kubectl's + 10 ms", None, f"not run: {why_not}")
        return Section(title, [row], f"Not run on this machine: {why_not}.", correct=True)
    from paddle_ext.backends.kubernetes import KubernetesBackend

    state = tempfile.mkdtemp(prefix="paddlecloud-bench-node-")
    work = os.path.join(state, "follow")
    code = os.path.join(state, "code")
    os.makedirs(work)
    os.makedirs(code)
    for script in (IO, WORKER):
        shutil.copy(script, code)
    cluster = shared or Cluster(state, bin_dir, nodes=1, real_node=True)
    server = None
    try:
        t0 = time.monotonic()
        if shared is None:
            cluster.start()
            log(f"follow-node: cluster with the real node {cluster.real_node_name} ready in "
                f"{time.monotonic() - t0:.0f}s")
        else:
            log(f"follow-node: on the running cluster of {cluster_state} (real node {cluster.real_node_name})")
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig}
        for name in ("PADDLECLOUD_BACKEND", "PADDLECLOUD_NAMESPACE"):
            env.pop(name, None)
        cluster.create("/api/v1/namespaces", {"metadata": {"name": FOLLOW_NS}})
        server = NotebookServer(state, env, FOLLOW_NS)
        server.start()
        _submit(KubernetesBackend(kubeconfig=cluster.kubeconfig, namespace=FOLLOW_NS, max_workers=workers),
                workers, ["python", "follow_worker.py", str(rate), str(seconds), START_GATE], code,
                cpu="100m", memory="1Gi")  # 16 fit on 2 CPUs; Paddle's launcher needs the memory
        pods = _wait_pods_running(cluster, workers, PODS_RUNNING_SECONDS)
        log(f"follow-node: {workers} pods running {time.monotonic() - t0:.0f}s after the cluster started")

        def kube(ns, *args):
            return [kubectl, "-n", ns, *args]

        def write() -> dict:
            lead = start_lead_seconds(workers)
            start_at = time.monotonic() + lead
            _open_start_gates(kube, env, [p["metadata"]["name"] for p in pods], start_at)
            if time.monotonic() > start_at:
                raise RuntimeError(f"writing the start time into the {workers} workers took longer than the "
                                   f"{lead:.0f}s it leaves: they did not start together")
            log(f"follow-node: followers ready; the workers write {rate} lines/s each for {seconds}s "
                f"in {start_at - time.monotonic():.1f}s")
            time.sleep(start_at + seconds + 1 - time.monotonic())  # the writing (the followers' CPU is read then)
            return {}

        results, cpu, load, _ = _measure(
            env, [*ours, "--backend", "kubernetes", "--namespace", FOLLOW_NS, "logs", FOLLOW_JOB, "-f"],
            _kubectl_follow(kube, workers), server, workers, int(rate * seconds), work, write)
        deadline = time.monotonic() + 120
        while (cluster.request("GET", f"/apis/batch/v1/namespaces/{FOLLOW_NS}/jobs/{FOLLOW_JOB}").get("status")
               or {}).get("succeeded") != workers:
            if time.monotonic() > deadline:
                raise RuntimeError("the follow job did not succeed within 120s of its writing")
            time.sleep(1)
        measured = results, cpu, load, worker_totals(cluster, workers)
    finally:
        if server is not None:
            server.stop()
        if shared is None:
            cluster.stop()
        else:
            _delete_namespace(cluster, FOLLOW_NS)
        shutil.rmtree(state, ignore_errors=True)
    return _report(measured, workers, rate, seconds, real_node=True, seconds_taken=time.monotonic() - t_start)


def _delete_namespace(cluster, namespace: str, timeout: float = 120) -> None:
    """Delete `namespace` from a cluster the section does not own; return once it is gone."""
    path = f"/api/v1/namespaces/{namespace}"

    def gone(method: str) -> bool:
        try:
            cluster.request(method, path)
        except ClusterError as exc:
            if f"{method} {path}: 404 " in str(exc):
                return True
            raise
        return False

    gone("DELETE")
    wait_until(lambda: gone("GET"), timeout, f"namespace {namespace} deleted")


def worker_totals(cluster, workers: int) -> dict:
    """The writer's figures from each worker's line of totals (follow_worker.py)."""
    selector = f"{JOB_LABEL}={FOLLOW_JOB}"
    pods = cluster.request("GET", f"/api/v1/namespaces/{FOLLOW_NS}/pods?labelSelector={selector}")["items"]
    totals = []
    for pod in pods:
        tail = cluster.request("GET", f"/api/v1/namespaces/{FOLLOW_NS}/pods/{pod['metadata']['name']}/log"
                                      "?tailLines=50")  # Paddle's launcher says a few words after it
        last = next(line for line in reversed(tail.splitlines()) if " totals " in line)
        fields = dict(part.split("=", 1) for part in last.split() if "=" in part)
        totals.append((int(fields["lines"]), float(fields["took"]), float(fields["worst_lag"])))
    took = max(t for _, t, _ in totals)
    lines = min(n for n, _, _ in totals)
    return {"lines_per_worker": lines, "workers": len(totals), "seconds": took,
            "rate_per_worker": lines / took if took else None, "worst_lag": max(lag for _, _, lag in totals)}


def _report(measured, workers: int, rate: int, seconds: int, real_node: bool, seconds_taken: float) -> Section:
    results, cpu, load, wrote = measured
    commands = list(results)

    def ok(r):
        return not r["error"] and r["lost"] == 0 and r["duplicated"] == 0 and r["out_of_order"] == 0 \
            and r["other_lines"] == 0

    ours, kube, sse = (results[n] for n in commands)
    correct = all(ok(r) for r in results.values())
    added = None if ours["p99"] is None or kube["p99"] is None else ours["p99"] - kube["p99"]
    where = (f"real node, {workers} workers × {rate} lines/s for {seconds} s" if real_node else
             f"KWOK file-backed logs, {workers} workers × {rate} lines/s for {seconds} s")
    caveat = "" if real_node else "(KWOK, not the real node)"
    cpu_ours, cpu_kube, cpu_sse = (cpu[n] for n in commands)
    busy = (f"machine load {load:.1f} on {os.cpu_count()} CPUs while writing; CPU used: ours {cpu_ours:.1f} s, "
            f"kubectl {cpu_kube:.1f} s, notebook server {cpu_sse:.1f} s")
    met = bool(added is not None and added <= 0.010 and ok(ours) and ok(kube))
    rows = [
        Row(f"follow: line written → printed, p50 / p99 ({where})",
            f"{fmt_ms(ours['p50'])} / {fmt_ms(ours['p99'])}", f"{fmt_ms(kube['p50'])} / {fmt_ms(kube['p99'])}",
            f"p99 {'+' if (added or 0) >= 0 else '−'}{f'{abs(added) * 1000:.2f} ms' if added is not None else '—'}; "
            f"lost {ours['lost']}, dup {ours['duplicated']}, out of order {ours['out_of_order']}",
            "p99 ≤ kubectl's + 10 ms; 0 lost, 0 dup, order kept", met,
            "; ".join(x for x in (caveat, "" if met else f"limit: our CLI's CPU per line under load ({busy})") if x)),
    ]
    q50, q99 = ratio(sse["p50"], ours["p50"]), ratio(sse["p99"], ours["p99"])
    met = bool(q50 and q99 and q50 <= 1.2 and q99 <= 1.2 and ok(sse) and ok(ours))
    rows.append(Row(f"the same follow through the notebook server's SSE endpoint ({where})",
                    f"{fmt_ms(sse['p50'])} / {fmt_ms(sse['p99'])}",
                    f"{fmt_ms(ours['p50'])} / {fmt_ms(ours['p99'])} (the CLI, same run)",
                    f"p50 {fmt_ratio(q50)}, p99 {fmt_ratio(q99)}", "≤ 1.2× (p50 and p99)", met,
                    "; ".join(x for x in (caveat, "" if met else (
                        "limit: the server does the CLI's work plus HTTP in one event loop (Python), and its "
                        f"reader is one more process to wake, which lags behind when the CPUs are short ({busy})"))
                        if x)))
    setting = (
        "**On the real node**: the job's containers print the lines (benchmarks/follow_worker.py, in the job's "
        "shipped code), containerd writes them to the pods' log files and the kubelet serves them through the "
        "API server's pods/log; the real node's own work (containerd, kubelet, the workers) is on the same 2 CPUs "
        "as the followers." if real_node else
        "**This is not the real node** (see the real-node section for that): KWOK serves each pod's log from a "
        "file the benchmark appends to, so KWOK's file following is inside every figure (the same for all three "
        "followers).")
    details = [
        __doc__.split("\n\n", 1)[1].split("\n\n", 1)[0].strip(), "", setting, "",
        "'CPU while writing' is the CPU time the follower's process used while the lines were written (the "
        "notebook server: the whole `jupyter server` process). The load is the one the goal names: "
        f"{workers} workers × {rate} lines/s for {seconds} s, all three followers at once on this machine.", "",
        f"Writer: {wrote['lines_per_worker']:,} lines per worker in {wrote['seconds']:.1f} s "
        f"({wrote['rate_per_worker']:.0f} lines/s per worker achieved; worst lag behind schedule "
        f"{fmt_ms(wrote['worst_lag'])}).", "",
        "| follower | p50 | p90 | p99 | p99.9 | max | lines received | lost | duplicated | out of order | "
        "correct | CPU while writing |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"]
    for name, r in results.items():
        details.append(f"| {name} | {fmt_ms(r['p50'])} | {fmt_ms(r['p90'])} | {fmt_ms(r['p99'])} | "
                       f"{fmt_ms(r['p999'])} | {fmt_ms(r['max'])} | {r['received']:,} of {r['expected']:,} | "
                       f"{r['lost']} | {r['duplicated']} | {r['out_of_order']} | "
                       f"{'yes' if ok(r) else 'NO ' + r['error']} | {cpu[name]:.1f} s |")
    writer = (f"the workers run `python follow_worker.py {rate} {seconds} START`" if real_node else
              f"the writer is `python benchmarks/follow_io.py write --rate {rate} --seconds {seconds} FILE...`")
    details += ["", "Commands:", "",
                f"- ours: `paddlecloud --backend kubernetes --namespace {FOLLOW_NS} logs {FOLLOW_JOB} -f`",
                f"- kubectl: `kubectl -n {FOLLOW_NS} logs -f -l {JOB_LABEL}={FOLLOW_JOB} --prefix "
                f"--max-log-requests {workers + 4} --tail=-1`",
                f"- SSE: `GET /paddle/api/jobs/{FOLLOW_JOB}/logs?follow=1` on `jupyter server` with the paddle_ext "
                f"extension (`--KubernetesBackend.namespace={FOLLOW_NS}`, Kubernetes backend), read with "
                "http.client",
                f"- each under `python benchmarks/follow_io.py read ...`; {writer}"]
    title = f"Follow: {workers} workers × {rate} lines/s ({'real node' if real_node else 'KWOK'})"
    return Section(title, rows, "\n".join(details), seconds=seconds_taken, correct=correct)
