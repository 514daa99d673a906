"""Names and defaults shared by both sides of the product, each defined once.

Kubernetes label, annotation and object names; the environment variables the hub
hands to notebooks and jobs; the state folder of the embedded default. Pure: no
imports from the package, no I/O beyond reading the environment.
"""

from __future__ import annotations

import os

# ---------------------------------------------------------------- Kubernetes names

LABEL_PREFIX = "paddlecloud.io"
JOB_LABEL = f"{LABEL_PREFIX}/job"
USER_LABEL = f"{LABEL_PREFIX}/user"
KIND_LABEL = f"{LABEL_PREFIX}/kind"
CANCELLED_ANNOTATION = f"{LABEL_PREFIX}/cancelled"
FAILED_ANNOTATION = f"{LABEL_PREFIX}/failed"  # why a job that could never start was stopped
SPEC_ANNOTATION = f"{LABEL_PREFIX}/spec"
CODE_ANNOTATION = f"{LABEL_PREFIX}/code"  # what the job ran (workspace.CodeSnapshot.record)
OUTPUTS_ANNOTATION = f"{LABEL_PREFIX}/outputs"  # where its outputs are kept (jobs.outputs_record)
# The running-jobs cap and where each limit comes from ride on the user's ResourceQuota:
# the API server cannot count *running* jobs (`count/jobs.batch` counts finished Jobs too).
RUNNING_JOBS_ANNOTATION = f"{LABEL_PREFIX}/running-jobs"
QUOTA_SOURCES_ANNOTATION = f"{LABEL_PREFIX}/quota-sources"
# With Kueue: the user's queue (its ClusterQueue, nominal quota, borrowing limit) on the
# ResourceQuota, where the notebook can read it (ClusterQueues are cluster-scoped), and who
# a ClusterQueue is for, on the ClusterQueue.
QUEUE_ANNOTATION = f"{LABEL_PREFIX}/queue"
QUEUE_TITLE_ANNOTATION = f"{LABEL_PREFIX}/queue-title"
QUEUE_OWNER_ANNOTATION = f"{LABEL_PREFIX}/queue-owner"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = {MANAGED_BY_LABEL: "paddlecloud"}
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# How often a worker index of an Indexed Job with backoffLimitPerIndex has failed (set by the
# Job controller on each pod it creates): a worker's attempt number on Kubernetes.
INDEX_FAILURE_COUNT_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"
KUBEFLOW_INDEX_LABEL = "training.kubeflow.org/replica-index"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# What Kueue labels the Workload of a Job with: the Job's uid (selects one job's Workload).
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Kueue copies it into the Workload's maximumExecutionTimeSeconds (and enforces it): the job's
# --max-runtime, which the queue's start estimates read.
KUEUE_MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"

GPU_RESOURCE = "nvidia.com/gpu"  # the default; every setting that names it is configurable
CONTAINER_NAME = "paddle"  # Kubeflow's PaddleJob requires this name
MASTER_PORT = 36789
HUB_API_PORT = 8081  # the hub's own API (JupyterHub's default); the chart's pc.hubApiPort is checked equal
# Who every pod we run is: notebooks, jobs, the hub and its proxy. The images' user (uid
# 1000, primary group 100 "users", as Jupyter's docker-stacks), so the files notebooks and
# jobs write in a shared home carry one owner and one group (manifests.pod_security_context).
RUN_AS_USER = 1000
RUN_AS_GROUP = 100
DEFAULT_JOB_KIND = "job"  # of paddle_ext.jobkinds.JOB_KINDS: an Indexed Job, no operator needed

QUOTA_NAME = "paddlecloud-quota"  # the ResourceQuota in each user namespace
LIMIT_RANGE_NAME = "paddlecloud-defaults"
NOTEBOOK_SERVICE_ACCOUNT = "paddlecloud-notebook"
NOTEBOOK_ROLE = "paddlecloud-notebook"
NOTEBOOK_POD_LABELS = {"component": "singleuser-server"}  # KubeSpawner's label on notebook pods
QUOTA_CONFIGMAP = "paddlecloud-quotas"  # quota settings, in the hub's namespace
USER_NAMESPACE_TEMPLATE = "paddlecloud-{username}"

# ---------------------------------------------------------------- environment

