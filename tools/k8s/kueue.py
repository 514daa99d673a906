"""Kueue in the test cluster: its controller manager as a process against the control plane.

tools/k8s/build.sh builds the manager from the Go module sigs.k8s.io/kueue (VERSIONS:
KUEUE) and copies the module's CRDs (config/components/crd/bases) and webhook
configurations (config/components/webhook/manifests.yaml) next to the binaries, under
<bin dir>/../kueue. Here, once the control plane is ready:

- the CRDs are applied server-side (storage API v1beta2; the bases carry no conversion
  webhook, so only v1beta2 objects are used);
- Kubeflow training-operator v1.9's PaddleJob CRD (kubeflow.org/v1, the product's second job
  kind) is applied too, from the copy `make k8s-bin` caches (tools/k8s/fetch_crd.sh), and
  served before the manager starts: Kueue sets up an integration whose API is missing only
  later, polling with a backoff of up to 2 minutes (pkg/controller/jobframework/setup.go,
  waitForAPI), so with the CRD first its PaddleJob controller runs at once. Without the cached
  CRD, start() fails and says to run `make k8s-bin` (it never runs Kueue without PaddleJobs).
  The CRD stays for the cluster's life: tests may rely on it, and none deletes it. No training
  operator runs here, so an admitted PaddleJob is only unsuspended: no pod is made for it, and
  waitForPodsReady evicts it once its timeout passes;
- the manager runs with a Configuration (config.kueue.x-k8s.io/v1beta2) like the one
  Kueue's envtest uses: no internal cert management, no leader election, the integrations
  batch/job and kubeflow.org/paddlejob (FRAMEWORKS), jobs without a queue label left alone,
  waitForPodsReady on, VisibilityOnDemand off (its aggregated API would need the API
  server's aggregator), Admission Fair Sharing configured
  (ADMISSION_FAIR_SHARING; it acts only on queues that ask for it); webhook, health and
  metrics servers on free ports of 127.0.0.1;
- the webhook configurations are rewritten from `service` to
  `url: https://127.0.0.1:<port>/<path>` with the caBundle of a CA made here, and scoped to
  user namespaces (label paddlecloud.io/user), like the jobs Kueue manages
  (managedJobsNamespaceSelector): a stopped Kueue never blocks the harness's own objects,
  and jobs of other namespaces (tests that play Kueue's part by unsuspending a job
  themselves) are not touched. Only the webhooks of what Kueue manages here are installed
  (WEBHOOK_RESOURCES: its own API group, batch jobs, kubeflow.org paddlejobs; not the other
  Kubeflow kinds, pods or deployments).

Kueue v0.17.0 reads its metrics server's certificate from a fixed path,
/etc/kueue/metrics/certs/tls.{crt,key} (cmd/kueue/main.go; no flag or configuration field
moves it) and exits without it. The harness writes it there when /etc/kueue does not exist
(root only), records which clusters use it (several may run on one machine) and removes
/etc/kueue when the last of them stops. An /etc/kueue it did not make is used as it is.
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time

import yaml

try:
    from .pki import serving_pki
    from .procutil import http_ok, pid_alive, read_json, write_json
except ImportError:  # run as a script from tools/k8s
    from pki import serving_pki
    from procutil import http_ok, pid_alive, read_json, write_json

from paddle_ext.constants import GPU_RESOURCE, USER_LABEL  # noqa: E402
from paddle_ext.ports import free_ports  # noqa: E402

NAMESPACE = "kueue-system"
ETC_DIR = "/etc/kueue"
METRICS_CERT_DIR = os.path.join(ETC_DIR, "metrics", "certs")  # fixed in Kueue's cmd/kueue/main.go
OWNERS_FILE = os.path.join(ETC_DIR, "paddlecloud-owners.json")  # only in an /etc/kueue we made
# The integrations enabled here: the product's two job kinds (paddle_ext.jobkinds), Indexed
# Jobs and Kubeflow PaddleJobs.
FRAMEWORKS = ("batch/job", "kubeflow.org/paddlejob")
# The webhooks installed: API group -> its resources (None: all of them). Kueue registers a hook
# for every integration it knows (a no-op for those not enabled); only these are called.
WEBHOOK_RESOURCES = {"kueue.x-k8s.io": None, "batch": ("jobs",), "kubeflow.org": ("paddlejobs",)}
WEBHOOK_GROUPS = tuple(WEBHOOK_RESOURCES)
PADDLEJOB_CRD = "paddlejobs.kubeflow.org"
PADDLEJOB_API = "/apis/kubeflow.org/v1/paddlejobs"
USER_NAMESPACES = {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]}
WEBHOOK_NAMES = {"MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
                 "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration"}
CRD_PLURALS = ("resourceflavors", "clusterqueues", "localqueues", "workloads", "cohorts",
               "workloadpriorityclasses")


# Admission Fair Sharing (feature gate AdmissionFairSharing: beta, on by default since v0.15)
# acts on ClusterQueues with spec.admissionScope (paddle_ext.quota.queues with fair sharing).
# A LocalQueue's usage is the sum over resources of weight x amount, so only GPUs count (CPU in
# cores and memory in bytes would drown them). It is the GPUs the queue held, sampled every
# second and halved every 30 s, so within a test of a few minutes of short jobs Kueue reacts to
# the usage the test makes. (Kueue's default sampling is every 5 minutes; a site would use
# hours or days for the half-life.) Tried here with the fairness test in tests/cluster/
# test_kueue.py: a 10-minute half-life, on this 2-core machine, gave 0.32/0.30/0.38 for weights
# 1/1/2 (Kueue then sampled far less often than every second), 30 s gave 0.27/0.26/0.48; half-lives
# of 1, 2 and 5 s did no better (largest misses 0.016 to 0.071 in five runs, 30 s: 0.028, 0.039).
ADMISSION_FAIR_SHARING = {"usageHalfLifeTime": "30s", "usageSamplingInterval": "1s",
                          "resourceWeights": {GPU_RESOURCE: 1.0, "cpu": 0.0, "memory": 0.0, "ephemeral-storage": 0.0}}


class KueueError(RuntimeError):
    """Kueue could not be installed or started."""


def manifests_dir(bin_dir):
    """Where build.sh copied the module's CRDs (crd/) and webhooks (webhook.yaml)."""
    return os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "kueue")


