"""`helm install` on the real node, used end to end through proxy-public.

It installs exactly the values of "Try it on this machine" in docs/admin/deploy.md (helmlib.docs_try_values), on a cluster like `make cluster`'s: volumes come from its default
StorageClass (the local-path provisioner), as they would for an admin; nothing is
prepared by hand. The hub, the proxy, the notebook and the training workers are the
images `make images` built, running as real pods (containerd, runc, CNI bridge,
kube-proxy, CoreDNS). The test reaches the hub only through the proxy-public Service's
NodePort at the address NOTES.txt prints, as a user would. One module, in order: install,
log in, spawn, a 2-worker job, quota, RBAC, upgrade, OpenID Connect login (the docs' block,
against a real provider on the node's address), uninstall. Clean-up (uninstall, namespaces)
runs even when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from availability import skip_or_fail
from loginvalues import docs_login_values, with_config
from oidcutil import ACCOUNTS, OIDCProvider, login_through_provider
from oidcutil import missing as oidc_missing
from serverutil import wait_for

from helmlib import CHART, REPO, bin_dir, helm, kubectl, docs_try_section, docs_try_values, secret_data
from tools.k8s.node_config import NODE_IP

# pytest-randomly shuffles the modules and the tests in them; this module is one flow over one
# release, so its tests run in the order written, where the shuffle put them (tests/conftest.py).
STEPS_IN_ORDER = True

NS = "paddlecloud"
RELEASE = "pc"
USER = "alice"
ADMIN = "admin"
USER_NS = f"paddlecloud-{USER}"
HUB_SA = f"system:serviceaccount:{NS}:hub"
SSO_USER = "bob"  # in the provider's groups vision and audio (tests/oidcutil.py ACCOUNTS); alice has her notebook
SSO_USER_NS = f"paddlecloud-{SSO_USER}"
TRAIN = (REPO / "paddle_ext" / "examples" / "train.py").read_text()
SLEEPER = "import time\nfor i in range(900):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"


def volume_dir(cluster, claim: dict) -> Path:
    """Where the local-path provisioner keeps a claim's volume on the node (this machine)."""
    volume = kubectl(cluster.kubeconfig, "get", "pv", claim["spec"]["volumeName"], "-o", "json").stdout
    return Path(json.loads(volume)["spec"]["hostPath"]["path"])


