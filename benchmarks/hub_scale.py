"""hub-scale: one real JupyterHub with PaddleCloudSpawner at N users (issue 29), side by side
with the same hub running plain KubeSpawner, on a KWOK cluster of its own.

The hub is `python -m jupyterhub` with hub_config/jupyterhub_config.py (the product's
Kubernetes config, its proxy, quota service and idle culler), loaded by a small config
of the benchmark's (`bench_config`) that adds only what a benchmark needs: a service
token for the driver (admin of users and servers, quota admin) and where the hub reaches
the notebooks. KWOK pods run nothing, so the hub's HTTP check of each notebook is
answered by one small responder on 127.0.0.1 (`KubeSpawner.pod_connect_ip` and `port`
point there); everything else (namespaces, pods, claims, reflectors, restore on restart)
is the real spawner against the real API server. The plain run is the same config with
`spawner_class = KubeSpawner`, no notebook ServiceAccount and no dataset volumes (as in
the spawn section). Statically provisioned volumes are pre-bound to every claim.

Steps, with N users:
1. N spawns through the hub's REST API (`POST /hub/api/users/NAME/server`), at most the
   hub's `concurrent_spawn_limit` pending at once; spawn -> ready from the server's progress
   stream. Plain KubeSpawner first, then ours, each on a hub of its own.
2. steady state with N running servers for a fixed window: the hub's CPU (its process)
   and the API server's `apiserver_request_total` LISTs by resource and scope, before and
   after (every client's: the window is the same for both hubs, nothing else is started).
3. (ours) J running jobs of 8 workers on KWOK; the admin overview and the quota page's data
   (`/services/quota/api/overview`, `api/quotas`), p95 of R requests each.
4. a hub restart with N running servers (both hubs; plain's before its servers are
   stopped): time until the hub API answers, until every server is ready again in
   `/hub/api/users`, and the hub's RSS.
5. one user's `paddlecloud list` and `logs` (a 2-worker job of their own) before any hub
   user exists and again among the N users with their jobs: flat in the number of users;
   beside each, kubectl's `get jobs` and `logs` of the same job, runs interleaved (how much
   the cluster itself slows with N users, the same for any client).
The spawns' row also counts the API server's requests (every client's, by verb) during the
spawns of each hub: what each spawner costs the API server per spawn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psutil

from common import REPO, Row, Section, fmt_ratio, fmt_s, log, median, percentile, ratio, run_timed, wait_until

from paddle_ext.backends.kubernetes import KubernetesBackend
from paddle_ext.ports import free_ports
from paddle_ext.spec import JobSpec
from spawn import _create_volumes
from tools.k8s.cluster import cri_log_lines

PRODUCT_CONFIG = os.path.join(REPO, "hub_config", "jupyterhub_config.py")
BENCH_SERVICE = "hub-scale-bench"
BENCH_SCOPES = ["admin:users", "admin:servers", "list:users", "read:users", "read:servers",
                "custom:paddlecloud-quota:admin", "access:services!service=quota"]
PROFILE = "paddle-cpu"
JOB_WORKERS = 8
MODES = ("plain", "ours")
CPU_GOAL = 0.20  # of one core
RSS_GOAL_MIB = 1024
API_GOAL_S, RESTORE_GOAL_S, PAGE_GOAL_S = 10.0, 60.0, 1.0
SPAWN_GOAL = 0.10
CLI_FLAT = 1.2  # `list` / `logs` at N users within 20% of at 1 (fresh processes vary that much here)
PROBE_NS, PROBE_JOB, PROBE_WORKERS, PROBE_LINES = "hs-probe", "probe", 2, 1000
RETRY_429_S = 1.0  # p95 within 10% of plain KubeSpawner's


@dataclasses.dataclass(frozen=True)
class Size:
    users: int
    nodes: int
    jobs: int
    window: float  # seconds of steady state
    page_requests: int
    cli_runs: int


# ---------------------------------------------------------------- pure helpers


def bench_config(product: str, token: str, connect_port: int, plain: bool) -> str:
    """The benchmark's hub config file: the product's, plus the driver's service token and
    where notebooks answer; for `plain`, KubeSpawner itself with what only ours adds taken out."""
    lines = ["c = get_config()  # noqa: F821",
             f"load_subconfig({product!r})  # noqa: F821",
             f"c.JupyterHub.services = list(c.JupyterHub.services) + [{{'name': {BENCH_SERVICE!r}, "
             f"'api_token': {token!r}}}]",
             f"c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{{'name': {BENCH_SERVICE!r}, "
             f"'services': [{BENCH_SERVICE!r}], 'scopes': {BENCH_SCOPES!r}}}]",
             "c.KubeSpawner.pod_connect_ip = '127.0.0.1'",
             f"c.KubeSpawner.port = {connect_port}"]
    if plain:
        lines += ["c.JupyterHub.spawner_class = 'kubespawner.KubeSpawner'",
                  "c.KubeSpawner.service_account = None",
                  "c.KubeSpawner.volumes = [v for v in c.KubeSpawner.volumes if not v['name'].startswith('dataset-')]",
                  "c.KubeSpawner.volume_mounts = [m for m in c.KubeSpawner.volume_mounts "
                  "if not m['name'].startswith('dataset-')]"]
    return "\n".join(lines) + "\n"


METRIC_LINE = re.compile(r'^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$')


def request_counts(metrics: str) -> dict[tuple[str, str, str], float]:
    """(verb, resource[/subresource], scope) -> requests so far, from the API server's /metrics
    text (every client's, whatever the answer)."""
    counts: dict[tuple[str, str, str], float] = {}
    for line in metrics.splitlines():
        match = METRIC_LINE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        resource = "/".join(part for part in (labels.get("resource", ""), labels.get("subresource", "")) if part)
        key = (labels.get("verb", ""), resource, labels.get("scope", ""))
        counts[key] = counts.get(key, 0.0) + float(match.group(2))
    return counts


def list_counts(metrics: str) -> dict[tuple[str, str], float]:
    """(resource, scope) -> LIST requests so far, from the API server's /metrics text."""
    counts: dict[tuple[str, str], float] = {}
    for (verb, resource, scope), n in request_counts(metrics).items():
        if verb == "LIST" and "/" not in resource:
            counts[(resource, scope)] = counts.get((resource, scope), 0.0) + n
    return counts


# Requests that come with time, not with spawns: KWOK's node heartbeats (a node's status and its
# lease, for every node, all along) and the watches the clients hold open.
BACKGROUND_REQUESTS = ("leases", "nodes/status")


def spawn_requests(delta: dict[tuple[str, str, str], int]) -> dict[tuple[str, str], int]:
    """(verb, resource) -> requests of every client in `delta`, but the background's
    (BACKGROUND_REQUESTS, WATCH): what the spawns cost the API server."""
    out: dict[tuple[str, str], int] = {}
    for (verb, resource, _), n in delta.items():
        if verb != "WATCH" and resource not in BACKGROUND_REQUESTS:
            out[(verb, resource)] = out.get((verb, resource), 0) + n
    return out


def counts_delta(before: dict, after: dict) -> dict:
    return {k: int(after[k] - before.get(k, 0)) for k in after if after[k] - before.get(k, 0) > 0}


def cluster_lists(delta: dict[tuple[str, str], int]) -> int:
    return sum(n for (_, scope), n in delta.items() if scope == "cluster")


def describe_lists(delta: dict[tuple[str, str], int]) -> str:
    shown = sorted(((n, res, scope) for (res, scope), n in delta.items()), reverse=True)
    return ", ".join(f"{res} ({scope}) {n}" for n, res, scope in shown) or "none"


def describe_requests(requests: dict[tuple[str, str], int], spawns: int, seconds: float) -> str:
    """'N (n per spawn, r/s): VERB count, ...', largest first."""
    by_verb: dict[str, int] = {}
    for (verb, _), n in requests.items():
        by_verb[verb] = by_verb.get(verb, 0) + n
    total = sum(by_verb.values())
    verbs = ", ".join(f"{verb} {n:,}" for n, verb in sorted(((n, v) for v, n in by_verb.items()), reverse=True))
    return (f"{total:,} ({total / max(spawns, 1):.1f} per spawn, {total / seconds:.0f}/s)" if seconds > 0
            else f"{total:,}") + (f": {verbs}" if verbs else "")


def top_requests(requests: dict[tuple[str, str], int], count: int = 10) -> str:
    """The `count` most frequent 'VERB resource N', largest first."""
    ranked = sorted(((n, verb, resource) for (verb, resource), n in requests.items()), reverse=True)[:count]
    return ", ".join(f"{verb} {resource} {n:,}" for n, verb, resource in ranked) or "none"


def process_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1]) / 1024
    return found.get("VmRSS", 0.0), found.get("VmHWM", 0.0)