def paddlejob_crd_path():
    """Where `make k8s-bin` caches Kubeflow's PaddleJob CRD (tools/k8s/fetch_crd.sh --print:
    the path only, nothing fetched; the file may be missing)."""
    out = subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "fetch_crd.sh"), "--print"],
                         check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def unavailable_reason(bin_dir):
    """Why Kueue cannot run with these binaries on this machine (None: it can)."""
    if not os.access(os.path.join(bin_dir, "kueue"), os.X_OK):
        return f"no kueue binary in {bin_dir}; run `make k8s-bin`"
    if not os.path.isdir(os.path.join(manifests_dir(bin_dir), "crd")):
        return f"Kueue's CRDs are not in {manifests_dir(bin_dir)}; run `make k8s-bin`"
    if not _metrics_certs_present() and not os.access("/etc", os.W_OK):
        return (f"Kueue reads its metrics certificate from {METRICS_CERT_DIR} (fixed in Kueue); "
                f"creating it needs root")
    return None


# ---------------------------------------------------------------- pure parts


def configuration(webhook_port, health_port, metrics_port, cert_dir, wait_for_pods_ready="5m"):
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": USER_NAMESPACES,
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "waitForPodsReady": {"timeout": wait_for_pods_ready},
        "featureGates": {"VisibilityOnDemand": False},
        "admissionFairSharing": ADMISSION_FAIR_SHARING,
    }