BACKEND_ENV = "PADDLECLOUD_BACKEND"
# The site's settings for the notebook's job backend, as traitlets config in JSON
# ({"KubernetesBackend": {"job_kind": ...}, "JobBackend": {...}}), set by the hub.
BACKEND_CONFIG_ENV = "PADDLECLOUD_BACKEND_CONFIG"
HOME_ENV = "PADDLECLOUD_HOME"
QUOTA_FILE_ENV = "PADDLECLOUD_QUOTA_FILE"
QUOTA_STORE_ENV = "PADDLECLOUD_QUOTA_STORE"  # the quota service's store: local or kubernetes
# The site default quota (JSON, quota API fields) the hub hands the quota service: the same
# variable HubSettings reads for its default_quota field.
SITE_DEFAULT_QUOTA_ENV = "PADDLECLOUD_DEFAULT_QUOTA"
OBJECT_QUOTA_ENV = "PADDLECLOUD_OBJECT_QUOTA"  # JSON: the object counts of every user's ResourceQuota
# JSON, the quota service's Kueue settings ({"lending_limit": {...}, "borrowing_limit": {...},
# "fair_sharing": bool, "user_weights": {user: weight}});
# absent or empty: no Kueue.
KUEUE_ENV = "PADDLECLOUD_KUEUE"
NAMESPACE_TEMPLATE_ENV = "PADDLECLOUD_NAMESPACE_TEMPLATE"  # the quota service's users' namespaces
USER_GROUPS_ENV = "PADDLECLOUD_USER_GROUPS"
IMAGES_ENV = "PADDLECLOUD_IMAGES"
DATASETS_ENV = "PADDLECLOUD_DATASETS"
JOB_NAME_ENV = "PADDLECLOUD_JOB_NAME"
OUTPUT_DIR_ENV = "PADDLECLOUD_OUTPUT_DIR"
# Which attempt of the job a worker runs in: 0 first, 1 after the first restart, ...
RESTART_ENV = "PADDLECLOUD_RESTART"
# Where a worker keeps a copy of its container's output, one file per pod
# (paddle_ext.trainer_logs.OutputCopy): set only when the job's outputs are kept, to
# <outputs>/LOG_COPY_FOLDER/worker-<I>, so a deleted pod's log is still there to read.
LOG_COPY_DIR_ENV = "PADDLECLOUD_LOG_COPY_DIR"
POD_UID_ENV = "PADDLECLOUD_POD_UID"  # the worker's pod, which names its copy (downward API)
WORKER_INDEX_ENV = "PADDLECLOUD_WORKER_INDEX"  # a worker's index on Kubernetes, whatever the job's kind
LOG_COPY_FOLDER = "logs"
# A shared (ReadWriteMany) workspace that notebooks and jobs both mount, set by the hub:
WORKSPACE_CLAIM_ENV = "PADDLECLOUD_WORKSPACE_CLAIM"
WORKSPACE_MOUNT_ENV = "PADDLECLOUD_WORKSPACE_MOUNT"
OUTPUTS_FOLDER = "paddlecloud-outputs"  # on the shared workspace: <mount>/paddlecloud-outputs/<job>
# Set by the server extension for the kernels it starts: where JupyterLab is, so the widgets
# can link a job's output folder into its file browser.
SERVER_ROOT_ENV = "PADDLECLOUD_SERVER_ROOT"
SERVER_BASE_URL_ENV = "PADDLECLOUD_SERVER_BASE_URL"
DATASET_ENV_PREFIX = "PADDLECLOUD_DATASET_"
# Credentials of the notebook server, which its jobs never get (jobs on Kubernetes run in
# pods of their own without them; local jobs are started without them).
SERVER_SECRET_ENV = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN", "JUPYTER_TOKEN")
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # a worker's index on Kubernetes (the Indexed Job's)
# What paddle.distributed.launch reads from the environment in place of its command line
# (paddle/distributed/launch/context/args_envs.py: env_args_mapping, and the rank from
# PADDLE_TRAINER_ID): set by a user, they would silently rewire a job's workers.
LAUNCHER_ENV = (
    "POD_IP", "PADDLE_MASTER", "PADDLE_DEVICES", "PADDLE_NNODES", "PADDLE_RUN_MODE", "PADDLE_LOG_LEVEL",
    "PADDLE_LOG_OVERWRITE", "PADDLE_SORT_IP", "PADDLE_NPROC_PER_NODE", "PADDLE_JOB_ID", "PADDLE_RANK",
    "PADDLE_LOG_DIR", "PADDLE_MAX_RESTART", "PADDLE_ELASTIC_LEVEL", "PADDLE_ELASTIC_TIMEOUT",
    "PADDLE_SERVER_NUM", "PADDLE_TRAINER_NUM", "PADDLE_SERVERS_ENDPOINTS", "PADDLE_TRAINERS_ENDPOINTS",
    "PADDLE_GLOO_PORT", "PADDLE_WITH_GLOO", "PADDLE_START_PORT", "PADDLE_IPS", "PADDLE_AUTO_PARALLEL_CONFIG",
    "PADDLE_AUTO_CLUSTER", "PADDLE_TRAINER_ID",
)
# The GPU runtime (NVIDIA container toolkit) shows a container the devices these name. The
# device plugin sets them for the GPUs a container requests; set by a user they could name
# GPUs the container never asked for: never a user's (JobSpec, and the admission policy of
# paddle_ext.policies in user namespaces).
GPU_DEVICE_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
# Every variable of the GPU runtime starts so; a job or pod that requests no GPU sets none.
# (CUDA_VISIBLE_DEVICES is not one: it only narrows, inside the process, the devices the
# container already has, so users may set it, e.g. to "" to keep a run on the CPU.)
GPU_RUNTIME_ENV_PREFIX = "NVIDIA_"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # a pod's token, CA and namespace
# Set by paddle.distributed.launch in every trainer process: its global rank.
TRAINER_ID_ENV = "PADDLE_TRAINER_ID"
# Where paddle.distributed.launch picks its own ports ("LOW:HIGH"; paddle/distributed/launch/
# context/node.py). Its default, 35100:64000, lies in Linux's range for outgoing connections'
# source ports: on a busy machine a port it checked free was taken before its TCPStore bound it,
# and the worker aborted (SIGABRT in LibUVMasterDaemon). Local jobs get paddle_ext.ports' range.
LAUNCHER_PORT_RANGE_ENV = "PORT_RANGE"