def sse_data(line: bytes) -> dict | None:
    text = line.decode(errors="replace").strip()
    if not text.startswith("data:"):
        return None
    try:
        return json.loads(text[5:])
    except ValueError:
        return None


# ---------------------------------------------------------------- the notebooks' answer


class Responder:
    """What answers the hub's HTTP check of a notebook: KWOK pods run nothing."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                body = b'{"version": "kwok"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            # One listener answers for every notebook (each real one has its own): with the
            # socketserver's default backlog of 5, a restarted hub's 1,000 checks at once overflow
            # it, and each dropped connection waits out TCP's retransmissions (1, 2, 4, ... 32 s),
            # so a run's "every server back" took 13 s or 115 s by chance, for both hubs alike.
            request_queue_size = 4096

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- the hub


class Hub:
    """One JupyterHub process (the product's config through `bench_config`) on 127.0.0.1."""

    def __init__(self, bench, mode: str, hub_ns: str, responder_port: int):
        self.bench, self.mode = bench, mode
        self.home = tempfile.mkdtemp(prefix=f"hub-{mode}-", dir=bench.state)
        self.token = secrets.token_hex(16)
        self.port, self.api_port, self.proxy_port, self.quota_port = free_ports(4)
        self.prefix = f"hs{mode[0]}"
        self.config = os.path.join(self.home, "bench_config.py")
        with open(self.config, "w") as f:
            f.write(bench_config(PRODUCT_CONFIG, self.token, responder_port, plain=mode == "plain"))
        self.env = {**bench.env, "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy", "PADDLECLOUD_ALLOWED_USERS": "admin",
                    "PADDLECLOUD_HUB_STATE_DIR": self.home, "PADDLECLOUD_HOME": self.home,
                    "PADDLECLOUD_HUB_IP": "127.0.0.1", "PADDLECLOUD_HUB_PORT": str(self.port),
                    "PADDLECLOUD_HUB_API_IP": "127.0.0.1", "PADDLECLOUD_HUB_API_PORT": str(self.api_port),
                    "PADDLECLOUD_HUB_CONNECT_URL": f"http://127.0.0.1:{self.api_port}",
                    "PADDLECLOUD_PROXY_API_PORT": str(self.proxy_port),
                    "PADDLECLOUD_QUOTA_SERVICE_PORT": str(self.quota_port),
                    "PADDLECLOUD_HUB_NAMESPACE": hub_ns,
                    "PADDLECLOUD_USER_NAMESPACE_TEMPLATE": self.prefix + "-{username}",
                    "PADDLECLOUD_HOME_STORAGE_CLASS": "home",
                    "PADDLECLOUD_DATASETS": json.dumps([] if mode == "plain" else [{
                        "name": "imagenet", "mount_path": "/datasets/imagenet", "sub_path": "imagenet",
                        "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}},
                        "claim": {"accessModes": ["ReadOnlyMany"], "storageClassName": "datasets",
                                  "resources": {"requests": {"storage": "1Gi"}}}}]),
                    "PADDLECLOUD_DEFAULT_QUOTA": json.dumps({"gpus": 2, "cpu": "40", "memory": "200Gi",
                                                             "pods": 20}),
                    "PATH": os.pathsep.join([os.path.join(REPO, "node_modules", ".bin"),
                                             os.path.dirname(sys.executable), bench.env.get("PATH", "")])}
        self.env.pop("JUPYTERHUB_API_TOKEN", None)
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"http://127.0.0.1:{self.api_port}/hub/api"

    def start(self) -> float:
        """Start the hub; the monotonic time it was started."""
        log_file = open(os.path.join(self.home, "hub.log"), "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", self.config], cwd=self.home,
                                     env=self.env, stdout=log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log_file.close()
        return t0

    def answers(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the {self.mode} hub exited ({self.proc and self.proc.returncode}):\n"
                               f"{self.log_tail()}")
        try:
            with urllib.request.urlopen(self.api, timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 120) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # the hub stops its proxy and services; servers are kept
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # The proxy and the services run in sessions of their own and do not always go with the
        # hub: whatever of this hub is left (its environment names it) is ended here.
        for proc in self.leftovers():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass

    def leftovers(self) -> list:
        """Live processes of this hub: its proxy (our PADDLECLOUD_HOME) and services (its API URL)."""
        found = []
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if env.get("PADDLECLOUD_HOME") == self.home or env.get("JUPYTERHUB_API_URL") == self.api:
                found.append(proc)
        return found

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(os.path.join(self.home, "hub.log"), errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return "(no log)"

    def call(self, method: str, path: str, body=None, base: str | None = None, timeout: float = 60):
        """(status, decoded JSON or None) of one request to the hub API (or `base`)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request((base or self.api) + path, data=data, method=method, headers={
            "Authorization": f"token {self.token}", "Content-Type": "application/json",
            "Accept": "application/jupyterhub-pagination+json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def ready_users(self) -> set[str]:
        """Every user whose default server the hub reports ready (all pages of /users?state=ready)."""
        names: set[str] = set()
        offset = 0
        while True:
            status, page = self.call("GET", f"/users?state=ready&offset={offset}&limit=200")
            if status != 200:
                raise RuntimeError(f"GET /hub/api/users: HTTP {status}")
            items = page["items"] if isinstance(page, dict) else page
            names |= {u["name"] for u in items if (u.get("servers") or {}).get("", {}).get("ready")}
            following = (page.get("_pagination") or {}).get("next") if isinstance(page, dict) else None
            if not following:
                return names
            offset = following["offset"]


# ---------------------------------------------------------------- spawns


async def spawn_all(hub: Hub, users: list[str], limit: int) -> list[dict]:
    """Every user's server through the REST API, at most `limit` pending at once; per user
    the seconds from the request to the progress stream's `ready` (None and an error if not)."""
    import aiohttp

    gate = asyncio.Semaphore(limit)
    headers = {"Authorization": f"token {hub.token}"}

    async def one(session, name: str) -> dict:
        async with gate:
            t0 = time.monotonic()
            retries = 0
            while True:
                async with session.post(f"{hub.api}/users/{name}/server", json={"profile": PROFILE}) as resp:
                    status, text = resp.status, await resp.text()
                if status == 429:  # the hub's own limit: a slot freed here is not yet free there
                    retries += 1  # (its Retry-After is 30-60 s, for browsers; a second is enough here)
                    await asyncio.sleep(RETRY_429_S)
                    continue
                break
            if status not in (201, 202):
                return {"user": name, "seconds": None, "error": f"HTTP {status}: {text[:200]}", "retries": retries}
            async with session.get(f"{hub.api}/users/{name}/server/progress",
                                   timeout=aiohttp.ClientTimeout(total=900)) as resp:
                if resp.status != 200:
                    return {"user": name, "seconds": None, "retries": retries,
                            "error": f"progress: HTTP {resp.status}: {(await resp.text())[:200]}"}
                async for line in resp.content:
                    event = sse_data(line)
                    if event and event.get("ready"):
                        return {"user": name, "seconds": time.monotonic() - t0, "error": None, "retries": retries}
                    if event and event.get("failed"):
                        return {"user": name, "seconds": None, "error": str(event.get("message"))[:200],
                                "retries": retries}
            return {"user": name, "seconds": None, "error": "the progress stream ended without ready",
                    "retries": retries}

    connector = aiohttp.TCPConnector(limit=limit * 2 + 10)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        return await asyncio.gather(*(one(session, name) for name in users))


def spawn_limit(hub: Hub) -> int:
    """The hub's concurrent_spawn_limit, as its config (or JupyterHub's default) sets it."""
    code = ("from traitlets.config.loader import PyFileConfigLoader\nimport os, sys\n"
            "from jupyterhub.app import JupyterHub\n"
            f"c = PyFileConfigLoader(os.path.basename({hub.config!r}), os.path.dirname({hub.config!r})).load_config()\n"
            "app = JupyterHub(config=c)\nprint(app.concurrent_spawn_limit)")
    done = subprocess.run([sys.executable, "-c", code], env=hub.env, cwd=hub.home, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"reading concurrent_spawn_limit failed: {done.stderr[-1000:]}")
    return int(done.stdout.strip().splitlines()[-1])


def notebook_pods(bench, prefix: str) -> dict[str, str]:
    """namespace -> uid of each Running notebook pod in the run's namespaces."""
    pods = bench.cluster.request("GET", "/api/v1/pods?labelSelector=component%3Dsingleuser-server")["items"]
    return {p["metadata"]["namespace"]: p["metadata"]["uid"] for p in pods
            if p["metadata"]["namespace"].startswith(prefix + "-") and (p.get("status") or {}).get("phase") == "Running"}


def stop_all(hub: Hub, users: list[str], limit: int) -> int:
    """Stop every server through the REST API and wait until the hub reports none and their
    pods are gone; the number of notebook pods the hub left behind (spawns it gave up on whose
    pod was made all the same), which are deleted here so the next hub starts on a clean cluster."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(limit, 32)) as pool:
        list(pool.map(lambda name: hub.call("DELETE", f"/users/{name}/server"), users))
    wait_until(lambda: not hub.ready_users(), 600, f"the {hub.mode} hub to report no server running", interval=2)
    selector = "/api/v1/pods?labelSelector=component%3Dsingleuser-server"
    left = [p["metadata"] for p in hub.bench.cluster.request("GET", selector)["items"]
            if p["metadata"]["namespace"].startswith(hub.prefix + "-") and not p["metadata"].get("deletionTimestamp")]
    for pod in left:
        hub.bench.cluster.request("DELETE", f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}")
    wait_until(lambda: not notebook_pods(hub.bench, hub.prefix), 600, f"the {hub.mode} hub's notebook pods to go",
               interval=2)
    return len(left)


# ---------------------------------------------------------------- steady state, pages, restart


def api_lists(bench) -> dict[tuple[str, str], float]:
    """The API server's LIST counts so far (every client's), by resource and scope."""
    counts = list_counts(bench.cluster.request("GET", "/metrics"))
    if not counts:  # the controllers list at start: none means the metrics were not read
        raise RuntimeError("the API server's /metrics has no apiserver_request_total LIST counts")
    return counts


def api_requests(bench) -> dict[tuple[str, str, str], float]:
    """The API server's request counts so far (every client's), by verb, resource and scope."""
    counts = request_counts(bench.cluster.request("GET", "/metrics"))
    if not counts:
        raise RuntimeError("the API server's /metrics has no apiserver_request_total counts")
    return counts


def steady_window(hub: Hub, seconds: float) -> dict:
    """The hub's CPU and the API server's LISTs over `seconds` with every server running."""
    before = api_lists(hub.bench)
    cpu0, t0 = process_cpu_seconds(hub.proc.pid), time.monotonic()
    time.sleep(seconds)  # the window measured: nothing to await, the hub is left alone
    cpu1, t1 = process_cpu_seconds(hub.proc.pid), time.monotonic()
    after = api_lists(hub.bench)
    delta = counts_delta(before, after)
    return {"cpu": (cpu1 - cpu0) / (t1 - t0), "seconds": t1 - t0, "lists": delta,
            "cluster_lists": cluster_lists(delta), "rss": process_rss_mib(hub.proc.pid)}


def submit_jobs(bench, hub: Hub, users: list[str], count: int) -> list[tuple[str, str]]:
    """`count` jobs of JOB_WORKERS workers, spread over the users, until every worker runs."""
    owners = [users[i % len(users)] for i in range(count)]
    jobs = [(user, f"scale-{i:03d}") for i, user in enumerate(owners)]
    work = tempfile.mkdtemp(prefix="hub-scale-code-", dir=bench.state)
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write("print('training')\n")

    async def submit_all():
        gate = asyncio.Semaphore(8)

        async def one(user, name):
            async with gate:
                backend = KubernetesBackend(kubeconfig=bench.cluster.kubeconfig, namespace=f"{hub.prefix}-{user}")
                try:
                    await backend.submit(JobSpec(name=name, command=["python", "train.py"], workers=JOB_WORKERS),
                                         workdir=work)
                finally:
                    await backend.close()
        await asyncio.gather(*(one(u, n) for u, n in jobs))

    asyncio.run(submit_all())

    def all_running():
        pods = bench.cluster.request("GET", "/api/v1/pods?labelSelector=paddlecloud.io%2Fjob")["items"]
        return sum(1 for p in pods if p["metadata"]["namespace"].startswith(hub.prefix + "-")
                   and (p.get("status") or {}).get("phase") == "Running") >= count * JOB_WORKERS
    wait_until(all_running, 900, f"{count} jobs' {count * JOB_WORKERS} workers to run", interval=2)
    return jobs


def time_pages(hub: Hub, requests_each: int, users: list[str], jobs: list[tuple[str, str]]) -> dict:
    """p50/p95 of the admin overview and the quota page's data; each answer checked."""
    base = f"{hub.url}/services/quota/"
    # The hub starts its managed services after its own API answers.
    wait_until(lambda: hub.call("GET", "api/quotas", base=base)[0] == 200, 120, "the quota service to answer")
    results = {}
    for label, path in (("overview", "api/overview"), ("quotas", "api/quotas")):
        hub.call("GET", path, base=base)  # warm
        walls, ok = [], True
        for _ in range(requests_each):
            t0 = time.monotonic()
            status, body = hub.call("GET", path, base=base)
            walls.append(time.monotonic() - t0)
            ok &= status == 200 and page_complete(label, body, users, jobs)
        results[label] = {"p50": percentile(walls, 50), "p95": percentile(walls, 95), "ok": ok,
                          "requests": requests_each}
    return results