def webhook_configurations(documents, port, ca_pem):
    """Kueue's webhook configurations, reached at https://127.0.0.1:<port> with ca_pem,
    only for WEBHOOK_RESOURCES, and for namespaced objects only in user namespaces."""
    out = []
    for doc in documents:
        if not doc or doc.get("kind") not in WEBHOOK_NAMES:
            continue
        doc = json.loads(json.dumps(doc))
        doc["metadata"] = {"name": WEBHOOK_NAMES[doc["kind"]], "labels": {"app.kubernetes.io/name": "kueue"}}
        hooks = []
        for hook in doc.get("webhooks", []):
            if not all(_hooked(rule) for rule in hook["rules"]):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca_pem).decode()}
            hook["namespaceSelector"] = USER_NAMESPACES  # cluster-scoped objects: always called
            hook["timeoutSeconds"] = 10
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def _hooked(rule):
    """Whether a webhook rule is only about what Kueue manages here (WEBHOOK_RESOURCES)."""
    for group in rule["apiGroups"]:
        if group not in WEBHOOK_RESOURCES:
            return False
        wanted = WEBHOOK_RESOURCES[group]
        if wanted is not None and not all(r.split("/")[0] in wanted for r in rule["resources"]):
            return False
    return True


# ---------------------------------------------------------------- /etc/kueue


def _metrics_certs_present():
    return all(os.path.exists(os.path.join(METRICS_CERT_DIR, n)) for n in ("tls.crt", "tls.key"))


