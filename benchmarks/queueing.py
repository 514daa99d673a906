"""The `queue` section (issue 23): what Kueue costs a user, on the test control plane with
the real Kueue process (tools/k8s/kueue.py) and KWOK GPU nodes, no real node.

- start-up: `paddlecloud submit` of the same 1-GPU job until its first pod runs, in a user
  namespace whose LocalQueue `default` feeds a team ClusterQueue (the product's Kueue
  settings, `KubernetesBackend.queue_name`) vs a namespace Kueue does not manage (no Kueue
  settings: as on a site without Kueue); p95 of the runs, interleaved;
- admission: N suspended, queue-labelled jobs (the objects our submit makes) wait in a
  ClusterQueue held with `stopPolicy: Hold`; it is released and the Workloads Kueue admits
  per second are counted from a watch (and from their QuotaReserved condition times);
- reading the line: with the N jobs queued, `paddlecloud list` (every job Queued, with its
  position) and `paddlecloud status NAME` of the last in line vs `kubectl get workloads`.

The ClusterQueues are the hub's (paddle_ext.quota.queues from a quota entry), the
LocalQueues the spawner's (paddle_ext.tenancy.local_queue).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse

from common import Row, Section, fmt_ratio, fmt_s, interleave, log, median, percentile, ratio, run_timed, wait_until
from kwok import BoundWatch, KwokBench, ListWatch, response_body, table_size

from paddle_ext.backends.kubernetes_queue import evictions, holds, owner_workload
from paddle_ext.kubeapi import without_managed_fields
from paddle_ext.manifests import label_selector
from paddle_ext.constants import BACKEND_CONFIG_ENV, JOB_LABEL, KUEUE_QUEUE_LABEL, USER_LABEL
from paddle_ext.quota import queues
from paddle_ext.quota.model import Entry, Limits, QuotaConfig
from paddle_ext.spec import JobSpec
from paddle_ext.timestamps import parse_time
from paddle_ext import tenancy

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
QUEUED_NS, PLAIN_NS, BACKLOG_NS = "bench-queue", "bench-noqueue", "bench-backlog"
LATENCY_TEAM, BACKLOG_TEAM = "bench-latency", "bench-backlog"
LATENCY_GPUS = 16  # the latency queue's quota: every run's job fits at once
# The product's Kueue settings, as the hub passes them to the CLI and the notebook.
KUEUE_SETTINGS = json.dumps({"KubernetesBackend": {"queue_name": queues.LOCAL_QUEUE}})
GOAL_ADDED_S = 1.0  # Kueue adds at most 1 s to submit -> first pod running (p95)
GOAL_RATE = 10.0  # Workloads admitted per second from a backlog
GOAL_LOOKUP = 1.2  # list / status vs kubectl get workloads
WATCHED_PROCESSES = ("kueue", "kube-apiserver", "kube-controller-manager")  # their CPU during admission
POSITION = re.compile(r"\bposition (\d+)\b")


def pod_running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def admitted(workload: dict) -> bool:
    return holds(workload, "QuotaReserved") and holds(workload, "Admitted")


def team_cluster_queue(group: str, gpus: int, hold: bool = False) -> dict:
    """The ClusterQueue the hub writes for a team whose quota is `gpus` GPUs (CPU and memory
    far above what its jobs ask); `hold`: created stopped (stopPolicy Hold), so its jobs wait."""
    config = QuotaConfig(groups={group: Entry(Limits(gpus=gpus, cpu=str(64 * gpus), memory=f"{512 * gpus}Gi"))})
    cq = queues.cluster_queue(queues.team_queue(config, group))
    if hold:
        cq["spec"]["stopPolicy"] = "Hold"
    return cq


def condition_active(obj: dict) -> bool:
    return holds(obj, "Active")



def make_queues(bench: KwokBench, backlog_gpus: int) -> tuple[str, str]:
    """The namespaces, the flavor, both team ClusterQueues and the LocalQueues; returns the
    ClusterQueues' names (latency, backlog)."""
    c = bench.cluster
    c.create(f"{KUEUE_API}/resourceflavors", queues.resource_flavor())
    for ns, user in ((QUEUED_NS, "bench-queue"), (BACKLOG_NS, "bench-backlog"), (PLAIN_NS, None)):
        c.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {USER_LABEL: user} if user else {}}})
    latency = team_cluster_queue(LATENCY_TEAM, LATENCY_GPUS)
    backlog = team_cluster_queue(BACKLOG_TEAM, backlog_gpus, hold=True)
    for cq, ns in ((latency, QUEUED_NS), (backlog, BACKLOG_NS)):
        c.create(f"{KUEUE_API}/clusterqueues", cq)
        c.create(f"{KUEUE_API}/namespaces/{ns}/localqueues",
                 tenancy.local_queue(ns, queues.LOCAL_QUEUE, cq["metadata"]["name"]))
    name = latency["metadata"]["name"]
    wait_until(lambda: condition_active(c.request("GET", f"{KUEUE_API}/clusterqueues/{name}")), 120,
               "the latency ClusterQueue active")
    wait_until(lambda: condition_active(
        c.request("GET", f"{KUEUE_API}/namespaces/{QUEUED_NS}/localqueues/{queues.LOCAL_QUEUE}")), 120,
        "its LocalQueue active")
    return name, backlog["metadata"]["name"]


