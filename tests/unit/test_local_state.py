"""The local backend's pure state logic: worker and job phases from files' contents."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import paddle_ext
from paddle_ext.options import JobOptions
from paddle_ext.backends.local import LogReader, job_phase, worker_state
from paddle_ext.errors import SpecError
from paddle_ext.spec import JobSpec


def exit_info(code):
    return {"exit_code": code, "finished": "2026-01-01T00:00:00Z"}


def test_all_workers_succeeded():
    workers = [worker_state(i, exit_info(0), False, True, {}) for i in range(2)]
    assert job_phase(workers, {}, None)[:2] == ("Succeeded", "Completed")


def test_failure_names_worker_and_code_and_stopped_peers():
    marks = {"failed": {"worker": 1, "exit_code": 3, "at": "t"}}
    workers = [worker_state(0, exit_info(-15), False, True, marks), worker_state(1, exit_info(3), False, True, marks)]
    assert workers[0].phase == "Cancelled" and "worker 1 failed" in workers[0].reason
    phase, reason, message = job_phase(workers, marks, None)
    assert (phase, reason) == ("Failed", "WorkerFailed")
    assert "Worker 1 exited with code 3" in message and "other workers were stopped" in message


def test_failed_job_stays_running_until_every_worker_stopped():
    marks = {"failed": {"worker": 1, "exit_code": 3, "at": "t"}}
    workers = [worker_state(0, None, True, True, marks), worker_state(1, exit_info(3), False, True, marks)]
    assert job_phase(workers, marks, None)[0] == "Running"


def test_cancelled_and_deadline():
    marks = {"cancelled": {"at": "t"}}
    workers = [worker_state(0, exit_info(-15), False, True, marks)]
    assert job_phase(workers, marks, None)[:2] == ("Cancelled", "Cancelled")
    marks = {"deadline": {"at": "t"}}
    workers = [worker_state(0, exit_info(-15), False, True, marks)]
    phase, reason, message = job_phase(workers, marks, 60)
    assert (phase, reason) == ("Failed", "DeadlineExceeded") and "60 seconds" in message


def test_a_worker_that_vanished_without_exit_code_fails_the_job():
    workers = [worker_state(0, None, False, True, {}), worker_state(1, None, True, True, {})]
    phase, reason, message = job_phase(workers, {}, None)
    assert (phase, reason) == ("Failed", "WorkerLost") and "Worker 0" in message


def test_pending_then_running():
    assert job_phase([worker_state(0, None, False, False, {})], {}, None)[0] == "Pending"
    assert job_phase([worker_state(0, None, True, True, {})], {}, None)[0] == "Running"


def test_options_bounds_images_and_datasets():
    options = JobOptions.build("local", images=[{"name": "paddle:cpu"}], datasets=[{"name": "mnist"}],
                               max_workers=4, max_gpus_per_worker=0, max_cpu="2", max_memory="4Gi")
    options.check(JobSpec(command=["x"], workers=4, datasets=["mnist"], image="paddle:cpu"))
    with pytest.raises(SpecError) as info:
        options.check(JobSpec(command=["x"], workers=5, gpus_per_worker=1, cpu="3", memory="8Gi",
                              image="other", datasets=["imagenet"]))
    assert set(info.value.problems) == {"workers", "gpus_per_worker", "cpu", "memory", "image", "datasets"}
    assert "imagenet" in info.value.problems["datasets"] and "mnist" in info.value.problems["datasets"]


def test_log_reader_keeps_partial_lines(tmp_path):
    path = tmp_path / "w.log"
    path.write_bytes(b"one\ntw")
    reader = LogReader(str(path))
    assert reader.new_lines(final=False) == ["one"]
    with open(path, "ab") as f:
        f.write(b"o\nthree")
    assert reader.new_lines(final=False) == ["two"]
    assert reader.new_lines(final=True) == ["three"]
    assert LogReader(str(path)).initial_lines(tail=2, final=True) == ["two", "three"]
    assert LogReader(str(path)).initial_lines(tail=0, final=True) == []


def test_a_worker_still_stopping_keeps_the_job_running():
    marks = {"failed": {"worker": 1, "exit_code": 3, "at": "t"}}
    workers = [worker_state(0, exit_info(-15), True, True, marks), worker_state(1, exit_info(3), False, True, marks)]
    assert workers[0].phase == "Running"
    assert job_phase(workers, marks, None)[0] == "Running"


def test_options_serialise_the_launchers_form_with_the_spec_defaults():
    options = JobOptions.build("kubernetes", images=[{"name": "paddle:gpu", "description": "GPU"}],
                               datasets=[{"name": "mnist", "mount_path": "/d/mnist", "volume": {"pvc": 1}}],
                               max_workers=4, default_command=("python", "train.py"))
    assert options.to_dict() == {
        "backend": "kubernetes",
        "images": [{"name": "paddle:gpu", "description": "GPU"}],
        "datasets": [{"name": "mnist", "description": "", "mount_path": "/d/mnist"}],
        "bounds": {"workers": {"min": 1, "max": 4}, "gpus_per_worker": {"min": 0, "max": 8},
                   "cpu": {"max": "16"}, "memory": {"max": "64Gi"}, "max_restarts": {"min": 0, "max": 10}},
        "defaults": {"workers": 1, "gpus_per_worker": 0, "cpu": "1", "memory": "2Gi", "image": "paddle:gpu",
                     "command": ["python", "train.py"], "max_restarts": 0},
        "outputs_note": "",
        "job_image": "",
    }
    spec = JobSpec(command=["x"])
    assert (spec.workers, spec.cpu, spec.memory) == (1, "1", "2Gi")  # the same defaults


def test_a_worker_that_never_came_up_fails_the_job_with_the_reason_not_pending():
    marks = {"failed": {"worker": 1, "exit_code": None, "at": "t",
                        "message": "Worker 1 did not start within 30 seconds."}}
    workers = [worker_state(0, None, False, True, marks), worker_state(1, None, False, False, marks)]
    assert (workers[0].phase, workers[0].reason) == ("Cancelled", "stopped because worker 1 failed")
    assert (workers[1].phase, workers[1].reason) == ("Failed", "did not start")
    phase, reason, message = job_phase(workers, marks, None)
    assert (phase, reason) == ("Failed", "WorkerFailed")
    assert message.startswith("Worker 1 did not start within 30 seconds.")


def test_a_worker_that_could_not_exec_fails_the_job_with_the_os_error():
    marks = {"failed": {"worker": 0, "exit_code": 127, "at": "t",
                        "message": "Worker 0 could not start: [Errno 7] Argument list too long."}}
    workers = [worker_state(0, exit_info(127), False, True, marks), worker_state(1, None, False, False, marks)]
    assert workers[1].phase == "Cancelled"
    phase, reason, message = job_phase(workers, marks, None)
    assert (phase, reason) == ("Failed", "WorkerFailed") and "Argument list too long" in message


def test_the_supervisor_starts_with_the_standard_library_only():
    """Every local worker waits for its supervisor to start: asyncio, traitlets and the
    backends' other modules (about 0.2 s) must stay out of it."""
    package = Path(paddle_ext.__file__).resolve().parent
    code = ("import sys; import paddle_ext.backends.local_supervisor; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'traitlets', 'yaml') "
            "or m.startswith('paddle_ext.backends.') and m.split('.')[2] not in ('local_supervisor', 'local_files')))")
    # -S: no site-packages at all, only the standard library and the package itself
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(package.parent), "PATH": os.environ.get("PATH", "")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_backends_package_still_offers_its_names():
    from paddle_ext import backends
    from paddle_ext.backends.base import JobBackend
    from paddle_ext.backends.registry import backend_names, default_backend_name, make_backend

    assert (backends.JobBackend, backends.make_backend, backends.default_backend_name, backends.backend_names) == (
        JobBackend, make_backend, default_backend_name, backend_names)
    assert set(backends.__all__) <= set(dir(backends))
    with pytest.raises(AttributeError):
        backends.NoSuchThing  # noqa: B018


