"""Hostile input against a real Jupyter server and the real local backend: every request
is answered 2xx or 4xx (never 5xx), a refused submit leaves nothing behind, what JobSpec
accepts really starts (the process gets its arguments and environment exactly), and a
job whose workers cannot start ends Failed with the reason instead of Pending forever.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specgen
from serverutil import wait_for_async
from paddle_ext.backends.local import LocalBackend
from paddle_ext.client import JobClient
from paddle_ext.errors import BackendUnavailable, SpecError
from paddle_ext.spec import RESERVED_ENV, JobSpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Request bodies a careless or hostile client sends, as bytes on the wire.
BAD_BODIES = [
    b"", b"null", b"[]", b'"x"', b"{", b"\xff\xfe{", b'{"command": ["x"]}\x00',
    b'{"command": ["x"], "workers": ' + b"9" * 5000 + b"}",
    b'{"command": ["x"], "workers": 1e400}', b'{"command": ["x"], "workers": NaN}',
    b'{"command": ["x"], "workers": Infinity}', b'{"command": ["x"], "cpu": -1}',
    b'{"command": ["x"], "name": "a\\nb"}', b'{"command": ["python", "a\\u0000b"]}',
    b'{"command": ["python", "\\ud800"]}', b'{"command": ["python"], "env": {"A": "\\udcff"}}',
    b'{"command": {"0": "python"}}', b'{"command": ["python"], "env": []}',
    b'{"command": ["python"], "env": {"": "x"}}', b'{"command": ["python"], "datasets": "mnist"}',
    b'{"command": ["python"], "max_runtime_seconds": -1}', b'{"command": ["python"], "max_runtime_seconds": 1.5}',
    b'{"command": ["python"], "gpus_per_worker": 1}', b'{"command": ["python"], "image": "\\u0000"}',
    b'{"command": ["python"], "__proto__": {}}',
]
# Job names in URLs: none names a job, none may be a 5xx.
BAD_NAMES = ["%00", "..", "%2E%2E", "a%2Fb", "a" * 300, "%C3%BC", "a%0A", "%FF", "-a", "A", "job%20x",
             "%E2%80%AE", "x" * 51, "%25", "con", "a.b"]
JOB_PATHS = ["/jobs/{}", "/jobs/{}/logs", "/jobs/{}/code"]


def listed(server) -> set[str]:
    return {job["name"] for job in server.api("GET", "/jobs").json()["jobs"]}


def test_bad_bodies_are_400_and_create_nothing(server):
    before = listed(server)
    for body in BAD_BODIES:
        response = server.api("POST", "/jobs", data=body,
                              headers={**server.headers, "Content-Type": "application/json"})
        assert response.status_code == 400, (body[:60], response.status_code, response.text[:300])
        error = response.json()
        assert error["error"] == "bad_spec" and error["message"].endswith(".") and error["fields"], error
    assert listed(server) == before, "a refused submit left a job behind"


@pytest.mark.parametrize("fields, field, words", specgen.HOSTILE_SPECS)
def test_specs_the_os_or_kubernetes_would_refuse_are_400_naming_the_field(server, fields, field, words):
    before = listed(server)
    response = server.api("POST", "/jobs", json={"command": ["python", "train.py"], **fields})
    assert response.status_code == 400, response.text[:300]
    assert words in response.json()["fields"][field]
    assert listed(server) == before


def test_names_in_urls_that_name_no_job_are_404(server):
    for name in BAD_NAMES:
        for path in JOB_PATHS:
            for method in ("GET", "DELETE") if path == "/jobs/{}" else ("GET",):
                url = server.url + "/paddle/api" + path.format(name)  # sent as written, %-escapes and all
                response = requests.request(method, url, headers=server.headers, timeout=30)
                expected = 400 if name == "%FF" else 404  # not UTF-8: tornado refuses it before any handler
                assert response.status_code == expected, (method, url, response.status_code, response.text[:200])
                assert response.headers["Content-Type"].startswith("application/json"), response.text[:200]
                assert response.json()["message"].endswith(".")


@pytest.mark.parametrize("params", [
    {"worker": "-1"}, {"worker": "x"}, {"worker": "9" * 30}, {"worker": "1e3"}, {"worker": "５"}, {"worker": "0x1"},
    {"tail": "-5"}, {"tail": "9" * 5000}, {"tail": "1.5"}, {"worker": "7"}, {"follow": "\x00"},
    {"worker": ""}, {"tail": ""},  # the schema says integer: an empty value is not "absent"
])
def test_worker_and_tail_parameters_are_400_never_5xx(server, params):
    name = "param-check"
    if name not in listed(server):
        server.submit(name=name, command=["python", "-c", "print('hi')"])
    response = server.api("GET", f"/jobs/{name}/logs", params=params)
    if params == {"follow": "\x00"}:  # tornado drops control characters: an ordinary read of the log
        assert response.status_code == 200
        return
    assert response.status_code == 400, response.text[:200]
    assert response.json()["error"] == "bad_request"


@pytest.mark.parametrize("folder", ["\x00", "../..", "/etc", "no/such/folder", "a" * 5000, "ü/../../.."])
def test_a_workdir_outside_the_root_or_missing_is_400(server, folder):
    before = listed(server)
    response = server.api("POST", "/jobs", params={"workdir": folder}, json={"command": ["python", "-c", "1"]})
    if folder == "\x00":  # tornado turns control characters into spaces: the root itself
        assert response.status_code == 201
        server.api("DELETE", f"/jobs/{response.json()['name']}")
        return
    assert response.status_code == 400, response.text[:200]
    assert listed(server) == before


# ------------------------------------------------------------------ what is accepted starts, exactly

ECHO = ("import json, os, sys; print('ECHO ' + json.dumps({'argv': sys.argv[1:], 'env': "
        "{k: os.environ.get(k) for k in json.loads(os.environ['ECHO_KEYS'])}}))")
# Variables that decide how Python or the loader start: a user may set them, at their own risk.
RISKY_ENV = ("PATH", "HOME", "LD_", "PYTHON", "ECHO_KEYS")
safe_env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z").filter(
    lambda name: name not in RESERVED_ENV and not name.upper().startswith(RISKY_ENV))


def echo_spec(args: list[str], env: dict[str, str]) -> JobSpec | None:
    try:
        return JobSpec(command=["python", "-c", ECHO, *args], env={**env, "ECHO_KEYS": json.dumps(sorted(env))})
    except SpecError:
        return None


echo_specs = st.builds(echo_spec, st.lists(specgen.hostile_text, max_size=6),
                       st.dictionaries(safe_env_names, specgen.hostile_text, max_size=4)).filter(bool)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(echo_specs, min_size=4, max_size=4))
def test_what_jobspec_accepts_the_local_backend_starts_with_exact_args_and_env(tmp_path_factory, specs):
    home = tmp_path_factory.mktemp("echo")
    client = JobClient(LocalBackend(home=str(home), working_dir=str(home)))
    jobs = [client.submit(spec) for spec in specs]  # all at once: four real Paddle launches
    try:
        for spec, job in zip(specs, jobs):
            final = client.wait(job.name, timeout=180, poll=0.5)
            log = list(client.logs(job.name))
            assert final.phase == "Succeeded", (final.message, log[-20:])
            (echoed,) = [json.loads(line[len("ECHO "):]) for line in log if line.startswith("ECHO ")]
            assert echoed["argv"] == list(spec.command[3:])
            assert echoed["env"] == {k: v for k, v in spec.env.items() if k != "ECHO_KEYS"}
    finally:
        for job in jobs:
            client.cancel(job.name)
        client.close()


# ------------------------------------------------------------------ workers that cannot start

async def test_a_supervisor_that_never_comes_up_fails_the_job_naming_the_worker(tmp_path):
    """`/bin/true` as the interpreter: each supervisor 'starts' and is gone before recording a pid."""
    backend = LocalBackend(home=str(tmp_path), working_dir=str(tmp_path), python="/bin/true",
                           start_timeout_seconds=2.0)
    job = await backend.submit(JobSpec(name="ghost", command=["python", "-c", "1"], workers=2))
    assert (job.phase, job.reason) == ("Failed", "WorkerFailed")
    assert job.message.startswith("Worker 0 did not start within 2 seconds.")
    assert [w.reason for w in job.worker_states] == ["did not start", "never started"]
    assert await backend.running_usage() == []  # the quota does not count it
    assert (await backend.quota()).used["running_jobs"] == 0


async def test_a_launcher_that_cannot_be_started_is_a_503_that_leaves_nothing(tmp_path):
    backend = LocalBackend(home=str(tmp_path), working_dir=str(tmp_path), python=str(tmp_path / "no-python"))
    with pytest.raises(BackendUnavailable) as info:
        await backend.submit(JobSpec(name="nothing", command=["python", "-c", "1"]))
    assert info.value.status == 503 and "Cannot start worker 0 of job nothing" in info.value.message
    assert await backend.list() == []
    assert not [p for p in os.listdir(tmp_path / "jobs") if not p.startswith(".submit")]


async def test_a_worker_whose_exec_fails_ends_failed_with_the_os_reason(tmp_path):
    """The job's folder disappears between the submit's checks and the worker's exec (here:
    right before the supervisors start): the supervisor records why, the job ends Failed."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    backend = LocalBackend(home=str(tmp_path / "state"), python=sys.executable)
    original = backend._start_workers

    async def remove_folder_first(spec, job_dir):
        shutil.rmtree(workdir)  # the job's outputs folder is in it by now
        await original(spec, job_dir)

    backend._start_workers = remove_folder_first
    await backend.submit(JobSpec(name="gone", command=["python", "-c", "1"]), workdir=str(workdir))
    async def ended():
        job = await backend.get("gone")
        return job if job.done else None
    final = await wait_for_async(ended, timeout=60, what="the job whose worker could not start to end")
    assert (final.phase, final.reason) == ("Failed", "WorkerFailed")
    assert final.message.startswith("Worker 0 could not start: ") and "No such file or directory" in final.message