def page_complete(label: str, body, users: list[str], jobs: list[tuple[str, str]]) -> bool:
    """The overview lists every running job with all its workers; the quotas every user."""
    if not isinstance(body, dict):
        return False
    text = json.dumps(body)
    if label == "overview":
        return all(f'"{name}"' in text for _, name in jobs) and all(f'"{user}"' in text for user, _ in jobs)
    return all(f'"{user}"' in text for user in users)


def restart(hub: Hub) -> dict:
    """Stop the hub as an upgrade would and start it again with every server running."""
    before = notebook_pods(hub.bench, hub.prefix)
    running = hub.ready_users()
    t_stop = time.monotonic()
    hub.stop()
    stopped = time.monotonic() - t_stop
    t0 = hub.start()
    wait_until(hub.answers, 600, "the restarted hub's API to answer", interval=0.2)
    api = time.monotonic() - t0
    wait_until(lambda: hub.ready_users() >= running, 900, "every server ready again after the restart",
               interval=0.5)
    restored = time.monotonic() - t0
    after = notebook_pods(hub.bench, hub.prefix)
    rss, peak = process_rss_mib(hub.proc.pid)
    return {"stop": stopped, "api": api, "restored": restored, "rss": rss, "peak": peak, "servers": len(running),
            "same_pods": before == after and len(after) == len(running)}