def test_the_options_name_the_image_jobs_run_in_when_none_is_offered(tmp_path, monkeypatch):
    """The launcher says what will run: Kubernetes' worker image (the one the manifests use),
    or nothing on the local backend, whose jobs run in this Python environment."""
    from paddle_ext.backends.kubernetes import DEFAULT_WORKER_IMAGE, KubernetesBackend
    from paddle_ext.backends.local import LocalBackend

    kubernetes = KubernetesBackend(namespace="u", user="u")
    assert kubernetes.options().to_dict()["job_image"] == DEFAULT_WORKER_IMAGE == kubernetes.settings().image
    chosen = KubernetesBackend(namespace="u", user="u", image="registry.example/worker:1")
    assert chosen.options().job_image == "registry.example/worker:1" == chosen.settings().image
    assert LocalBackend(home=str(tmp_path)).options().job_image == ""

    from paddle_ext import JobClient
    from paddle_ext.widgets import JobLauncher

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # no cluster: the quota line stays empty
    launcher = JobLauncher(client=JobClient(kubernetes))
    assert (launcher.image.value, launcher.image.disabled) == (DEFAULT_WORKER_IMAGE, True)
    # The restarts field offers the site's bounds and default, and reaches the spec.
    assert (launcher.max_restarts.value, launcher.max_restarts.max) == (0, 10)
    launcher.max_restarts.value = 2
    assert launcher.spec().max_restarts == 2
    assert launcher.spec().image is None  # the backend picks it, as for the CLI


def test_a_worker_ending_while_its_job_is_read_is_not_taken_for_lost(tmp_path, monkeypatch):
    """Gated, not timed: the worker ends exactly while the backend reads the job (its
    supervisor writes the exit code, then its process group is gone). The job must read
    Succeeded, not "stopped unexpectedly without an exit code" (a CI run saw that)."""
    from paddle_ext.backends import local_files as files
    from paddle_ext.backends.local import LocalBackend

    backend = LocalBackend(home=str(tmp_path), user="alice")
    job_dir = os.path.join(backend.jobs_dir, "racing")
    os.makedirs(job_dir)
    files.write_json(files.job_file(job_dir), {"spec": {"name": "racing", "command": ["true"], "workers": 1},
                                               "created": "2026-01-01T00:00:00Z"})
    files.write_json(files.worker_file(job_dir, 0), {"pid": 4242, "pgid": 4242})

    def ends_now(pgid):  # the supervisor finishes at this very moment
        files.write_exit(job_dir, 0, 0)
        return False

    monkeypatch.setattr(files, "group_alive", ends_now)
    job = backend._read("racing")
    assert (job.phase, job.reason) == ("Succeeded", "Completed"), job
