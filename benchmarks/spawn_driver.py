"""One hub process' worth of concurrent notebook spawns, for benchmarks/spawn.py.

    spawn_driver.py --mode plain|ours|ours-no-datasets --users N --prefix P --hub-namespace NS --state-dir DIR

Loads hub_config/jupyterhub_config.py exactly as the hub does (traitlets), then starts N
spawners at once in one event loop, as the hub would for N users clicking Start together:
`ours` is the configured PaddleCloudSpawner (`ours-no-datasets`: with no datasets in
the site's settings, so no dataset claim), `plain` a KubeSpawner with the same
configuration (user namespaces, profile, home volume, security context) and none of our
additions. Each spawn runs KubeSpawner's own start() against the real API server and
returns once its pod runs on a KWOK node. Printed as JSON: per spawn the seconds to
running, the seconds KubeSpawner spent creating the namespace, and (ours) the seconds our
preparation took besides. Then every server is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from paddle_ext.constants import HUB_API_PORT  # noqa: E402


class MockUser:
    def __init__(self, name: str):
        self.name = name
        self.id = abs(hash(name)) % 100000
        self.url = f"/user/{name}/"
        self.groups = []


class MockHub:
    public_host = "127.0.0.1"
    url = f"http://127.0.0.1:{HUB_API_PORT}/hub/"
    base_url = "/hub/"
    api_url = f"http://127.0.0.1:{HUB_API_PORT}/hub/api"


# The spawner methods timed here, by name: what KubeSpawner does to make the user's
# namespace, and (ours) our override of it, which also prepares everything in it. Checked
# before use (`missing_methods`), so a rename fails the run with its name, not a stray AttributeError.
NAMESPACE_METHOD = "_ensure_namespace"
CREATE_POD_METHOD = "_make_create_pod_request"


def missing_methods(plain_cls, ours_cls) -> list[str]:
    """The timed methods the spawners no longer have (each `Class.method`): empty, or the
    driver measures nothing (tests/unit/test_bench_smoke.py asserts it is empty)."""
    missing = [f"{plain_cls.__name__}.{name}" for name in (NAMESPACE_METHOD, CREATE_POD_METHOD)
               if not callable(getattr(plain_cls, name, None))]
    if NAMESPACE_METHOD not in vars(ours_cls):
        missing.append(f"{ours_cls.__name__}.{NAMESPACE_METHOD} (our override)")
    return missing


def timed_method(cls, name: str, seconds: dict) -> None:
    """Wrap `cls.name` (a coroutine method) so each call's duration lands in `seconds[user]`."""
    plain = getattr(cls, name)

    async def timed(self, *args):
        t0 = time.monotonic()
        try:
            return await plain(self, *args)
        finally:
            seconds[self.user.name] = time.monotonic() - t0

    setattr(cls, name, timed)