def workloads(bench: KwokBench, ns: str) -> list[dict]:
    return bench.cluster.request("GET", f"{KUEUE_API}/namespaces/{ns}/workloads")["items"]


def pending_count(bench: KwokBench, ns: str) -> int:
    """The Workloads waiting in the namespace's LocalQueue, as Kueue counts them."""
    queue = bench.cluster.request("GET", f"{KUEUE_API}/namespaces/{ns}/localqueues/{queues.LOCAL_QUEUE}")
    return (queue.get("status") or {}).get("pendingWorkloads") or 0


def delete_job(bench: KwokBench, ns: str, name: str) -> None:
    """The job and what our submit made with it; returns once its pods are gone."""
    c = bench.cluster
    for path in (f"/apis/batch/v1/namespaces/{ns}/jobs/{name}?propagationPolicy=Background",
                 f"/api/v1/namespaces/{ns}/services/{name}", f"/api/v1/namespaces/{ns}/configmaps/{name}-code"):
        try:
            c.request("DELETE", path)
        except Exception:  # noqa: BLE001 (already gone)
            pass
    selector = urllib.parse.quote(f"{JOB_LABEL}={name}")
    wait_until(lambda: not c.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"], 120,
               f"{name}'s pods gone")


# ---------------------------------------------------------------- submit -> first pod running