# ---------------------------------------------------------------- one user's CLI


def probe_job(bench) -> dict[str, list[str]]:
    """One user's 2-worker job whose pods' logs KWOK serves: each pod's expected lines."""
    from kwok import worker_lines

    bench.cluster.create("/api/v1/namespaces", {"metadata": {"name": PROBE_NS}})
    work = tempfile.mkdtemp(prefix="hub-scale-probe-", dir=bench.state)

    async def submit():
        backend = KubernetesBackend(kubeconfig=bench.cluster.kubeconfig, namespace=PROBE_NS)
        try:
            await backend.submit(JobSpec(name=PROBE_JOB, command=["python", "train.py"], workers=PROBE_WORKERS),
                                 workdir=work)
        finally:
            await backend.close()

    asyncio.run(submit())

    def running():
        pods = bench.cluster.request("GET", f"/api/v1/namespaces/{PROBE_NS}/pods")["items"]
        up = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return up if len(up) == PROBE_WORKERS else None
    pods = wait_until(running, 120, "the probe job's pods to run")
    expected = {}
    for pod in pods:
        index = int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        path = os.path.join(work, f"{pod['metadata']['name']}.log")
        with open(path, "w") as f:
            f.write(cri_log_lines(worker_lines(index, PROBE_LINES)))
        bench.cluster.set_pod_log(PROBE_NS, pod["metadata"]["name"], path)
        expected[f"worker-{index}"] = worker_lines(index, PROBE_LINES)
    return expected