# ---------------------------------------------------------------- notebooks and logs

# paddle_ext.report() writes one line per call: this marker, then a JSON object.
METRIC_MARKER = "PADDLECLOUD_METRIC "
# %%paddle_train writes each cell's code here, under the notebook's folder.
CELLS_DIR = "paddlecloud_cells"
# The defaults, read by the Python API, the CLI, the REST API, the launcher's form and the
# quota model alike (paddle_ext.spec re-exports them). One worker: distributed training is
# a deliberate choice, and a job takes no more of a shared quota than it asks for.
DEFAULT_WORKERS = 1
DEFAULT_GPUS_PER_WORKER = 0
DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"
# Restarts a job gets when neither it nor the site says otherwise, and the most a site allows
# unless it says otherwise (JobBackend.default_max_restarts / max_restarts).
DEFAULT_MAX_RESTARTS = 0
SITE_MAX_RESTARTS = 10

# Most a job's code snapshot may weigh, compressed (paddle_ext.workspace; JobBackend.code_max_bytes):
# a ConfigMap holds at most 1 MiB; leave room for the object around the archive.
CODE_MAX_BYTES = 768 * 1024
# An archive of a job's code is refused, before anything is written, where it would unpack
# to more than this (a gzip bomb: a snapshot that expands without end): in the notebook
# (workspace.unpack) and in the job's init container (job_folder).
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_UNPACKED_FILES = 20_000

# The merged log of several workers prefixes each line with this (see loglines.prefix_line).
WORKER_PREFIX = "[worker-{index}] "
# ... and a worker running several trainers (one per GPU) prefixes each trainer's lines with
# this (paddle_ext.trainer_logs, which runs standalone and so holds a copy, checked equal by
# tests/unit/test_trainer_logs.py).
LOCAL_RANK_PREFIX = "[local-rank-{rank}] "


def paddlecloud_home() -> str:
    """The embedded default's state folder: $PADDLECLOUD_HOME, else ~/.paddlecloud."""
    return os.path.abspath(os.environ.get(HOME_ENV) or os.path.join(os.path.expanduser("~"), ".paddlecloud"))


def in_cluster() -> bool:
    """Running in a Kubernetes pod with a service-account token."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        os.path.join(SERVICE_ACCOUNT_DIR, "token"))


def dataset_env_name(dataset: str) -> str:
    """$PADDLECLOUD_DATASET_<NAME>: where a local job finds dataset `dataset`."""
    return DATASET_ENV_PREFIX + dataset.upper().replace("-", "_")
