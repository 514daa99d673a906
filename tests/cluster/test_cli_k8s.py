"""Every `paddlecloud` command on the Kubernetes backend against the real control plane, good
input and bad: no "Unclosed client session", no warnings or tracebacks, the documented
exit codes, one line per error, aligned `list` columns (tests/clicheck.py)."""

import json
import os
import subprocess
import sys

from clicheck import UNTIDY, check_every_command
from tools.k8s.cluster import IMAGE_REFS


def test_every_command_is_tidy_on_kubernetes(real_cluster, namespace, tmp_path, project_folder):
    env = {**os.environ, "KUBECONFIG": real_cluster.kubeconfig, "PADDLECLOUD_BACKEND": "kubernetes",
           "PADDLECLOUD_IMAGES": json.dumps([{"name": IMAGE_REFS["worker"]}])}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "paddle_ext.cli", "--namespace", namespace, *args],
                              cwd=project_folder, env=env, capture_output=True, text=True, timeout=300)

    submitted = run("submit", "--name", "tidy", "--workers", "2", "--cpu", "500m", "--memory", "1Gi", "--follow",
                    "--", "python", "train.py", "--epochs", "1")
    assert submitted.returncode == 0 and not UNTIDY.search(submitted.stderr), submitted.stderr
    assert submitted.stderr == "Job tidy Succeeded: All 2 workers finished successfully.\n"
    assert "[worker-0] rank 0: done" in submitted.stdout and "[worker-1] rank 1: done" in submitted.stdout
    tried = check_every_command(run, "tidy", tmp_path / "code")
    print(f"\nKubernetes CLI: {tried + 1} commands, all tidy")