class Deployment:
    """The installed release, seen from outside: kubectl for the admin, HTTP for users."""

    def __init__(self, cluster, workdir: Path):
        self.cluster = cluster
        self.kubeconfig = cluster.kubeconfig
        self.workdir = workdir
        self.values = workdir / "try-values.yaml"
        self.values.write_text(docs_try_values())
        values = yaml.safe_load(self.values.read_text())
        self.password = values["hub"]["config"]["DummyAuthenticator"]["password"]
        assert values["hub"]["adminUsers"] == [ADMIN] and values["settings"]["allowed_users"] == [USER], values
        self.url = ""
        self.sessions: dict[str, requests.Session] = {}
        self.tokens: dict[str, str] = {}
        self.install_output = ""
        self.db_dir = Path()

    def k(self, *args: str, check: bool = True, input: str | None = None):
        return kubectl(self.kubeconfig, *args, check=check, input=input)

    def get(self, *args: str) -> dict:
        return json.loads(self.k("get", "-o", "json", *args).stdout)

    def helm(self, *args: str, check: bool = True, timeout: float = 420):
        return helm(*args, check=check, kubeconfig=self.kubeconfig, timeout=timeout)

    def pod(self, namespace: str, selector: str) -> dict:
        pods = [p for p in self.get("pods", "-n", namespace, "-l", selector)["items"]
                if not p["metadata"].get("deletionTimestamp")]
        assert len(pods) == 1, f"{len(pods)} pods for {selector} in {namespace}"
        return pods[0]

    # --- as a user, through proxy-public

    def login(self, name: str) -> requests.Session:
        session = requests.Session()
        session.get(f"{self.url}/hub/login", timeout=30).raise_for_status()
        response = session.post(f"{self.url}/hub/login", allow_redirects=False, timeout=60, data={
            "username": name, "password": self.password, "_xsrf": session.cookies.get("_xsrf")})
        assert response.status_code == 302, f"login as {name}: HTTP {response.status_code} {response.text[:300]}"
        return self.keep(name, session)

    def keep(self, name: str, session: requests.Session) -> requests.Session:
        """Keep a logged-in session and an API token made with it, for `api(..., user=name)`."""
        self.sessions[name], self.tokens[name] = session, self.new_token(name, session)
        return session

    def new_token(self, name: str, session: requests.Session, scopes: list[str] | None = None) -> str:
        """An API token the user makes in the logged-in session (all their rights, or `scopes`)."""
        body = {"note": "helm test", **({"scopes": scopes} if scopes is not None else {})}
        token = session.post(f"{self.url}/hub/api/users/{name}/tokens", json=body, timeout=30,
                             headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")
                                      or session.cookies.get("_xsrf")})
        assert token.status_code == 201, token.text
        return token.json()["token"]

    def api(self, method: str, path: str, user: str = USER, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        headers = {"Authorization": f"token {self.tokens[user]}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.url}{path}", headers=headers, **kwargs)

    def wait_for_server(self, user: str) -> dict:
        """The user's default server once the hub says it is ready; fails if it stops while starting."""
        def ready():
            server = self.api("GET", f"/hub/api/users/{user}", user=user).json().get("servers", {}).get("")
            assert server is not None, f"{user}'s server stopped while starting:\n" + self.diagnostics()
            return server if server.get("ready") else None

        return wait_for(what=f"{user}'s notebook", check=ready, timeout=300, interval=2)

    def job(self, name: str) -> dict:
        response = self.api("GET", f"/user/{USER}/paddle/api/jobs/{name}")
        assert response.status_code == 200, response.text
        return response.json()

    def diagnostics(self) -> str:
        parts = []
        for args in (("get", "pods", "-A", "-o", "wide"), ("logs", "-n", NS, "deployment/hub", "--tail=60"),
                     ("get", "events", "-A", "--sort-by=.lastTimestamp")):
            parts.append(self.k(*args, check=False).stdout[-6000:])
        return "\n".join(parts)

    # --- clean-up, whatever happened

    def clean_up(self, failed: bool):
        if failed:  # what the hub said, before it goes
            print("\n--- diagnostics after a failure ---\n" + self.diagnostics())
        self.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)
        for namespace in (USER_NS, SSO_USER_NS, NS):
            self.k("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)
        for kind in ("clusterrole", "clusterrolebinding", "validatingadmissionpolicy",
                     "validatingadmissionpolicybinding"):
            self.k("delete", kind, "-l", f"app.kubernetes.io/instance={RELEASE}", "--ignore-not-found", check=False)


FAILED: list[str] = []  # tests of this module that failed (conftest.py's report hook)


@pytest.fixture(scope="module")
def deployment(real_cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("helm-install")
    d = Deployment(real_cluster, work)
    try:
        yield d
    finally:
        d.clean_up(failed=bool(FAILED))


def test_install_with_the_readmes_values_the_hub_and_proxy_become_ready(deployment):
    """The three commands of docs/admin/deploy.md: `make cluster` (the fixture's cluster, with its default
    StorageClass), `helm install ... --wait` with its values, and open the URL it names."""
    d = deployment
    commands = docs_try_section()
    assert f"helm install {RELEASE} helm/paddlecloud-hub -n {NS} --create-namespace -f try-values.yaml --wait" \
        in commands
    t0 = time.monotonic()
    proc = d.helm("install", RELEASE, str(CHART), "-n", NS, "--create-namespace", "-f", str(d.values),
                  "--wait", "--timeout", "300s", check=False)
    assert proc.returncode == 0, proc.stderr + d.diagnostics()
    print(f"helm install --wait: {time.monotonic() - t0:.1f}s")
    d.install_output = proc.stdout
    for component in ("hub", "proxy"):
        pod = d.pod(NS, f"app.kubernetes.io/component={component}")
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert ready["Ready"] == "True", pod["status"]
        assert pod["spec"]["nodeName"] == d.cluster.real_node_name
    # NOTES.txt: the login that applies, and a command that prints the hub's address.
    assert 'Log in with "dummy": any user name below, with the password of' in proc.stdout
    assert "any password" not in proc.stdout
    assert f"kubectl delete namespace {NS}" in proc.stdout
    assert "WARNING" not in proc.stdout  # the API server's address was read from the cluster
    echo = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith('echo "http://')]
    assert len(echo) == 1, proc.stdout
    env = {**os.environ, "KUBECONFIG": d.kubeconfig, "PATH": f"{bin_dir()}:{os.environ['PATH']}"}
    printed = subprocess.run(["bash", "-c", echo[0]], capture_output=True, text=True, env=env, timeout=60)
    d.url = printed.stdout.strip().rstrip("/")
    assert d.url == f"http://{NODE_IP}:30080", printed.stdout + printed.stderr
    assert f"xdg-open {d.url}/" in commands  # the docs' third command opens the same address
    assert requests.get(f"{d.url}/hub/health", timeout=30).status_code == 200
    # The database claim was bound by the cluster's default StorageClass, and the hub (uid
    # 1000) wrote its database into the fresh volume (local-path makes it mode 0777).
    claim = d.get("pvc", "-n", NS, "hub-db")
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["storageClassName"] == "local-path", claim
    db = volume_dir(d.cluster, claim)
    assert db.is_relative_to(d.cluster.state_dir) and (db / "jupyterhub.sqlite").stat().st_uid == 1000
    d.db_dir = db
    # The hub's image has the authenticators the docs' examples use.
    check = ("from jupyterhub.app import JupyterHub as J; "
             "print([J.authenticator_class.validate(None, n).__name__ for n in ('github', 'ldapauthenticator')])")
    out = d.k("exec", "-n", NS, "deployment/hub", "--", "python", "-c", check).stdout
    assert "GitHubOAuthenticator" in out and "LDAPAuthenticator" in out


def test_a_user_logs_in_spawns_a_notebook_and_runs_a_two_worker_job(deployment):
    d = deployment
    assert d.url, "the install step failed"
    d.login(USER)
    t0 = time.monotonic()
    response = d.api("POST", f"/hub/api/users/{USER}/server")
    assert response.status_code in (201, 202), response.text
    d.wait_for_server(USER)
    print(f"notebook ready in {time.monotonic() - t0:.1f}s")
    notebook = d.pod(USER_NS, "component=singleuser-server")
    assert notebook["spec"]["nodeName"] == d.cluster.real_node_name
    assert notebook["spec"]["containers"][0]["image"] == "docker.io/paddlecloud/notebook:3.3.1-cpu"
    assert notebook["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    options = d.api("GET", f"/user/{USER}/paddle/api/options")
    assert options.status_code == 200 and options.json()["bounds"]["workers"]["max"] >= 2, options.text
    # The home volume came from the default StorageClass too.
    home = d.get("pvc", "-n", USER_NS, f"home-{USER}")
    assert home["spec"]["storageClassName"] == "local-path" and home["status"]["phase"] == "Bound", home
    # A new home starts with the quickstart and its train.py (the notebook's postStart hook), and the
    # job below runs that train.py, as the quickstart does.
    listing = d.api("GET", f"/user/{USER}/api/contents").json()
    assert {"quickstart.ipynb", "train.py"} <= {item["name"] for item in listing["content"]}, listing
    seeded = d.api("GET", f"/user/{USER}/api/contents/train.py").json()
    assert seeded["content"] == TRAIN, "the home's train.py is not the example"
    put = d.api("PUT", f"/user/{USER}/api/contents/sleeper.py", json={"type": "file", "format": "text",
                                                                      "content": SLEEPER})
    assert put.status_code in (200, 201), put.text
    t0 = time.monotonic()
    submit = d.api("POST", f"/user/{USER}/paddle/api/jobs", json={
        "name": "train-helm", "command": ["python", "train.py", "--epochs", "2", "--steps", "5"],
        "workers": 2, "cpu": "250m", "memory": "1Gi"})
    assert submit.status_code == 201, submit.text
    job = wait_for(what="the job to end", check=lambda: (j := d.job("train-helm"))["phase"] in ("Succeeded", "Failed") and j,
                   timeout=300, interval=2)
    logs = d.api("GET", f"/user/{USER}/paddle/api/jobs/train-helm/logs").text
    assert job["phase"] == "Succeeded", f"{job}\n{logs[-3000:]}"
    print(f"2-worker job: {time.monotonic() - t0:.1f}s")
    assert "[worker-0] rank 0: all_reduce check ok: sum=3 over 2 workers" in logs, logs[-3000:]
    assert "[worker-1] rank 1: done" in logs
    pods = d.get("pods", "-n", USER_NS, "-l", "paddlecloud.io/job=train-helm")["items"]
    assert {p["spec"]["nodeName"] for p in pods} == {d.cluster.real_node_name} and len(pods) == 2


def test_an_admin_changes_the_users_quota_and_the_resourcequota_follows(deployment):
    d = deployment
    assert USER in d.tokens, "the spawn step failed"
    d.login(ADMIN)
    site = yaml.safe_load(d.get("configmap", "-n", NS, "hub-settings")["data"]["values.yaml"])["default_quota"]
    before = d.get("resourcequota", "-n", USER_NS, "paddlecloud-quota")["spec"]["hard"]
    assert before["requests.cpu"] == site["cpu"]  # the chart's settings.default_quota
    page = d.sessions[ADMIN].get(f"{d.url}/services/quota/", timeout=60)
    assert page.status_code == 200 and "quota" in page.text.lower()
    # What the page shows before any save: the chart's default applies to everyone, and says so.
    shown = d.api("GET", "/services/quota/api/quotas", user=ADMIN).json()
    assert {k: v for k, v in shown["site_default"].items() if v is not None} == site, shown["site_default"]
    (alice,) = [u for u in shown["users"] if u["user"] == USER]
    assert alice["limits"] == site and set(alice["sources"].values()) == {"site"}, alice

    # Saving one field of one user keeps the site default for that user's other fields and for
    # everyone else (issue 28: the first save used to drop it for everyone).
    response = d.api("PUT", f"/services/quota/api/quotas/users/{USER}", user=ADMIN, json={"gpus": 1})
    assert response.status_code == 200 and not response.json().get("sync_errors"), response.text
    hard = d.get("resourcequota", "-n", USER_NS, "paddlecloud-quota")["spec"]["hard"]
    assert (hard["requests.nvidia.com/gpu"], hard["requests.cpu"], hard["requests.memory"], hard["pods"]) == \
        ("1", site["cpu"], site["memory"], str(site["pods"])), hard
    other = d.api("GET", f"/services/quota/api/quotas/users/{ADMIN}", user=ADMIN).json()
    assert other["limits"] == site, other
    response = d.api("PUT", f"/services/quota/api/quotas/users/{USER}", user=ADMIN,
                     json={"cpu": "6", "memory": "12Gi", "gpus": 1})
    assert response.status_code == 200, response.text
    assert not response.json().get("sync_errors"), response.json()
    hard = d.get("resourcequota", "-n", USER_NS, "paddlecloud-quota")["spec"]["hard"]
    assert (hard["requests.cpu"], hard["requests.memory"], hard["requests.nvidia.com/gpu"]) == ("6", "12Gi", "1")
    # The settings live in the hub's namespace, where a reinstall finds them.
    stored = d.get("configmap", "-n", NS, "paddlecloud-quotas")["data"]["quotas.json"]
    assert json.loads(stored)["users"][USER]["limits"]["cpu"] == "6"
    # A user may not.
    refused = d.api("PUT", f"/services/quota/api/quotas/users/{USER}", json={"cpu": "64"})
    assert refused.status_code == 403
    # Nor may a token of the admin's that lacks the quota admin scope (any admin-owned token could).
    narrow = d.new_token(ADMIN, d.sessions[ADMIN], scopes=["read:users", "access:services!service=quota"])
    for method, path in (("PUT", f"/users/{USER}"), ("PUT", "/default"), ("GET", "")):
        refused = requests.request(method, f"{d.url}/services/quota/api/quotas{path}", timeout=60,
                                   headers={"Authorization": f"token {narrow}"},
                                   json={"cpu": "64"} if method == "PUT" else None)
        assert refused.status_code == 403, (method, path, refused.status_code, refused.text)
    assert d.get("configmap", "-n", NS, "paddlecloud-quotas")["data"]["quotas.json"] == stored


# What the hub's service account must be able to do (the code does each of these).
HUB_MAY = [
    ("create", "namespaces", None), ("get", "namespaces", None), ("patch", "namespaces", None),
    *((verb, "pods", USER_NS) for verb in ("get", "list", "watch", "create", "delete", "deletecollection")),
    ("list", "pods", "*"), ("watch", "pods", "*"), ("list", "events", "*"), ("watch", "events", "*"),
    *((verb, "persistentvolumeclaims", USER_NS) for verb in ("get", "create", "delete")),
    ("create", "serviceaccounts", USER_NS), ("create", "limitranges", USER_NS), ("update", "limitranges", USER_NS),
    *((verb, "resourcequotas", USER_NS) for verb in ("get", "list", "watch", "create", "patch", "delete")),
    ("delete", "services", USER_NS), ("list", "nodes", None), ("watch", "nodes", None),
    *((verb, "jobs.batch", USER_NS) for verb in ("get", "list", "patch")),
    ("list", "jobs.batch", "*"), ("list", "resourcequotas", "*"), ("watch", "resourcequotas", "*"),  # the quota pages, every user at once
    ("create", "rolebindings.rbac.authorization.k8s.io", USER_NS),
    ("bind", f"clusterroles.rbac.authorization.k8s.io/{RELEASE}-notebook", None),
    ("create", "networkpolicies.networking.k8s.io", USER_NS), ("update", "networkpolicies.networking.k8s.io", USER_NS),
    ("get", "configmaps/paddlecloud-quotas", NS), ("update", "configmaps/paddlecloud-quotas", NS),
    ("create", "configmaps", NS),
]
# What it must not: other namespaces' (or its own) Secrets, nodes, cluster-wide RBAC, escalation.
HUB_MAY_NOT = [
    ("get", "secrets", USER_NS), ("list", "secrets", "*"), ("get", "secrets", "kube-system"), ("get", "secrets", NS),
    ("update", "nodes", None), ("patch", "nodes", None), ("delete", "nodes", None), ("create", "nodes", None),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("create", "clusterroles.rbac.authorization.k8s.io", None),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None), ("escalate", "roles.rbac.authorization.k8s.io", USER_NS),
    ("bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin", None),
    ("bind", "clusterroles.rbac.authorization.k8s.io/admin", None),
    ("create", "roles.rbac.authorization.k8s.io", USER_NS),
    ("impersonate", "serviceaccounts", USER_NS), ("impersonate", "users", None),
    ("create", "pods#exec", USER_NS), ("create", "serviceaccounts#token", USER_NS),
    ("delete", "namespaces", None), ("update", "namespaces", None),
    ("get", "configmaps/other", NS), ("update", "configmaps/other", NS), ("get", "configmaps", USER_NS),
    ("create", "persistentvolumes", None),
    ("create", "validatingadmissionpolicies.admissionregistration.k8s.io", None),
    ("delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io", None),
    ("create", "jobs.batch", USER_NS), ("create", "services", USER_NS),
    ("update", "resourcequotas", USER_NS),  # patched, never replaced
]


def hub_may(d: Deployment, questions) -> list[bool]:
    """What `kubectl auth can-i VERB RESOURCE --as=<the hub>` answers to each (verb, resource,
    namespace) question, one request each through one client: a SelfSubjectAccessReview made as
    the hub's service account (impersonated). RESOURCE is "kind.group", "kind.group/name" for
    one object or "kind#sub" for a subresource; namespace "*" is every namespace, None a
    cluster-wide question."""
    import kubernetes

    def allowed(api, verb: str, resource: str, namespace: str | None) -> bool:
        kind, _, subresource = resource.partition("#")
        kind, _, name = kind.partition("/")
        kind, _, group = kind.partition(".")
        attributes = {"verb": verb, "resource": kind, "group": group, "subresource": subresource, "name": name,
                      "namespace": "" if namespace in (None, "*") else namespace}
        review = api.create_self_subject_access_review(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
             "spec": {"resourceAttributes": attributes}})
        return bool(review.status.allowed)

    with kubernetes.config.new_client_from_config(config_file=d.kubeconfig) as client:
        client.set_default_header("Impersonate-User", HUB_SA)
        api = kubernetes.client.AuthorizationV1Api(client)
        return [allowed(api, *question) for question in questions]