def describe(exc: Exception) -> str:
    """One line: an API error's status and message, else the exception."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return f"HTTP {exc.status}: {json.loads(body).get('message')}"[:300]
        except (ValueError, AttributeError):
            pass
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def hub_config(prefix: str, hub_namespace: str, state_dir: str, datasets: bool = True):
    from traitlets.config.loader import PyFileConfigLoader

    os.environ.update({
        "PADDLECLOUD_AUTHENTICATOR_CLASS": "dummy",
        "PADDLECLOUD_ALLOWED_USERS": "admin",
        "PADDLECLOUD_HUB_STATE_DIR": state_dir,
        "PADDLECLOUD_HUB_NAMESPACE": hub_namespace,
        "PADDLECLOUD_USER_NAMESPACE_TEMPLATE": prefix + "-{username}",
        "PADDLECLOUD_HOME_STORAGE_CLASS": "home",
        "PADDLECLOUD_DATASETS": json.dumps([] if not datasets else [{
            "name": "imagenet", "mount_path": "/datasets/imagenet", "sub_path": "imagenet",
            "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}},
            "claim": {"accessModes": ["ReadOnlyMany"], "storageClassName": "datasets",
                      "resources": {"requests": {"storage": "1Gi"}}}}]),
        "PADDLECLOUD_DEFAULT_QUOTA": json.dumps({"gpus": 2, "cpu": "40", "memory": "200Gi", "pods": 20}),
    })
    path = os.path.join(REPO, "hub_config", "jupyterhub_config.py")
    return PyFileConfigLoader(os.path.basename(path), os.path.dirname(path)).load_config()


async def drive(mode: str, users: list[str], prefix: str, hub_namespace: str, state_dir: str) -> dict:
    config = hub_config(prefix, hub_namespace, state_dir, datasets=mode != "ours-no-datasets")
    from kubespawner import KubeSpawner

    from paddle_ext.hub.spawner import PaddleCloudSpawner

    ours = mode.startswith("ours")
    cls = PaddleCloudSpawner if ours else KubeSpawner
    missing = missing_methods(KubeSpawner, PaddleCloudSpawner)
    if missing:
        raise SystemExit(f"spawn driver: {', '.join(missing)} gone; update benchmarks/spawn_driver.py to what "
                         "the spawners do now")
    namespace_seconds: dict[str, float] = {}
    prepare_seconds: dict[str, float] = {}
    # KubeSpawner's own namespace creation, in both modes (ours calls it through super()).
    timed_method(KubeSpawner, NAMESPACE_METHOD, namespace_seconds)
    if ours:  # our override: the namespace, then everything we make in it, then the quota check
        timed_method(PaddleCloudSpawner, NAMESPACE_METHOD, prepare_seconds)

    pod_created: dict[str, float] = {}
    plain_create_pod = getattr(KubeSpawner, CREATE_POD_METHOD)

    async def timed_create_pod(self, pod, request_timeout):
        try:
            return await plain_create_pod(self, pod, request_timeout)
        finally:
            pod_created.setdefault(self.user.name, time.monotonic())

    setattr(KubeSpawner, CREATE_POD_METHOD, timed_create_pod)

    spawners = {}
    for name in users:
        spawner = cls(config=config, user=MockUser(name), hub=MockHub(), _mock=True)
        spawner.api_token = "bench-token"
        spawner.user_options = {"profile": "paddle-cpu"}
        if mode == "plain":  # the notebook's own ServiceAccount and the dataset claims are our additions
            spawner.service_account = None
            spawner.volumes = [v for v in spawner.volumes if not v["name"].startswith("dataset-")]
            spawner.volume_mounts = [m for m in spawner.volume_mounts if not m["name"].startswith("dataset-")]
        spawners[name] = spawner

    async def one(name):
        t0 = time.monotonic()
        try:
            await spawners[name].start()
            return {"user": name, "t0": t0, "seconds": time.monotonic() - t0, "error": None}
        except Exception as exc:  # noqa: BLE001 (reported per spawn)
            return {"user": name, "t0": t0, "seconds": time.monotonic() - t0, "error": describe(exc)}

    t0 = time.monotonic()
    results = await asyncio.gather(*(one(name) for name in users))
    wall = time.monotonic() - t0
    for result in results:
        result["namespace_seconds"] = namespace_seconds.get(result["user"])
        created = pod_created.get(result["user"])
        result["pod_created_seconds"] = None if created is None else created - result["t0"]
        result["namespace"] = spawners[result["user"]].namespace
        if ours and result["user"] in prepare_seconds:
            result["hook_seconds"] = prepare_seconds[result["user"]] - namespace_seconds.get(result["user"], 0.0)
    await asyncio.gather(*(spawner.stop(now=True) for spawner in spawners.values()), return_exceptions=True)
    return {"mode": mode, "wall": wall, "spawns": results}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["plain", "ours", "ours-no-datasets"], required=True)
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--hub-namespace", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    users = [f"u{i:03d}" for i in range(args.users)]
    result = asyncio.run(drive(args.mode, users, args.prefix, args.hub_namespace, args.state_dir))
    print(json.dumps(result))
    os._exit(0)  # the reflectors' watch threads would keep the process alive


if __name__ == "__main__":
    sys.exit(main())
