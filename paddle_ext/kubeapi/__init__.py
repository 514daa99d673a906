"""A small async client for the Kubernetes REST API: JSON in and out, and streams.

Everything of ours that talks to Kubernetes (the job backend, the quota store and the
quota sync) goes through `KubeApi`, so there is one way to find credentials, one way to
read errors, and no 2-second import of a generated client before the first request.

    credentials  the pod's service account, or a kubeconfig (as kubectl reads it)
    transport    HTTP/1.1 on asyncio streams (standard library only)
    client       KubeApi, its neutral errors, REST paths and list bodies
"""

from .client import (MERGE_PATCH, REQUEST_TIMEOUT_SECONDS, KubeApi, KubeApiError, KubeUnreachable, api_path,
                     split_lines, without_managed_fields)
from .credentials import (Credentials, ExecResult, KubeConfigError, default_kubeconfig, find_credentials,
                          in_cluster_credentials, kubeconfig_credentials, run_exec_plugin)

__all__ = ["MERGE_PATCH", "REQUEST_TIMEOUT_SECONDS", "KubeApi", "KubeApiError", "KubeUnreachable", "api_path",
           "split_lines", "without_managed_fields", "Credentials", "ExecResult", "KubeConfigError",
           "default_kubeconfig", "find_credentials", "in_cluster_credentials", "kubeconfig_credentials",
           "run_exec_plugin"]