def can_i(d: Deployment, verb: str, resource: str, namespace: str | None) -> bool:
    """hub_may for one question."""
    return hub_may(d, [(verb, resource, namespace)])[0]


def test_the_hub_service_account_may_do_what_the_code_does_and_nothing_it_must_not(deployment):
    d = deployment
    assert d.url, "the install step failed"
    answers = hub_may(d, [*HUB_MAY, *HUB_MAY_NOT])  # one client for both lists
    missing = [f"{v} {r} -n {n}" for (v, r, n), yes in zip(HUB_MAY, answers) if not yes]
    extra = [f"{v} {r} -n {n}" for (v, r, n), yes in zip(HUB_MAY_NOT, answers[len(HUB_MAY):]) if yes]
    assert not missing and not extra, f"denied but needed: {missing}; allowed but must not be: {extra}"
    # Not only what RBAC says: the API server refuses a binding to more than the notebook's role...
    as_hub = ("--as", HUB_SA)
    refused = d.k("create", "rolebinding", "grab", "--clusterrole=cluster-admin", f"--serviceaccount={USER_NS}:default",
                  "-n", USER_NS, "--dry-run=server", *as_hub, check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    allowed = d.k("create", "rolebinding", "ok", f"--clusterrole={RELEASE}-notebook",
                  f"--serviceaccount={USER_NS}:default", "-n", USER_NS, "--dry-run=server", *as_hub, check=False)
    assert allowed.returncode == 0, allowed.stderr
    # ...and the spawner bound the chart's ClusterRole instead of making a Role.
    binding = d.get("rolebinding", "-n", USER_NS, "paddlecloud-notebook")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": f"{RELEASE}-notebook"}
    assert not d.get("roles", "-n", USER_NS)["items"]
    assert can_i(d, "create", "jobs.batch", USER_NS) is False  # the hub itself does not hold the notebook's rules
    notebook_sa = f"system:serviceaccount:{USER_NS}:paddlecloud-notebook"
    assert d.k("auth", "can-i", "create", "jobs.batch", "-n", USER_NS, f"--as={notebook_sa}",
               check=False).stdout.strip() == "yes"
    assert d.k("auth", "can-i", "create", "jobs.batch", "-n", NS, f"--as={notebook_sa}",
               check=False).stdout.strip() == "no"
    policies = {p["metadata"]["name"] for p in d.get("networkpolicies", "-n", USER_NS)["items"]}
    assert policies == {"paddlecloud-notebook-ingress", "paddlecloud-pods-ingress", "paddlecloud-egress"}


# What RBAC grants the hub cluster-wide (user namespaces are made at spawn, RBAC cannot name
# them) and the chart's admission policy (paddle_ext.policies.hub_policy) refuses outside them:
# each is tried for real as the hub, as a server-side dry run (admission runs, nothing is kept).
HUB_OUTSIDE_USER_NAMESPACES = [
    ("run", "grab", "--image=registry.k8s.io/pause:3.10", "-n", "kube-system"),
    ("create", "serviceaccount", "grab", "-n", "kube-system"),
    ("create", "rolebinding", "grab", f"--clusterrole={RELEASE}-notebook", "--serviceaccount=kube-system:default",
     "-n", "kube-system"),
    ("create", "configmap", "grab", "-n", NS),  # its own namespace: the quota ConfigMap only
]


def test_the_hub_is_refused_outside_user_namespaces_though_rbac_allows_it(deployment):
    d = deployment
    assert d.url, "the install step failed"
    as_hub = ("--as", HUB_SA, "--dry-run=server")
    assert can_i(d, "create", "pods", "kube-system") is True  # RBAC alone would let it
    for command in HUB_OUTSIDE_USER_NAMESPACES:
        proc = d.k(*command, *as_hub, check=False)
        assert proc.returncode != 0, f"kubectl {' '.join(command)} as the hub was allowed: {proc.stdout}"
        assert "The PaddleCloud hub acts only in its users' namespaces" in proc.stderr, proc.stderr
    # Namespaces: only ours, only under Pod Security restricted, never relabelled into ours.
    made_ours = ("label", "namespace", "kube-system", "app.kubernetes.io/managed-by=paddlecloud",
                 "paddlecloud.io/user=mallory")
    unlabelled = ("create", "namespace", "grab")
    for command in (made_ours, unlabelled):
        proc = d.k(*command, *as_hub, check=False)
        assert proc.returncode != 0 and "The PaddleCloud hub may only make and change its users' namespaces" \
            in proc.stderr, proc.stderr
    privileged = d.k("label", "namespace", USER_NS, "--overwrite", "pod-security.kubernetes.io/enforce=privileged",
                     *as_hub, check=False)
    assert privileged.returncode != 0 and "pod-security.kubernetes.io/enforce=restricted" in privileged.stderr
    # What the hub does in a user namespace still passes.
    allowed = d.k("create", "serviceaccount", "probe", "-n", USER_NS, *as_hub, check=False)
    assert allowed.returncode == 0, allowed.stderr


def test_upgrade_rolls_the_hub_keeps_its_secrets_and_running_work_keeps_running(deployment):
    d = deployment
    assert USER in d.tokens, "the spawn step failed"
    submit = d.api("POST", f"/user/{USER}/paddle/api/jobs", json={
        "name": "keeps-running", "command": ["python", "sleeper.py"], "workers": 1, "cpu": "250m",
        "memory": "512Mi"})
    assert submit.status_code == 201, submit.text
    wait_for(what="the long job to run", check=lambda: d.job("keeps-running")["phase"] == "Running", timeout=180, interval=2)
    before = {
        "hub": d.pod(NS, "app.kubernetes.io/component=hub")["metadata"]["uid"],
        "proxy": d.pod(NS, "app.kubernetes.io/component=proxy")["metadata"]["uid"],
        "notebook": d.pod(USER_NS, "component=singleuser-server")["metadata"]["uid"],
        "worker": d.pod(USER_NS, "paddlecloud.io/job=keeps-running")["metadata"]["uid"],
    }
    secret = secret_data(d.get("secret", "-n", NS, "hub"))
    t0 = time.monotonic()
    proc = d.helm("upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(d.values),
                  "--set", "settings.cull_idle_seconds=7200", "--wait", "--timeout", "300s", check=False)
    assert proc.returncode == 0, proc.stderr + d.diagnostics()
    print(f"helm upgrade --wait: {time.monotonic() - t0:.1f}s")
    hub = d.pod(NS, "app.kubernetes.io/component=hub")
    assert hub["metadata"]["uid"] != before["hub"], "the hub did not roll"
    settings = yaml.safe_load(d.get("configmap", "-n", NS, "hub-settings")["data"]["values.yaml"])
    assert settings["cull_idle_seconds"] == 7200
    after = secret_data(d.get("secret", "-n", NS, "hub"))
    assert (after["proxy.token"], after["hub.cookie-secret"]) == (secret["proxy.token"], secret["hub.cookie-secret"])
    assert d.pod(NS, "app.kubernetes.io/component=proxy")["metadata"]["uid"] == before["proxy"]
    assert d.pod(USER_NS, "component=singleuser-server")["metadata"]["uid"] == before["notebook"]
    assert d.pod(USER_NS, "paddlecloud.io/job=keeps-running")["metadata"]["uid"] == before["worker"]
    # The browser session of before still works: same cookie secret, same database.
    me = d.sessions[USER].get(f"{d.url}/hub/api/user", timeout=60,
                              headers={"X-XSRFToken": d.sessions[USER].cookies.get("_xsrf", path="/hub/") or ""})
    assert me.status_code == 200 and me.json()["name"] == USER, me.text
    # The notebook answers through the proxy again (the new hub re-checked the routes) and the job runs.
    job = wait_for(what="the notebook through the proxy", check=lambda: (r := d.api(
        "GET", f"/user/{USER}/paddle/api/jobs/keeps-running")).status_code == 200 and r.json(), timeout=120)
    assert job["phase"] == "Running"
    wait_for(what="the job's newest lines to be ticks", check=lambda: "tick" in d.api(
        "GET", f"/user/{USER}/paddle/api/jobs/keeps-running/logs", params={"tail": 3}).text, timeout=120, interval=2)
    # An admin cancels it through the quota service (its rights on users' jobs, pods and Services).
    cancel = d.api("DELETE", f"/services/quota/api/jobs/{USER}/keeps-running", user=ADMIN)
    assert cancel.status_code == 202 and cancel.json()["phase"] == "Cancelled", cancel.text


@pytest.mark.timeout(900)  # a hub roll and a first spawn, each up to 300 s
def test_oidc_login_through_the_providers_form_on_the_real_node_spawns_a_notebook(deployment, tmp_path):
    """Issue 26's helm-tier item. The docs' OpenID Connect block, added to the try-values as
    docs/admin/logins.md says (`-f ... -f login-values.yaml`: the later file wins), upgraded into the
    release; the provider's three URLs (example.org in the block) are a real OpenID Connect
    provider (oidc-provider, tests/oidcutil.py) on the node's bridge address, which this test
    (the browser) and the hub's pod both reach, and the client secret is in a Secret the admin
    made (hub.secretEnv), not in values. Bob logs in through the provider's own form and gets a
    notebook on the node; his groups from the provider are his hub groups; alice's admin group
    makes her an admin; eve, in no allowed group, gets the page that says why."""
    d = deployment
    assert d.url, "the install step failed"
    if oidc_missing():
        skip_or_fail(f"OIDC login on the real node: {oidc_missing()}")
    login = docs_login_values("oidc")
    (secret_env,) = login["hub"]["secretEnv"]
    callback = f"{d.url}/hub/oauth_callback"
    provider = OIDCProvider(tmp_path / "provider", ACCOUNTS, callback, host=NODE_IP)
    try:
        provider.start()
        values = with_config(login, "GenericOAuthenticator", oauth_callback_url=callback, **provider.endpoints())
        login_values = d.workdir / "login-values.yaml"
        login_values.write_text(yaml.safe_dump(values))
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": secret_env["secretName"], "namespace": NS},
                  "stringData": {secret_env["key"]: provider.client_secret}}
        d.k("apply", "-f", "-", input=json.dumps(secret))  # on stdin: the secret is in no command line
        t0 = time.monotonic()
        proc = d.helm("upgrade", RELEASE, str(CHART), "-n", NS, "-f", str(d.values), "-f", str(login_values),
                      "--wait", "--timeout", "300s", check=False)
        assert proc.returncode == 0, proc.stderr + d.diagnostics()
        print(f"helm upgrade to OIDC --wait: {time.monotonic() - t0:.1f}s")
        assert 'Log in with "generic-oauth".' in proc.stdout and "members of vision, audio;" in proc.stdout, proc.stdout
        hub = d.pod(NS, "app.kubernetes.io/component=hub")["spec"]["containers"][0]
        assert {"name": secret_env["name"], "valueFrom": {"secretKeyRef": {
            "name": secret_env["secretName"], "key": secret_env["key"]}}} in hub["env"], hub["env"]

        # Bob: the hub's login link, the provider's own form, back to the hub (which fetched the
        # token and userinfo from the provider, from its pod, with the Secret's client secret).
        session, answer = login_through_provider(d.url, SSO_USER, ACCOUNTS[SSO_USER].password)
        assert answer.status_code == 200 and answer.url == f"{d.url}/hub/home", \
            (answer.url, answer.status_code, answer.text[:500], provider.log_tail(), d.diagnostics())
        d.keep(SSO_USER, session)
        bob = d.api("GET", f"/hub/api/users/{SSO_USER}", user=SSO_USER).json()
        assert sorted(bob["groups"]) == sorted(ACCOUNTS[SSO_USER].groups) and bob["admin"] is False, bob

        t0 = time.monotonic()
        response = d.api("POST", f"/hub/api/users/{SSO_USER}/server", user=SSO_USER)
        assert response.status_code in (201, 202), response.text
        d.wait_for_server(SSO_USER)
        print(f"{SSO_USER}'s notebook ready in {time.monotonic() - t0:.1f}s")
        notebook = d.pod(SSO_USER_NS, "component=singleuser-server")
        assert notebook["spec"]["nodeName"] == d.cluster.real_node_name
        listing = d.api("GET", f"/user/{SSO_USER}/api/contents", user=SSO_USER)
        assert listing.status_code == 200, listing.text
        assert "quickstart.ipynb" in {item["name"] for item in listing.json()["content"]}, listing.text

        # Alice's group hub-admins (settings.admin_groups) makes her an admin at this login.
        session, answer = login_through_provider(d.url, USER, ACCOUNTS[USER].password)
        assert answer.status_code == 200 and answer.url == f"{d.url}/hub/home", (answer.url, answer.text[:500])
        d.keep(USER, session)
        alice = d.api("GET", f"/hub/api/users/{USER}").json()
        assert alice["admin"] is True and sorted(alice["groups"]) == sorted(ACCOUNTS[USER].groups), alice

        # Eve signs in at the provider but is in none of the allowed groups: refused, with a page that says why.
        eve, answer = login_through_provider(d.url, "eve", ACCOUNTS["eve"].password)
        assert answer.status_code == 403 and answer.url.startswith(callback), (answer.url, answer.status_code)
        text = re.sub(r"\s+", " ", answer.text)
        assert "in none of the groups that may use this hub (audio, vision)" in text, text[:2000]
        assert eve.get(f"{d.url}/hub/api/user", timeout=60).status_code == 403
    finally:
        provider.stop()