def latency_runs(bench: KwokBench, work: str, runs: int) -> dict:
    counter = iter(range(10_000))

    def run_one(queued: bool) -> dict:
        ns = QUEUED_NS if queued else PLAIN_NS
        name = f"{'q' if queued else 'p'}-{next(counter)}"
        env = dict(bench.env)
        env.pop(BACKEND_CONFIG_ENV, None)
        if queued:
            env[BACKEND_CONFIG_ENV] = KUEUE_SETTINGS
        cmd = bench.our(ns, "submit", "--name", name, "--gpus-per-worker", "1", "--", "python", "train.py")
        with BoundWatch(bench.cluster, ns, name, 1, reached=pod_running) as watch:
            t0 = time.monotonic()
            proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, timeout=300)
            returned = time.monotonic() - t0
            done = watch.wait(300)
        running = None if done is None else done - t0
        job = bench.cluster.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
        label = (job["metadata"].get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        workload = owner_workload(job, workloads(bench, ns))
        # Correct: it ran; with Kueue it went through the queue (label, an admitted Workload),
        # without, Kueue never saw it.
        ok = proc.returncode == 0 and running is not None and (
            label == queues.LOCAL_QUEUE and workload is not None and admitted(workload) if queued
            else label is None and workload is None)
        if not ok:
            log(f"  {name} not as expected: exit {proc.returncode} {proc.stderr.decode()[-300:]} running={running} "
                f"label={label} workload={(workload or {}).get('status')}")
        delete_job(bench, ns, name)
        return {"running": running, "returned": returned, "ok": ok}

    log(f"queue: submit -> first pod running, {runs} runs with Kueue and without, interleaved, after a warm-up")
    warm = {"kueue": run_one(True), "plain": run_one(False)}  # caches filled, as on a user's machine; not timed
    got = interleave(runs, {"kueue": lambda: run_one(True), "plain": lambda: run_one(False)})
    results = {}
    for side, entries in got.items():
        times = [r["running"] for r in entries if r["running"] is not None]
        results[side] = {"p95": percentile(times, 95), "p50": median(times), "all": [r["running"] for r in entries],
                         "returned": median([r["returned"] for r in entries]),
                         "ok": warm[side]["ok"] and all(r["ok"] for r in entries)}
        log(f"  {side}: p50 {fmt_s(results[side]['p50'])}, p95 {fmt_s(results[side]['p95'])}, "
            f"ok={results[side]['ok']}")
    return results


# ---------------------------------------------------------------- the backlog


def create_backlog(bench: KwokBench, count: int, concurrency: int = 16) -> list[str]:
    """`count` 1-GPU jobs in the backlog namespace, as our submit makes them with Kueue
    (suspended, labelled with the LocalQueue): the Indexed Job and its headless Service, made
    straight through the API (no code ConfigMap, no quota reads: the creation is not measured)."""
    backend = bench.backend(BACKLOG_NS, queue_name=queues.LOCAL_QUEUE)
    names = [f"queued-{i:04d}" for i in range(count)]

    async def make():
        gate = asyncio.Semaphore(concurrency)
        try:
            async def one(name):
                spec = backend.validate(JobSpec(name=name, command=["python", "train.py"], gpus_per_worker=1))
                settings = backend.settings(spec, "/home/jovyan")
                service, job = backend.kind.build(spec, settings, {"paddlecloud.io/spec": json.dumps(spec.to_dict())})
                async with gate:
                    job = await backend.api.create(f"/apis/batch/v1/namespaces/{BACKLOG_NS}/jobs", job)
                    service["metadata"]["ownerReferences"] = [{
                        "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"],
                        "controller": False, "blockOwnerDeletion": False}]
                    await backend.api.create(f"/api/v1/namespaces/{BACKLOG_NS}/services", service)
            await asyncio.gather(*(one(name) for name in names))
        finally:
            await backend.close()

    asyncio.run(make())
    return names


def list_positions(stdout: str) -> dict[str, tuple[str, int | None]]:
    """`paddlecloud list`'s table: name -> (phase, position in line or None)."""
    found = {}
    for row in stdout.splitlines()[1:]:
        cells = row.split()
        if len(cells) >= 2:
            match = POSITION.search(row)
            found[cells[0]] = (cells[1], int(match.group(1)) if match else None)
    return found


def lookup_runs(bench: KwokBench, names: list[str], runs: int) -> dict:
    env = {**bench.env, BACKEND_CONFIG_ENV: KUEUE_SETTINGS}
    ours_list = bench.our(BACKLOG_NS, "list")
    theirs = bench.kube(BACKLOG_NS, "get", "workloads")
    first = run_timed(ours_list, env=env)  # warm-up, and which job is last in line
    seen = list_positions(first.stdout.decode())
    last = max((name for name in names if (seen.get(name) or ("", None))[1] is not None),
               key=lambda n: seen[n][1], default=names[-1])
    ours_status = bench.our(BACKLOG_NS, "status", last)
    for cmd in (ours_status, theirs):
        run_timed(cmd, env=env)
    count = len(names)

    def check_list(run) -> bool:
        got = list_positions(run.stdout.decode())
        return run.code == 0 and sorted(got) == sorted(names) and all(phase == "Queued" for phase, _ in got.values()) \
            and sorted(p for _, p in got.values() if p is not None) == list(range(1, count + 1))

    def check_status(run) -> bool:
        out = run.stdout.decode()
        return run.code == 0 and "Phase:    Queued" in out and {int(p) for p in POSITION.findall(out)} == {count}

    def check_kubectl(run) -> bool:
        rows = run.stdout.decode().splitlines()[1:]
        return run.code == 0 and len(rows) == count

    log(f"queue: list and status with {count} queued jobs vs kubectl get workloads, {runs} runs each")
    got = interleave(runs, {"list": lambda: run_timed(ours_list, env=env),
                            "status": lambda: run_timed(ours_status, env=env),
                            "kubectl": lambda: run_timed(theirs, env=env)})
    checks = {"list": check_list, "status": check_status, "kubectl": check_kubectl}
    results = {}
    for tool, entries in got.items():
        results[tool] = {"wall": median([r.wall for r in entries]), "walls": [r.wall for r in entries],
                         "cpu": median([r.cpu for r in entries if r.cpu is not None]),
                         "ok": all(checks[tool](r) for r in entries),
                         "errors": [r.stderr.strip()[-300:] for r in entries if r.code != 0][:1]}
        log(f"  {tool}: median {fmt_s(results[tool]['wall'])} ok={results[tool]['ok']} {results[tool]['errors']}")
    results["last"] = last
    # What each side receives: ours the Jobs (JSON) and every namespace's Workloads (JSON; it
    # also reads the LocalQueues, ClusterQueues and events), kubectl a Table of the Workloads.
    c = bench.cluster
    selector = urllib.parse.quote(label_selector())
    # Ours decodes each list once its managedFields are cut out (`without_managed_fields`).
    jobs = response_body(c, f"/apis/batch/v1/namespaces/{BACKLOG_NS}/jobs?labelSelector={selector}")
    workloads = response_body(c, f"{KUEUE_API}/workloads")
    results["bytes"] = {
        "jobs": len(jobs), "jobs_decoded": len(without_managed_fields(jobs)),
        "workloads": len(workloads), "workloads_decoded": len(without_managed_fields(workloads)),
        "table": table_size(c, f"{KUEUE_API}/namespaces/{BACKLOG_NS}/workloads")}
    results["commands"] = {"list": ours_list, "status": ours_status, "kubectl": theirs}
    return results