def logs_by_worker(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\[(worker-\d+)\] ", line)
        found.setdefault(match.group(1) if match else "?", []).append(line[match.end():] if match else line)
    return found


def time_cli(bench, expected: dict[str, list[str]], runs: int) -> dict:
    """`paddlecloud list` and `logs` in the probe user's namespace, and beside each (runs
    interleaved) what kubectl reads for the same (`get jobs`, `logs` of the job's pods): median
    wall times, every output checked. kubectl's figures say how much the cluster itself slows."""
    list_cmd, logs_cmd = bench.our(PROBE_NS, "list"), bench.our(PROBE_NS, "logs", PROBE_JOB)
    kube_list = bench.kube(PROBE_NS, "get", "jobs")
    kube_logs = bench.kube(PROBE_NS, "logs", "-l", f"batch.kubernetes.io/job-name={PROBE_JOB}", "--tail=-1")
    # KWOK serves a pod's log once it has seen its Logs object: until then the lines are missing.
    wait_until(lambda: logs_by_worker(run_timed(logs_cmd, env=bench.env).stdout.decode()) == expected, 120,
               "KWOK to serve the probe job's logs", interval=1)
    every_line = sorted(line for lines in expected.values() for line in lines)

    def ours_ok(label: str, out: str) -> bool:
        if label == "list":
            return [row.split()[0] for row in out.splitlines()[1:]] == [PROBE_JOB]
        return logs_by_worker(out) == expected

    def kubectl_ok(label: str, out: str) -> bool:
        if label == "list":
            return [row.split()[0] for row in out.splitlines()[1:]] == [PROBE_JOB]
        return sorted(out.splitlines()) == every_line

    result = {}
    for label, ours_cmd, kube_cmd in (("list", list_cmd, kube_list), ("logs", logs_cmd, kube_logs)):
        ours, kube = [], []
        for _ in range(runs):
            ours.append(run_timed(ours_cmd, env=bench.env))
            kube.append(run_timed(kube_cmd, env=bench.env))
        result[label] = {"wall": median([r.wall for r in ours]),
                         "ok": all(r.code == 0 and ours_ok(label, r.stdout.decode()) for r in ours),
                         "kubectl": median([r.wall for r in kube]),
                         "kubectl_ok": all(r.code == 0 and kubectl_ok(label, r.stdout.decode()) for r in kube)}
    return result


# ---------------------------------------------------------------- the section


def hub_scale_section(bin_dir: str, kubectl: str, ours_cmd: list[str], size: Size, smoke: bool) -> Section:
    from kwok import KwokBench

    t_start = time.monotonic()
    users = [f"u{i:04d}" for i in range(size.users)]
    hub_ns = "hub-scale"
    runs: dict[str, dict] = {}
    # Jobs' pods run (KWOK) for as long as the section may take: the overview counts running jobs.
    with KwokBench(bin_dir, kubectl, ours_cmd, nodes=size.nodes, complete_after="120m") as bench, \
            Responder() as responder:
        bench.cluster.create("/api/v1/namespaces", {"metadata": {"name": hub_ns}})
        expected = probe_job(bench)
        log(f"hub-scale: one user's `paddlecloud list` and `logs`, no other user, {size.cli_runs} runs")
        cli_alone = time_cli(bench, expected, size.cli_runs)
        for mode in MODES:
            hub = Hub(bench, mode, hub_ns, responder.port)
            asyncio.run(_create_volumes(bench.cluster.kubeconfig, hub.prefix, users, datasets=mode == "ours"))
            limit = spawn_limit(hub)
            lists_before = api_lists(bench)
            hub.start()
            try:
                wait_until(hub.answers, 300, f"the {mode} hub to answer", interval=0.5)
                status, _ = hub.call("POST", "/users", {"usernames": users})
                if status != 201:
                    raise RuntimeError(f"creating {len(users)} users: HTTP {status}")
                log(f"hub-scale: {mode}: {len(users)} spawns through the REST API, at most {limit} at once")
                requests_before, t0 = api_requests(bench), time.monotonic()
                spawns = asyncio.run(spawn_all(hub, users, limit))
                run = {"limit": limit, "spawns": spawns, "wall": time.monotonic() - t0}
                ready = hub.ready_users()
                pods = notebook_pods(bench, hub.prefix)
                run["ready"], run["pods"] = len(ready & set(users)), len(pods)
                run["failures"] = [s for s in spawns if s["error"]]
                run["rss_after_spawns"] = process_rss_mib(hub.proc.pid)
                run["spawn_lists"] = counts_delta(lists_before, api_lists(bench))
                run["spawn_requests"] = spawn_requests(counts_delta(requests_before, api_requests(bench)))
                log(f"  {mode}: {run['ready']} ready, {len(run['failures'])} failed, p95 "
                    f"{fmt_s(percentile([s['seconds'] for s in spawns if s['seconds'] is not None], 95))}")
                log(f"hub-scale: {mode}: steady state, {size.window:.0f}s")
                run["steady"] = steady_window(hub, size.window)
                run["ready_after_window"] = len(hub.ready_users() & set(users))
                if mode == "ours":
                    log(f"hub-scale: {size.jobs} jobs of {JOB_WORKERS} workers")
                    jobs = submit_jobs(bench, hub, sorted(ready & set(users)), size.jobs)
                    run["pages"] = time_pages(hub, size.page_requests, users, jobs)
                    log(f"hub-scale: one user's `paddlecloud list` and `logs` among {len(users)} users")
                    run["cli"] = {"alone": cli_alone, "among": time_cli(bench, expected, size.cli_runs)}
                log(f"hub-scale: {mode}: restart with {len(ready & set(users))} running servers")
                run["restart"] = restart(hub)
                if mode != "ours":  # the plain hub's notebooks go, so ours starts on the same cluster as plain did
                    run["left_pods"] = stop_all(hub, users, limit)
            except Exception:
                log(f"the {mode} hub's log (end):\n{hub.log_tail()}")
                raise
            finally:
                hub.stop()
            runs[mode] = run
    return report(runs, size, len(users), smoke, time.monotonic() - t_start)


def report(runs: dict, size: Size, n: int, smoke: bool, seconds: float) -> Section:
    def p95(mode):
        return percentile([s["seconds"] for s in runs[mode]["spawns"] if s["seconds"] is not None], 95)

    def p50(mode):
        return percentile([s["seconds"] for s in runs[mode]["spawns"] if s["seconds"] is not None], 50)

    ours, plain = runs["ours"], runs["plain"]
    checks = {
        "every spawn of ours succeeded and is ready, one Running pod each":
            not ours["failures"] and ours["ready"] == n and ours["pods"] == n,
        # a failed spawn of plain KubeSpawner is its result (reported above), not the harness's
        "every spawn of plain KubeSpawner that did not fail is ready":
            plain["ready"] == n - len(plain["failures"]),
        "every server ready after the spawns still ready after the steady window (both)":
            ours["ready_after_window"] == ours["ready"] and plain["ready_after_window"] == plain["ready"],
        "after the restart, every server ready again on the same pods (both)":
            ours["restart"]["same_pods"] and plain["restart"]["same_pods"],
        "the overview lists every running job and the quota page every user":
            all(p["ok"] for p in ours["pages"].values()),
        "`paddlecloud list` showed the one job and `logs` every line of both workers, in order (both sizes)":
            all(r["ok"] for at in ours["cli"].values() for r in at.values()),
        "kubectl's `get jobs` showed the one job and its `logs` every line of both pods (both sizes)":
            all(r["kubectl_ok"] for at in ours["cli"].values() for r in at.values()),
    }
    correct = all(checks.values())
    q = ratio(p95("ours"), p95("plain"))
    rows = [Row(f"{n:,} spawns through the hub's REST API at its limit ({ours['limit']}): spawn → ready p95",
                f"{fmt_s(p95('ours'))}, {len(ours['failures'])} failed",
                f"{fmt_s(p95('plain'))}, {len(plain['failures'])} failed (plain KubeSpawner)",
                fmt_ratio(q), "0 failed, p95 ≤ +10%",
                bool(q and q <= 1 + SPAWN_GOAL and checks[next(iter(checks))]) if not smoke else None,
                "API requests during the spawns (every client's; node heartbeats and watches left out): ours "
                f"{describe_requests(ours['spawn_requests'], n, ours['wall'])} vs plain "
                f"{describe_requests(plain['spawn_requests'], n, plain['wall'])}")]
    r, rp = ours["restart"], plain["restart"]
    rows.append(Row(f"hub restart with {r['servers']:,} running servers (plain: {rp['servers']:,}): API answers / "
                    "all restored / RSS", f"{fmt_s(r['api'])} / {fmt_s(r['restored'])} / {r['rss']:.0f} MiB",
                    f"{fmt_s(rp['api'])} / {fmt_s(rp['restored'])} / {rp['rss']:.0f} MiB (plain KubeSpawner)",
                    fmt_ratio(ratio(r["api"], rp["api"])),
                    f"{API_GOAL_S:.0f} s / {RESTORE_GOAL_S:.0f} s / < {RSS_GOAL_MIB} MiB",
                    None if smoke else bool(r["api"] <= API_GOAL_S and r["restored"] <= RESTORE_GOAL_S
                                            and r["rss"] < RSS_GOAL_MIB and r["same_pods"])))
    pages = ours["pages"]
    rows.append(Row(f"admin overview / quota page, {n:,} users, {size.jobs} running jobs of {JOB_WORKERS} "
                    "workers: p95", f"{fmt_s(pages['overview']['p95'])} / {fmt_s(pages['quotas']['p95'])}", "—",
                    "—", "< 1 s", None if smoke else bool(
                        max(p["p95"] for p in pages.values()) < PAGE_GOAL_S and all(p["ok"] for p in pages.values()))))
    so, sp = ours["steady"], plain["steady"]
    rows.append(Row(f"steady state, {ours['ready']:,} running servers (plain: {plain['ready']:,}), "
                    f"{size.window:.0f} s: hub CPU / cluster-wide LISTs",
                    f"{so['cpu'] * 100:.1f}% / {so['cluster_lists']}",
                    f"{sp['cpu'] * 100:.1f}% / {sp['cluster_lists']} (plain KubeSpawner)", "—",
                    "< 20% of a core", None if smoke else so["cpu"] < CPU_GOAL,
                    f"cluster-wide LISTs from the hub's start through the {n:,} spawns: "
                    f"{cluster_lists(ours['spawn_lists'])} vs {cluster_lists(plain['spawn_lists'])}"))
    cli = ours["cli"]
    flat = {label: ratio(cli["among"][label]["wall"], cli["alone"][label]["wall"]) for label in ("list", "logs")}
    kube_flat = {label: ratio(cli["among"][label]["kubectl"], cli["alone"][label]["kubectl"])
                 for label in ("list", "logs")}
    rows.append(Row(f"one user's `paddlecloud list` / `logs` (2 × {PROBE_LINES:,} lines): among {n:,} users vs alone",
                    f"{fmt_s(cli['among']['list']['wall'])} / {fmt_s(cli['among']['logs']['wall'])}",
                    f"{fmt_s(cli['alone']['list']['wall'])} / {fmt_s(cli['alone']['logs']['wall'])} (alone)",
                    f"{fmt_ratio(flat['list'])} / {fmt_ratio(flat['logs'])}", f"flat (≤ {CLI_FLAT}×)",
                    None if smoke else all(q is not None and q <= CLI_FLAT for q in flat.values()),
                    "kubectl's own `get jobs` / `logs` of the same job, same runs: "
                    f"{fmt_s(cli['among']['list']['kubectl'])} / {fmt_s(cli['among']['logs']['kubectl'])} among vs "
                    f"{fmt_s(cli['alone']['list']['kubectl'])} / {fmt_s(cli['alone']['logs']['kubectl'])} alone "
                    f"({fmt_ratio(kube_flat['list'])} / {fmt_ratio(kube_flat['logs'])}): what the cluster itself "
                    "adds"))
    lines = [__doc__.split("\n\n", 1)[1].strip(), "",
             f"Size: {n:,} users on {size.nodes} KWOK nodes of 8 GPUs; {size.jobs} jobs of {JOB_WORKERS} workers; "
             f"steady window {size.window:.0f} s; {size.page_requests} requests per page.", "",
             "| | plain KubeSpawner | ours (PaddleCloudSpawner) |", "|---|---|---|"]

    def both(label, fn):
        lines.append(f"| {label} | {fn(plain)} | {fn(ours)} |")

    both("spawn limit (`concurrent_spawn_limit`)", lambda x: str(x["limit"]))
    both("spawns failed", lambda x: f"{len(x['failures'])}" + (f": {x['failures'][0]['error']}" if x["failures"]
                                                               else ""))
    both("spawn → ready p50 / p95", lambda x: f"{fmt_s(p50('ours' if x is ours else 'plain'))} / "
                                               f"{fmt_s(p95('ours' if x is ours else 'plain'))}")
    both("all spawns (wall)", lambda x: fmt_s(x["wall"]))
    both("answers 429 (the hub's limit) retried", lambda x: str(sum(s["retries"] for s in x["spawns"])))
    both("servers ready / notebook pods Running", lambda x: f"{x['ready']} / {x['pods']}")
    lines.append(f"| notebook pods left after every server was stopped (deleted by the benchmark) | "
                 f"{plain.get('left_pods', '—')} | not stopped (the restart runs next) |")
    both("hub RSS after the spawns (peak)", lambda x: f"{x['rss_after_spawns'][0]:.0f} MiB "
                                                      f"({x['rss_after_spawns'][1]:.0f} MiB)")
    both("the N spawns: API requests (every client's; node heartbeats and watches left out)",
         lambda x: describe_requests(x["spawn_requests"], n, x["wall"]))
    both("the N spawns: the most frequent requests", lambda x: top_requests(x["spawn_requests"]))
    both("hub start + N spawns: cluster-wide LISTs (every client)",
         lambda x: str(cluster_lists(x["spawn_lists"])))
    both("hub start + N spawns: all LISTs by resource (scope)", lambda x: describe_lists(x["spawn_lists"]))
    both("steady state: hub CPU", lambda x: f"{x['steady']['cpu'] * 100:.1f}% of a core over "
                                            f"{x['steady']['seconds']:.0f} s")
    both("steady state: cluster-wide LISTs (every client)", lambda x: str(x["steady"]["cluster_lists"]))
    both("steady state: all LISTs by resource (scope)", lambda x: describe_lists(x["steady"]["lists"]))
    both("restart: hub stopped / API answers / every server ready again in `/hub/api/users`",
         lambda x: " / ".join(fmt_s(x["restart"][key]) for key in ("stop", "api", "restored")))
    both("restart: RSS then (peak)", lambda x: f"{x['restart']['rss']:.0f} MiB ({x['restart']['peak']:.0f} MiB)")
    lines += ["", "The restart's times are from the new hub process's start; JupyterHub makes every running "
              "server's Spawner before its API listens.", "",
              "| page (ours) | p50 | p95 | requests | complete |", "|---|---:|---:|---:|:---:|"]
    for label, path in (("overview", "/services/quota/api/overview"), ("quotas", "/services/quota/api/quotas")):
        p = pages[label]
        lines.append(f"| `{path}` | {fmt_s(p['p50'])} | {fmt_s(p['p95'])} | {p['requests']} | "
                     f"{'yes' if p['ok'] else 'NO'} |")
    lines += ["", "Correctness checks:", ""] + [f"- {what}: {'yes' if ok else '**NO**'}" for what, ok in checks.items()]
    return Section(f"Hub at {n:,} users (KWOK)", rows, "\n".join(lines), seconds=seconds, correct=correct)
