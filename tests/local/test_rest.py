"""The REST API against a real Jupyter server running real PaddlePaddle jobs."""

from __future__ import annotations

import json
import os
import time

import pytest
import requests

from paddle_ext.backends import local_files
from serverutil import JupyterServer


def submit(server, **spec):
    return server.submit(**spec)


def job_processes(home, name):
    """Every live process of a local job, by process group."""
    job_dir = os.path.join(home, "jobs", name)
    return [pid for pgid in local_files.worker_pids(job_dir).values() for pid in local_files.group_members(pgid)]


def test_two_worker_job_runs_a_real_all_reduce_and_succeeds(server):
    job = submit(server, command=["python", "train.py", "--epochs", "2"], workers=2)
    assert job["phase"] in ("Pending", "Running") and job["workers"] == 2
    lines, end = server.follow_to_end(job["name"])
    assert end["phase"] == "Succeeded"
    for rank in (0, 1):
        assert f"[worker-{rank}] rank {rank}: all_reduce check ok: sum=3 over 2 workers" in lines
        assert f"[worker-{rank}] rank {rank}: done" in lines
    final = server.api("GET", f"/jobs/{job['name']}").json()
    assert final["phase"] == "Succeeded" and final["finished"]
    assert [w["exit_code"] for w in final["worker_states"]] == [0, 0]
    listed = server.api("GET", "/jobs").json()["jobs"]
    assert job["name"] in [j["name"] for j in listed]

    plain = server.api("GET", f"/jobs/{job['name']}/logs", params={"worker": "1", "tail": "3"})
    assert plain.headers["Content-Type"].startswith("text/plain")
    assert len(plain.text.splitlines()) == 3 and "[worker-" not in plain.text


def test_follow_delivers_lines_while_the_job_runs(server):
    job = submit(server, command=["python", "ticker.py", "--count", "30", "--interval", "0.3"], workers=2)
    seen_while_running = 0
    for event, data in server.follow(job["name"], worker="0"):
        if event == "end":
            assert json.loads(data)["phase"] == "Succeeded"
            break
        if data.startswith("tick 0"):
            if server.api("GET", f"/jobs/{job['name']}").json()["phase"] == "Running":
                seen_while_running += 1
    assert seen_while_running >= 5, "log lines arrived only at the end"


def test_failing_worker_fails_the_job_and_stops_the_others(server):
    job = submit(server, command=["python", "fail_rank.py", "--rank", "1", "--code", "3"], workers=2)
    final = server.wait_for(job["name"], ("Failed",), timeout=90)
    assert final["reason"] == "WorkerFailed"
    assert "Worker 1 exited with code 3" in final["message"]
    states = {w["index"]: w for w in final["worker_states"]}
    assert states[1]["exit_code"] == 3
    assert states[0]["phase"] == "Cancelled" and "worker 1 failed" in states[0]["reason"]
    assert job_processes(server.home, job["name"]) == []


