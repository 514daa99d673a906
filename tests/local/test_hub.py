"""The embedded default end to end: the real local JupyterHub (hub_config/local_config.py),
its proxy, a user's JupyterLab server, and a 2-worker PaddlePaddle job submitted and
followed through the proxy with the user's hub token."""

from __future__ import annotations

import time

import pytest
import requests

from hubutil import HubError, end_phase, sse_events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

USER = "alice"
JOB_SPEC = {"command": ["python", "train.py", "--epochs", "1"], "workers": 2}


def test_login_spawn_submit_and_follow_logs(hub):
    # A wrong password is refused, the demo password lets any name in.
    with pytest.raises(HubError, match="login as 'alice' failed"):
        hub.login(USER, password="not-the-password")
    session = hub.login(USER)
    token = hub.new_token(session, USER)
    assert hub.hub_api("GET", "/user", token).json()["admin"] is False

    # `admin` logs in with the same password and is a hub admin.
    admin_token = hub.new_token(hub.login("admin"), "admin")
    assert hub.hub_api("GET", "/user", admin_token).json()["admin"] is True
    # The hub's state is under PADDLECLOUD_HOME/hub, not in the working folder.
    assert (hub.home / "hub" / "jupyterhub.sqlite").is_file()
    assert (hub.home / "hub" / "jupyterhub_cookie_secret").is_file()
    hub.spawn(USER, token)

    home = hub.user_home(USER)
    assert (home / "quickstart.ipynb").is_file() and (home / "train.py").is_file(), \
        f"examples were not copied into {home}: {sorted(p.name for p in home.iterdir())}"

    api = f"{hub.url}/user/{USER}/paddle/api"
    anonymous = requests.get(api + "/jobs", allow_redirects=False, timeout=30)
    assert anonymous.status_code in (302, 401, 403), \
        f"unauthenticated request got HTTP {anonymous.status_code}: {anonymous.text[:200]}"
    if anonymous.status_code == 302:
        assert "/hub/" in anonymous.headers["Location"], anonymous.headers["Location"]

    headers = {"Authorization": f"token {token}"}
    created = requests.post(api + "/jobs", json=JOB_SPEC, headers=headers, timeout=60)
    assert created.status_code == 201, created.text
    name = created.json()["name"]

    lines, end = [], None
    deadline = time.monotonic() + 300
    with requests.get(f"{api}/jobs/{name}/logs", params={"follow": "1"}, headers=headers,
                      stream=True, timeout=(30, 60)) as stream:
        assert stream.status_code == 200, stream.text
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        for event, data in sse_events(stream):
            if event == "end":
                end = data
                break
            lines.append(data)
            assert time.monotonic() < deadline, "the job's log stream did not end in time"
    assert end is not None, "the log stream closed without an `event: end`"
    log = "\n".join(lines)
    assert end_phase(end) == "Succeeded", f"job ended {end}; log tail:\n{log[-3000:]}"
    for worker in (0, 1):
        assert any(line.startswith(f"[worker-{worker}] ") and "all_reduce check ok: sum=3" in line
                   for line in lines), f"no all_reduce line from worker {worker} in:\n{log[-3000:]}"

    # The job is the user's own: it lives in their PADDLECLOUD_HOME, not the hub's.
    assert (home / ".paddlecloud" / "jobs" / name).is_dir()
    listed = requests.get(api + "/jobs", headers=headers, timeout=30).json()["jobs"]
    assert [job["name"] for job in listed] == [name]

    # Secrets stay out of jobs and out of every log: the hub's (at debug level), the
    # server's, and the jobs' own.
    probe = requests.post(api + "/jobs", headers=headers, timeout=60, json={"command": [
        "python", "-c", "import os; print('TOKENS', sorted(k for k in os.environ if 'TOKEN' in k))"]})
    assert probe.status_code == 201, probe.text
    probe_lines, _ = follow(api, probe.json()["name"], headers)
    assert "TOKENS []" in probe_lines, probe_lines[-20:]
    server_tokens = {proc.environ().get("JUPYTERHUB_API_TOKEN") for proc in hub.processes()
                     if proc.environ().get("JUPYTERHUB_USER") == USER} - {None}
    assert server_tokens, "found no single-user server to take its token from"
    secrets = {token, admin_token, hub.password, *server_tokens,
               (hub.home / "hub" / "jupyterhub_cookie_secret").read_text().strip()}
    logs = [hub.log_path, *hub.home.rglob("*.log")]
    assert len(logs) > 3  # the hub's, and the jobs' (one per worker)
    for path in logs:
        text = path.read_text(errors="replace")
        assert not [s for s in secrets if s and s in text], f"a secret appears in {path}"


def follow(api, name, headers):
    lines, end = [], None
    with requests.get(f"{api}/jobs/{name}/logs", params={"follow": "1"}, headers=headers, stream=True,
                      timeout=(30, 120)) as stream:
        for event, data in sse_events(stream):
            if event == "end":
                end = data
                break
            lines.append(data)
    return lines, end