# ---------------------------------------------------------------- admission from the backlog


class WorkloadWatch(ListWatch):
    """Watches a namespace's Workloads (one API watch) and stamps, on this machine's monotonic
    clock, when each is first seen admitted; counts Workloads seen admitted, then not."""

    def __init__(self, bench: KwokBench, ns: str, count: int):
        super().__init__(bench.cluster, f"{KUEUE_API}/namespaces/{ns}/workloads", "Workload", timeout=900)
        self.ns, self.count = ns, count
        self.admitted_at: dict[str, float] = {}
        self.readmitted: set[str] = set()
        self.lost: set[str] = set()

    def on_object(self, workload: dict) -> bool:
        uid = (workload.get("metadata") or {}).get("uid", "")
        if admitted(workload):
            if uid in self.lost:
                self.readmitted.add(uid)
            self.admitted_at.setdefault(uid, time.monotonic())
            return len(self.admitted_at) >= self.count
        if uid in self.admitted_at:
            self.lost.add(uid)
        return False


def cpu_seconds(pid: int) -> float | None:
    """user + system CPU seconds of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def admission_run(bench: KwokBench, backlog_cq: str, names: list[str]) -> dict:
    c = bench.cluster
    count = len(names)
    pids = {name: info["pid"] for name, info in c.pids.items() if name in WATCHED_PROCESSES}
    log(f"queue: releasing the ClusterQueue holding {count} jobs")
    timeout = max(300.0, count * 1.0)
    with WorkloadWatch(bench, BACKLOG_NS, count) as watch:
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        released = time.time()  # wall clock, as Kueue's condition times
        t0 = time.monotonic()
        c.request("PATCH", f"{KUEUE_API}/clusterqueues/{backlog_cq}", {"spec": {"stopPolicy": "None"}},
                  content_type="application/merge-patch+json")
        watch.finished.wait(timeout)
        seen = (max(watch.admitted_at.values()) - t0) if watch.admitted_at else None
        cpu_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cpu = {name: (cpu_after[name] - cpu_before[name]) if None not in (cpu_after[name], cpu_before[name]) else None
           for name in pids}
    items = workloads(bench, BACKLOG_NS)
    jobs = {job["metadata"]["name"]: job for job in
            c.request("GET", f"/apis/batch/v1/namespaces/{BACKLOG_NS}/jobs")["items"]}
    owned = [owner_workload(jobs[name], items) if name in jobs else None for name in names]
    stamps = sorted(watch.admitted_at.values())
    # Kueue's own record: when it set QuotaReserved and Admitted (whole seconds, cut down: the
    # last admission was before its second + 1, so the rate below is a lower bound).
    times = [condition_time(w) for w in owned if w is not None]
    last = max((t for t in times if t is not None), default=None)
    took = last + 1.0 - released if last is not None else None
    checks = {
        "one Workload per job": len(items) == count and all(w is not None for w in owned)
        and len({w["metadata"]["uid"] for w in owned if w}) == count,
        "every Workload admitted": all(w is not None and admitted(w) for w in owned),
        "each admitted once (never evicted or requeued)": not watch.lost and not watch.readmitted
        and all(w is not None and evictions(w) == 0 for w in owned),
        "every admission seen by the watch": len(watch.admitted_at) == count,
        "every Workload has its condition times": len(times) == count and None not in times,
    }
    decided = count / took if took else None
    rate = count / seen if seen else None
    log(f"  {count} admitted: the watch saw the last after {fmt_s(seen)} ({rate and f'{rate:.1f}'} jobs/s); by "
        f"Kueue's condition times within {fmt_s(took)} ({decided and f'{decided:.1f}'} jobs/s); checks {checks}; "
        f"CPU {cpu}")
    return {"took": took, "rate": rate, "decided": decided, "checks": checks, "cpu": cpu, "seen": seen,
            "first": stamps[0] - t0 if stamps else None,
            "half": stamps[len(stamps) // 2] - t0 if stamps else None}


def lookup_limit(lookup: dict, tool: str) -> str:
    """What our command did that kubectl did not, in figures of the same runs."""
    sizes = lookup["bytes"]

    def mib(kind: str) -> str:
        return f"{sizes[kind] / 2**20:.1f} MiB received, {sizes[kind + '_decoded'] / 2**20:.1f} MiB decoded"

    jobs = f"the Jobs ({mib('jobs')}) and " if tool == "list" else "its Job, its events and "
    return (f"CPU of the command itself {fmt_s(lookup[tool]['cpu'])} vs kubectl's {fmt_s(lookup['kubectl']['cpu'])}; "
            f"ours decodes {jobs}every namespace's Workloads ({mib('workloads')}) in Python and "
            f"orders the line, kubectl prints a Table the API server renders ({sizes['table'] / 2**20:.2f} MiB)")


def condition_time(workload: dict) -> float | None:
    """When Kueue admitted a Workload (the later of its QuotaReserved and Admitted conditions'
    times), as a Unix time; None if either is missing."""
    found = {cd.get("type"): cd.get("lastTransitionTime") for cd in (workload.get("status") or {}).get(
        "conditions") or () if cd.get("status") == "True"}
    try:
        return max(parse_time(found["QuotaReserved"]).timestamp(), parse_time(found["Admitted"]).timestamp())
    except (KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------- the section


def queue_section(bench: KwokBench, jobs: int, runs: int, list_runs: int) -> Section:
    t_start = time.monotonic()
    latency_cq, backlog_cq = make_queues(bench, jobs)
    work = tempfile.mkdtemp(prefix="bench-queue-", dir=bench.state)
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write("import paddle\nprint('training')\n")
    latency = latency_runs(bench, work, runs)

    log(f"queue: creating {jobs} queued jobs (ClusterQueue held)")
    t_made = time.monotonic()
    names = create_backlog(bench, jobs)
    wait_until(lambda: len(workloads(bench, BACKLOG_NS)) >= jobs, max(300.0, jobs * 1.0),
               f"Kueue to make the {jobs} Workloads", interval=2)
    made_in = time.monotonic() - t_made
    log(f"  {jobs} jobs and their Workloads made in {made_in:.0f}s")
    # Read once Kueue has them all in line (its LocalQueue counts every one pending), not while it
    # is still taking them in.
    wait_until(lambda: pending_count(bench, BACKLOG_NS) >= jobs, 300, f"Kueue to count the {jobs} jobs pending")
    lookup = lookup_runs(bench, names, list_runs)
    admission = admission_run(bench, backlog_cq, names)
    shutil.rmtree(work, ignore_errors=True)

    rows = []
    k, p = latency["kueue"], latency["plain"]
    added = None if k["p95"] is None or p["p95"] is None else k["p95"] - p["p95"]
    met = bool(added is not None and added <= GOAL_ADDED_S and k["ok"] and p["ok"])
    rows.append(Row("submit → first pod Running, p95, with Kueue vs without (KWOK + Kueue)",
                    fmt_s(k["p95"]), fmt_s(p["p95"]), f"{fmt_ratio(ratio(k['p95'], p['p95']))}, "
                    f"+{fmt_s(added)}" if added is not None and added >= 0 else fmt_ratio(ratio(k["p95"], p["p95"])),
                    f"Kueue adds ≤ {GOAL_ADDED_S:.0f} s", met,
                    "" if met else f"measured: Kueue adds {fmt_s(added)} at p95"))
    admission_ok = all(admission["checks"].values())
    met = bool(admission["rate"] and admission["rate"] >= GOAL_RATE and admission_ok)
    cpu = admission["cpu"]
    cpu_words = ", ".join(f"{name} {fmt_s(seconds)} CPU" for name, seconds in cpu.items() if seconds is not None)
    decided = admission["decided"]
    rows.append(Row(f"Kueue admits from a backlog of {jobs:,} jobs (KWOK + Kueue)",
                    "—" if admission["rate"] is None else
                    f"{admission['rate']:.1f} jobs/s as a watching client sees them (all {jobs:,} after "
                    f"{fmt_s(admission['seen'])}); Kueue's condition times: all within {fmt_s(admission['took'])}"
                    + (f", ≥ {decided:.0f} jobs/s" if decided else ""), "—", "—",
                    f"≥ {GOAL_RATE:.0f} jobs/s", met,
                    "" if met else f"measured: {admission['rate'] or 0:.1f} jobs/s seen ({cpu_words} meanwhile, "
                    f"on {os.cpu_count()} shared CPUs)"))
    for tool, label in (("list", f"`paddlecloud list` with {jobs:,} queued jobs (positions)"),
                        ("status", f"position lookup: `paddlecloud status` of the last of {jobs:,} queued")):
        q = ratio(lookup[tool]["wall"], lookup["kubectl"]["wall"])
        met = bool(q and q <= GOAL_LOOKUP and lookup[tool]["ok"] and lookup["kubectl"]["ok"])
        rows.append(Row(f"{label} vs `kubectl get workloads` (KWOK + Kueue)", fmt_s(lookup[tool]["wall"]),
                        fmt_s(lookup["kubectl"]["wall"]), fmt_ratio(q), f"≤ {GOAL_LOOKUP}×", met,
                        "" if met or q is None else f"measured: {fmt_ratio(q)}; {lookup_limit(lookup, tool)}"))

    correct = k["ok"] and p["ok"] and admission_ok and all(lookup[t]["ok"] for t in ("list", "status", "kubectl"))
    lines = [
        "The test control plane with the real Kueue process (tools/k8s/kueue.py: its controller manager, CRDs and "
        "webhooks) and KWOK GPU nodes; no real node. The queues are the hub's: a team ClusterQueue written by "
        "`paddle_ext.quota.queues` from a quota entry, and the spawner's LocalQueue `default` "
        "(`paddle_ext.tenancy.local_queue`) in a user namespace (label `paddlecloud.io/user`).", "",
        f"**Submit → first pod Running.** `paddlecloud submit` of a 1-GPU job, {runs} runs per side, interleaved "
        "after one warm-up run each (not counted); "
        "time from starting the command until a pod watch (opened before) sees its pod Running. With Kueue: the "
        f"user namespace `{QUEUED_NS}` (LocalQueue `default` → team `{LATENCY_TEAM}`, {LATENCY_GPUS} GPUs) and "
        f"the product's Kueue settings (`{BACKEND_CONFIG_ENV}={KUEUE_SETTINGS}`: the job is created suspended and "
        "labelled, Kueue's webhook and scheduler admit it, Kueue unsuspends it). Without: the namespace "
        f"`{PLAIN_NS}`, which Kueue does not manage (no user label), no Kueue settings, as on a site without "
        "Kueue. Each run's job is deleted (and its pods gone) before the next. **Correct**: every submit succeeded "
        "and its pod ran; with Kueue the Job carried the queue label and its Workload was admitted, without "
        "Kueue had no Workload for it.", "",
        "| side | p95 | p50 | all runs | command returned (median) | correct |", "|---|---:|---:|---|---:|:---:|"]
    for side, r in (("with Kueue", k), ("without", p)):
        lines.append(f"| {side} | {fmt_s(r['p95'])} | {fmt_s(r['p50'])} | {', '.join(fmt_s(v) for v in r['all'])} "
                     f"| {fmt_s(r['returned'])} | {'yes' if r['ok'] else 'NO'} |")
    lines += [
        "", f"**The backlog.** {jobs:,} 1-GPU jobs as our submit makes them with Kueue (suspended Indexed Job with "
        "the queue label, and its headless Service; made straight through the API, 16 at a time: their creation "
        f"is not measured) in the user namespace `{BACKLOG_NS}`, whose team ClusterQueue (`{BACKLOG_TEAM}`, "
        f"{jobs:,} GPUs) was created with `stopPolicy: Hold`; jobs and Workloads made in {made_in:.0f} s. The "
        f"reads below start once Kueue has them all in line (the LocalQueue's status counts {jobs:,} pending).", "",
        f"**Reading the line**, all {jobs:,} queued: fresh processes, {list_runs} runs each, interleaved after a "
        f"warm-up; median wall time. `paddlecloud status {lookup['last']}` reads the last job in line. "
        f"**Correct**: `list` showed all {jobs:,} jobs Queued with the positions 1..{jobs:,}, each once; `status` "
        f"said Queued at position {jobs:,}; kubectl printed {jobs:,} Workloads.", "",
        "| command | wall (median) | all runs | CPU (median) | correct |", "|---|---:|---|---:|:---:|"]
    for tool in ("list", "status", "kubectl"):
        r = lookup[tool]
        cmd = lookup["commands"][tool]
        shown = " ".join(["paddlecloud"] + cmd[len(bench.ours):]) if tool != "kubectl" else \
            " ".join(["kubectl"] + cmd[1:])
        lines.append(f"| `{shown}` | {fmt_s(r['wall'])} | {', '.join(fmt_s(w) for w in r['walls'])} | "
                     f"{fmt_s(r['cpu'])} | {'yes' if r['ok'] else 'NO ' + str(r['errors'])} |")
    lines += ["", f"CPU is the command's own user + system time (`/usr/bin/time -v`). {lookup_limit(lookup, 'list')}."]
    lines += [
        "", "**Admission.** The ClusterQueue's `stopPolicy` patched to `None`. The goal's rate = jobs / time from "
        "the patch to the last admission seen by a Workload watch opened before it, in this process (a Workload "
        "with QuotaReserved and Admitted true, written and delivered): first after "
        f"{fmt_s(admission['first'])}, half after {fmt_s(admission['half'])}, the last after "
        f"{fmt_s(admission['seen'])}. Kueue's own record, the later of each Workload's QuotaReserved and Admitted "
        "condition times, is when its scheduler decided (it writes the admission afterwards, through its "
        "rate-limited API client): all within " f"{fmt_s(admission['took'])} of the patch (whole seconds, so 1 s "
        "is added to the last: a bound). The gap between the two is the writes and the API server's watch "
        f"delivery on a loaded machine. CPU used meanwhile: {cpu_words or '—'}. Admitted jobs are unsuspended by Kueue and their pods made by the job "
        "controller and scheduled onto the KWOK nodes while the rest are admitted (most wait for GPUs: the nodes "
        "have fewer than the queue's quota), as on a cluster.", "",
        "| check | passed |", "|---|:---:|"]
    lines += [f"| {name} | {'yes' if ok else 'NO'} |" for name, ok in admission["checks"].items()]
    return Section("Kueue: start-up, admission, reading the line (KWOK + Kueue)", rows, "\n".join(lines),
                   seconds=time.monotonic() - t_start, correct=correct)


def queue_cluster_section(bin_dir: str, kubectl: str, ours: list[str], jobs: int, runs: int,
                          list_runs: int) -> Section:
    """The section on a KWOK cluster of its own with Kueue (its idle controller would otherwise
    run under every other KWOK section); where Kueue cannot run here, its rows say why."""
    from tools.k8s.kueue import unavailable_reason

    reason = unavailable_reason(bin_dir)
    if reason:
        row = Row("Kueue rows (KWOK + Kueue)", "—", "—", "—", "", None, f"did not run: {reason}")
        return Section("Kueue: start-up, admission, reading the line (KWOK + Kueue)", [row],
                       f"Not run: {reason}.")
    with KwokBench(bin_dir, kubectl, ours, nodes=2, kueue=True) as bench:
        return queue_section(bench, jobs, runs, list_runs)