def test_cancel_leaves_no_process_behind(server):
    job = submit(server, command=["python", "ticker.py", "--count", "1000", "--interval", "0.2"], workers=2)
    name = job["name"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        log = server.api("GET", f"/jobs/{name}/logs").text
        if "tick 0 " in log and "tick 1 " in log:
            break
        time.sleep(0.3)
    pids = job_processes(server.home, name)
    assert len(pids) >= 4, pids  # per worker: supervisor, launcher, trainer
    response = server.api("DELETE", f"/jobs/{name}")
    assert response.status_code == 202
    final = server.wait_for(name, ("Cancelled",), timeout=30)
    assert final["reason"] == "Cancelled" and final["finished"]
    alive = [pid for pid in pids if local_files.process_alive(pid)]
    assert alive == [], f"processes left behind: {alive}"
    assert server.api("DELETE", f"/jobs/{name}").json()["phase"] == "Cancelled"  # idempotent


def test_server_restart_keeps_running_job_and_log_follow(tmp_path, workdir):
    first = JupyterServer(tmp_path, workdir).start()
    job = submit(first, command=["python", "ticker.py", "--count", "40", "--interval", "0.25"], workers=2)
    first.wait_for(job["name"], ("Running",))
    time.sleep(1.5)
    first.stop()
    second = JupyterServer(tmp_path, workdir).start()
    try:
        assert second.api("GET", f"/jobs/{job['name']}").json()["phase"] == "Running"
        lines, end = second.follow_to_end(job["name"])
        assert end["phase"] == "Succeeded"
        for rank in (0, 1):
            ticks = [line for line in lines if line.startswith(f"[worker-{rank}] tick {rank} ")]
            assert len(ticks) == 40, f"worker {rank}: {len(ticks)} ticks"
    finally:
        second.stop()


@pytest.mark.parametrize("spec, field", [
    ({"command": ["python", "t.py"], "workers": 0}, "workers"),
    ({"command": ["python", "t.py"], "gpus_per_worker": -1}, "gpus_per_worker"),
    ({"command": ["python", "t.py"], "shell": True}, "shell"),
    ({"command": ["python", "t.py"], "name": "MyJob"}, "name"),
    ({"command": ["python", "t.py"], "name": "a/b"}, "name"),
    ({"command": []}, "command"),
    ({"command": ["python", "t.py"], "workers": 99}, "workers"),
    ({"command": ["python", "t.py"], "datasets": ["nope"]}, "datasets"),
])
def test_bad_specs_get_400_naming_the_field(server, spec, field):
    response = server.api("POST", "/jobs", json=spec)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "bad_spec"
    assert field in body["fields"] and field in body["message"]


def test_body_that_is_not_json(server):
    response = server.api("POST", "/jobs", data="{not json")
    assert response.status_code == 400 and "not valid JSON" in response.json()["message"]


def test_unknown_job_404_and_taken_name_409(server):
    response = server.api("GET", "/jobs/no-such-job")
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert server.api("GET", "/jobs/no-such-job/logs").status_code == 404
    assert server.api("DELETE", "/jobs/no-such-job").status_code == 404
    spec = {"name": "taken-name", "command": ["python", "ticker.py", "--count", "1"]}
    assert server.api("POST", "/jobs", json=spec).status_code == 201
    response = server.api("POST", "/jobs", json=spec)
    assert response.status_code == 409 and response.json()["error"] == "name_taken"
    assert server.api("GET", "/jobs/taken-name/logs", params={"worker": "5"}).status_code == 400
    assert server.api("GET", "/jobs/taken-name/logs", params={"tail": "x"}).status_code == 400


@pytest.mark.parametrize("method, path", [
    ("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/x"), ("DELETE", "/jobs/x"),
    ("GET", "/jobs/x/logs"), ("GET", "/options"), ("GET", "/quota"),
])
def test_unauthenticated_requests_get_403(server, method, path):
    response = requests.request(method, server.url + "/paddle/api" + path, timeout=10,
                                json={"command": ["x"]} if method == "POST" else None)
    assert response.status_code == 403
    bad_token = requests.request(method, server.url + "/paddle/api" + path, timeout=10,
                                 headers={"Authorization": "token wrong"})
    assert bad_token.status_code == 403


def test_options_and_quota(server):
    options = server.api("GET", "/options").json()
    assert options["backend"] == "local"
    assert options["bounds"]["workers"]["min"] == 1 and options["defaults"]["workers"] >= 1
    quota = server.api("GET", "/quota").json()
    assert {"limits", "used"} <= set(quota) and "running_jobs" in quota["used"]


def test_metrics_endpoint_is_incremental_while_the_job_runs(server):
    job = submit(server, command=["python", "report_steps.py", "--steps", "12", "--interval", "0.5"], workers=2)
    name, cursor, seen, answers = job["name"], None, [], []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        response = server.api("GET", f"/jobs/{name}/metrics", params={"since": cursor} if cursor else {})
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"job", "phase", "done", "cursor", "names", "points"}
        seen += [(p["worker"], p["step"]) for p in page["points"]]
        answers.append((page["phase"], len(page["points"])))
        cursor = page["cursor"]
        if page["done"]:
            break
        time.sleep(0.5)
    assert sorted(seen) == [(w, s) for w in (0, 1) for s in range(12)], "each point exactly once"
    assert any(phase == "Running" and count for phase, count in answers), answers
    final = server.api("GET", f"/jobs/{name}/metrics").json()
    assert final["names"] == ["acc", "loss"] and len(final["points"]) == 24
    point = next(p for p in final["points"] if p["worker"] == 1 and p["step"] == 3)
    assert point["values"] == {"loss": 1.25, "acc": 0.25} and point["rank"] == 1 and point["source"] == "report"
    assert server.api("GET", f"/jobs/{name}/metrics", params={"since": cursor}).json()["points"] == []

    bad = server.api("GET", f"/jobs/{name}/metrics", params={"since": "7"})
    assert bad.status_code == 400 and "cursor from an earlier answer" in bad.json()["message"]
    assert server.api("GET", "/jobs/no-such-job/metrics").status_code == 404


def test_model_fit_progress_of_a_real_paddle_run_becomes_metrics(server):
    """paddle.Model.fit's own log lines, from the installed PaddlePaddle, read as points."""
    job = submit(server, command=["python", "fit_model.py"], workers=2)
    server.wait_for(job["name"], ("Succeeded",), timeout=180)
    page = server.api("GET", f"/jobs/{job['name']}/metrics").json()
    assert [(p["worker"], p["epoch"], p["step"]) for p in page["points"]] == [
        (0, 1, 2), (0, 1, 4), (0, 2, 6), (0, 2, 8)]
    assert page["names"] == ["acc", "loss", "step_time_ms"]
    assert all(p["source"] == "paddle" and 0 < p["values"]["loss"] < 5 for p in page["points"])

    mine = server.api("GET", f"/jobs/{job['name']}/logs", params={"mine": "1"}).text.splitlines()
    everything = server.api("GET", f"/jobs/{job['name']}/logs").text.splitlines()
    assert "[worker-0] user line: done" in mine and "[worker-1] user line: done" in mine
    assert not any("LAUNCH" in line or "FLAGS" in line for line in mine)
    assert len(everything) > len(mine) + 50 and any("LAUNCH INFO" in line for line in everything)
    assert server.api("GET", f"/jobs/{job['name']}").json()["progress"] == [
        {"index": i, "step": "Finished", "detail": "Succeeded", "node": "", "number": 3, "of": 3,
         "steps": ["Starting", "Running", "Finished"]} for i in (0, 1)]