def test_uninstall_keeps_user_namespaces_and_homes_as_the_readme_says(deployment):
    d = deployment
    assert d.url, "the install step failed"
    proc = d.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)
    assert proc.returncode == 0, proc.stderr
    for kind, name, namespace in (("deployment", "hub", NS), ("deployment", "proxy", NS), ("service", "proxy-public", NS),
                                  ("pvc", "hub-db", NS), ("secret", "hub", NS), ("configmap", "hub-settings", NS),
                                  ("clusterrole", f"{RELEASE}-hub", None), ("clusterrole", f"{RELEASE}-notebook", None),
                                  ("clusterrolebinding", f"{RELEASE}-hub", None),
                                  ("validatingadmissionpolicy", "paddlecloud-services-stay-inside", None)):
        where = ["-n", namespace] if namespace else []
        gone = d.k("get", kind, name, *where, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, f"{kind}/{name} is still there"
    # The database's volume went with its claim (reclaim policy Delete: the provisioner removes it).
    wait_for(what="the hub's database volume to be removed", check=lambda: not d.db_dir.exists(), timeout=120, interval=2)
    # Kept: the user's namespace with the home volume, the quota settings, the release's namespace.
    assert d.get("namespace", USER_NS)["status"]["phase"] == "Active"
    home = d.get("pvc", "-n", USER_NS, f"home-{USER}")
    assert home["status"]["phase"] == "Bound"
    home_dir = volume_dir(d.cluster, home)
    assert home_dir.is_dir()
    assert d.get("configmap", "-n", NS, "paddlecloud-quotas")
    assert d.get("namespace", NS)["status"]["phase"] == "Active"
    # Running notebooks are not stopped by an uninstall (docs/admin/deploy.md says to stop them first).
    assert d.get("pods", "-n", USER_NS, "-l", "component=singleuser-server")["items"]
    # The docs' (and NOTES.txt's) removal, word for word.
    assert "kubectl delete namespace -l app.kubernetes.io/managed-by=paddlecloud,paddlecloud.io/user" in d.install_output
    d.k("delete", "namespace", "-l", "app.kubernetes.io/managed-by=paddlecloud,paddlecloud.io/user", "--wait=true",
        "--timeout=120s")
    d.k("delete", "namespace", NS, "--wait=true", "--timeout=120s")
    assert d.k("get", "namespace", USER_NS, check=False).returncode != 0
    assert d.k("get", "namespace", NS, check=False).returncode != 0
    # local-path's reclaim policy is Delete: the home's directory goes with its claim.
    wait_for(what="the home volume to be removed", check=lambda: not home_dir.exists(), timeout=120, interval=2)