class _EtcLock:
    """flock on /etc itself: claims and releases of /etc/kueue by clusters on this machine."""

    def __enter__(self):
        self.fd = os.open("/etc", os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _live_owners():
    try:
        owners = read_json(OWNERS_FILE)
    except (OSError, ValueError):
        return {}
    return {d: pid for d, pid in owners.items() if pid_alive(pid)}


def claim_metrics_certs(state_dir, pid):
    """Make sure the metrics certificate exists; record state_dir (its user: pid) as a user
    of an /etc/kueue we made. Returns whether /etc/kueue is ours."""
    with _EtcLock():
        ours = os.path.exists(OWNERS_FILE)
        if not ours and os.path.exists(ETC_DIR):
            if not _metrics_certs_present():
                raise KueueError(f"{ETC_DIR} exists but has no {METRICS_CERT_DIR}/tls.{{crt,key}}, and the "
                                 f"test harness did not make it, so it leaves it alone")
            return False
        if not ours:
            _, crt, key = serving_pki("paddlecloud-kueue-metrics-ca", "kueue-metrics", ("127.0.0.1", "localhost"))
            os.makedirs(METRICS_CERT_DIR)
            with open(os.path.join(METRICS_CERT_DIR, "tls.crt"), "wb") as fh:
                fh.write(crt)
            with open(os.open(os.path.join(METRICS_CERT_DIR, "tls.key"), os.O_WRONLY | os.O_CREAT, 0o600), "wb") as fh:
                fh.write(key)
        owners = _live_owners()
        owners[state_dir] = pid
        write_json(OWNERS_FILE, owners)
        return True


def release_metrics_certs(state_dir):
    """Forget state_dir as a user of /etc/kueue; remove /etc/kueue when it was ours and no
    running cluster uses it any more. Returns whether /etc/kueue is gone (or not ours)."""
    if not os.path.exists(OWNERS_FILE):
        return True
    with _EtcLock():
        if not os.path.exists(OWNERS_FILE):
            return True
        owners = _live_owners()
        owners.pop(state_dir, None)
        if owners:
            write_json(OWNERS_FILE, owners)
            return False
        shutil.rmtree(ETC_DIR, ignore_errors=True)
        return not os.path.exists(ETC_DIR)


# ---------------------------------------------------------------- the process


class Kueue:
    """Kueue for a tools/k8s Cluster: start(deadline) once its control plane is ready; the
    cluster stops the process with its own and then calls release()."""

    def __init__(self, cluster, wait_for_pods_ready="5m"):
        self.cluster = cluster
        self.wait_for_pods_ready = wait_for_pods_ready
        self.dir = os.path.join(cluster.state_dir, "kueue")
        self.ports = {}

    def start(self, deadline):
        c = self.cluster
        reason = unavailable_reason(c.bin_dir)
        if reason:
            raise KueueError(reason)
        paddlejob_crd = paddlejob_crd_path()
        if not os.path.isfile(paddlejob_crd):  # before anything is made: nothing to undo
            raise KueueError(f"Kubeflow's PaddleJob CRD is not cached at {paddlejob_crd}; Kueue manages PaddleJobs "
                             f"here too and needs it before it starts: run `make k8s-bin` (tools/k8s/fetch_crd.sh)")
        shutil.rmtree(self.dir, ignore_errors=True)
        cert_dir = os.path.join(self.dir, "certs")
        os.makedirs(cert_dir)
        ca, crt, key = serving_pki("paddlecloud-kueue-webhook-ca", "kueue-webhook", ("127.0.0.1",))
        for name, data in (("ca.crt", ca), ("tls.crt", crt), ("tls.key", key)):
            with open(os.path.join(cert_dir, name), "wb") as fh:
                fh.write(data)
        self.ports = dict(zip(("webhook", "health", "metrics"), free_ports(3)))
        config = os.path.join(self.dir, "config.yaml")
        with open(config, "w") as fh:
            yaml.safe_dump(configuration(self.ports["webhook"], self.ports["health"], self.ports["metrics"],
                                         cert_dir, self.wait_for_pods_ready), fh)
        write_json(os.path.join(self.dir, "kueue.json"), {"ports": self.ports})
        self._install_crds(deadline, paddlejob_crd)
        c.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        claim_metrics_certs(c.state_dir, os.getpid())
        c._spawn("kueue", [os.path.join(c.bin_dir, "kueue"), f"--config={config}",
                           f"--kubeconfig={c.kubeconfig}"])
        claim_metrics_certs(c.state_dir, c.pids["kueue"]["pid"])  # outlives `cluster.py up`
        c._wait(deadline, "kueue readyz", lambda: http_ok(f"http://127.0.0.1:{self.ports['health']}/readyz"))
        with open(os.path.join(manifests_dir(c.bin_dir), "webhook.yaml")) as fh:
            documents = list(yaml.safe_load_all(fh))
        for doc in webhook_configurations(documents, self.ports["webhook"], ca):
            c.create(f"/apis/admissionregistration.k8s.io/v1/{doc['kind'].lower()}s", doc)
        c._wait(deadline, "Kueue's webhooks (by URL) answering the API server", self._webhook_answers)

    def _install_crds(self, deadline, paddlejob):
        """Kueue's CRDs and the PaddleJob CRD (the file `paddlejob`), each served before the
        manager starts."""
        c = self.cluster
        left = max(1.0, deadline - time.monotonic())
        try:
            out = subprocess.run([os.path.join(c.bin_dir, "kubectl"), f"--kubeconfig={c.kubeconfig}", "apply",
                                  "--server-side", "--force-conflicts", "-f", os.path.join(manifests_dir(c.bin_dir), "crd"),
                                  "-f", paddlejob], capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired as exc:
            raise KueueError(f"installing Kueue's and the PaddleJob CRDs did not finish in {left:.0f} s (the cluster's "
                             f"start deadline): {(exc.stderr or b'').decode(errors='replace').strip()}") from exc
        if out.returncode:
            raise KueueError(f"installing Kueue's and the PaddleJob CRDs failed: {out.stderr.strip()}")
        for plural in CRD_PLURALS:
            c._wait(deadline, f"CRD {plural}.kueue.x-k8s.io",
                    lambda p=plural: c._get_ok(f"/apis/kueue.x-k8s.io/v1beta2/{p}"))
        c._wait(deadline, f"CRD {PADDLEJOB_CRD}", lambda: c._get_ok(PADDLEJOB_API))

    def _webhook_answers(self):
        """A dry-run ResourceFlavor with a label key Kueue's validating webhook refuses: its
        refusal shows the API server calls the webhook (cluster-scoped: no selector applies)."""
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": "paddlecloud-webhook-probe"},
                "spec": {"nodeLabels": {"bad key!": "x"}}}
        try:
            self.cluster.request("POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors?dryRun=All", body)
        except Exception as exc:  # ClusterError: the refusal we want, or not yet
            return "vresourceflavor.kb.io" in str(exc) and "denied the request" in str(exc)
        return False

    def release(self):
        return release_metrics_certs(self.cluster.state_dir)
