"""Build the container images of images/*/Dockerfile with buildah, without any registry.

    python3 tools/k8s/images.py build     # `make images` (root): build what changed
    python3 tools/k8s/images.py list      # the image references and their cache keys

The base every Dockerfile starts from, docker.io/library/python:3.11-slim-bookworm, is a
local Debian bookworm made with debootstrap (mirror taken from this machine's apt
sources). Builds run `buildah bud --layers --pull-never --network host`, with the
machine's CA bundle and a pip.conf/npmrc pointing at it mounted in, so pip and npm work
behind a TLS-inspecting egress proxy. Each image is cached by a key over its Dockerfile,
build args, every file it COPYs and its base image's key; the key is stored as the label
io.paddlecloud.key, so a warm run rebuilds nothing. buildah's storage lives under
~/.cache/paddlecloud/buildah, so its layer cache survives across runs.

The real node (tools/k8s/node.py) imports the built images into its containerd; see
export_command() and built_images(). Stdlib only: runs with the system python3.
"""

import argparse
import fcntl
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    from .procutil import write_json
except ImportError:  # run as a script from tools/k8s
    from procutil import write_json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE_ROOT = os.environ.get("PADDLECLOUD_CACHE") or os.path.expanduser("~/.cache/paddlecloud")
BUILDAH_ROOT = os.path.join(CACHE_ROOT, "buildah", "storage")
# tmpfs, one per storage root: buildah's mount bookkeeping must not outlive a reboot
BUILDAH_RUNROOT = "/run/paddlecloud-buildah/" + hashlib.sha1(BUILDAH_ROOT.encode()).hexdigest()[:10]
MANIFEST = os.path.join(CACHE_ROOT, "images", "images.json")
KEY_LABEL = "io.paddlecloud.key"
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
IMAGES_REV = "1"  # bump to rebuild every image after changing how they are built
# What `make setup` builds from sources the image key already holds (labextension/src, its
# package.json and lock): left out of the key, since the panel's webpack build writes ids derived
# from the checkout's path into it, so every fresh clone (CI's) would rebuild the notebook image
# and the real node import it again, with nothing changed.
KEY_LEAVES_OUT = ("labextension/prebuilt/", "labextension/.build-stamp", "labextension/tsconfig.tsbuildinfo")

BASE_REF = "docker.io/library/python:3.11-slim-bookworm"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

PAUSE_REF = "docker.io/paddlecloud/pause:1.0"
WORKER_REF = "docker.io/paddlecloud/paddle-worker:3.3.1-cpu"
NOTEBOOK_REF = "docker.io/paddlecloud/notebook:3.3.1-cpu"
PROXY_REF = "docker.io/paddlecloud/configurable-http-proxy:5.3.0"
HUB_REF = "docker.io/paddlecloud/hub:0.1.0"

# In build order: each image's base is built before it. `base` is the ref its FROM resolves to.
DOCKERFILE_IMAGES = (
    {"name": "worker", "ref": WORKER_REF, "dockerfile": "images/worker/Dockerfile", "base": BASE_REF},
    {"name": "notebook", "ref": NOTEBOOK_REF, "dockerfile": "images/notebook/Dockerfile", "base": WORKER_REF},
    {"name": "proxy", "ref": PROXY_REF, "dockerfile": "images/proxy/Dockerfile", "base": BASE_REF},
    {"name": "hub", "ref": HUB_REF, "dockerfile": "images/hub/Dockerfile", "base": PROXY_REF},
)


class ImageError(RuntimeError):
    """An image could not be built or exported."""


def log(message):
    print(f"== {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- buildah


def buildah_cmd(*args):
    return ["buildah", "--root", BUILDAH_ROOT, "--runroot", BUILDAH_RUNROOT, "--storage-driver", "overlay", *args]


def buildah(*args, capture=True, check=True):
    cmd = buildah_cmd(*args)
    proc = subprocess.run(cmd, capture_output=capture, text=True)
    if check and proc.returncode != 0:
        detail = (proc.stderr or "").strip()[-2000:] if capture else "see the output above"
        raise ImageError(f"{' '.join(cmd[:8])} ... {' '.join(args[:3])} failed: {detail}")
    return proc


def image_label(ref, label=KEY_LABEL):
    """The label of a local buildah image, or None when the image does not exist."""
    proc = buildah("inspect", "--type", "image", ref, check=False)
    if proc.returncode != 0:
        return None
    return (json.loads(proc.stdout)["OCIv1"]["config"].get("Labels") or {}).get(label)


# ---------------------------------------------------------------- keys


def _sha1(*parts):
    h = hashlib.sha1()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def dockerignore_patterns(context=REPO):
    try:
        with open(os.path.join(context, ".dockerignore")) as fh:
            return [line.strip().rstrip("/") for line in fh if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return []


def _ignored(relpath, patterns):
    """Whether .dockerignore patterns exclude relpath (a pattern may match any parent dir)."""
    parts = relpath.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pat in patterns:
            if fnmatch.fnmatch(prefix, pat):
                return True
            if pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:]):
                return True
    return False


def copy_sources(dockerfile_text):
    """The context paths (files or dirs, globs allowed) named by COPY/ADD instructions."""
    text = re.sub(r"\\\n", " ", dockerfile_text)
    sources = []
    for line in text.splitlines():
        words = line.strip().split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue  # from another stage, not the context
        if args and args[0].startswith("["):
            args = json.loads(" ".join(args))
        sources += args[:-1]
    return sources


def context_files(sources, context=REPO):
    """Sorted relative paths of every file the sources name, minus .dockerignore'd ones."""
    patterns = dockerignore_patterns(context)
    files = set()
    for source in sources:
        matches = glob.glob(os.path.join(context, source))
        if not matches:
            raise ImageError(f"COPY source {source!r} does not exist in {context}")
        for match in matches:
            if os.path.isdir(match):
                for root, dirs, names in os.walk(match):
                    dirs.sort()
                    for name in names:
                        files.add(os.path.relpath(os.path.join(root, name), context))
            else:
                files.add(os.path.relpath(match, context))
    return sorted(f for f in files if not _ignored(f, patterns))


def dockerfile_key(image, base_key, context=REPO):
    """Cache key of one Dockerfile image: Dockerfile, build args, copied files (but the build
    outputs of KEY_LEAVES_OUT), base key."""
    with open(os.path.join(context, image["dockerfile"]), "rb") as fh:
        dockerfile = fh.read()
    parts = [IMAGES_REV, image["ref"], dockerfile, json.dumps(build_args(image), sort_keys=True), base_key]
    for rel in context_files(copy_sources(dockerfile.decode()), context):
        if rel.startswith(KEY_LEAVES_OUT):
            continue
        with open(os.path.join(context, rel), "rb") as fh:
            parts += [rel, hashlib.sha1(fh.read()).hexdigest()]
    return _sha1(*parts)


def base_key():
    return _sha1(IMAGES_REV, BASE_REF, BASE_SUITE, "minbase", *BASE_PACKAGES, json.dumps(BASE_ENV))


def pause_key(pause_binary):
    with open(pause_binary, "rb") as fh:
        return _sha1(IMAGES_REV, PAUSE_REF, fh.read())


def build_args(image):
    return {"BASE": image["base"]}


def planned_keys(pause_binary=None):
    """{ref: key} of every image, in build order (pause only when its binary is given)."""
    keys = {BASE_REF: base_key()}
    if pause_binary:
        keys[PAUSE_REF] = pause_key(pause_binary)
    for image in DOCKERFILE_IMAGES:
        keys[image["ref"]] = dockerfile_key(image, keys[image["base"]])
    return keys


# ---------------------------------------------------------------- the base: debootstrap


def debian_mirror(sources_paths=None):
    """The first Debian mirror URI this machine's apt sources use for the bookworm suite."""
    paths = sources_paths or (["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
                              + sorted(glob.glob("/etc/apt/sources.list.d/*.sources")))
    for path in paths:
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        if path.endswith(".sources"):  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split() and BASE_SUITE in fields.get("Suites", "").split():
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == BASE_SUITE:
                    return words[1]
    raise ImageError(f"no 'deb ... {BASE_SUITE}' entry in this machine's apt sources; "
                     "cannot choose a Debian mirror for debootstrap")


def build_base(key):
    mirror = debian_mirror()
    work = tempfile.mkdtemp(prefix="base-", dir=os.path.join(CACHE_ROOT, "images"))
    rootfs = os.path.join(work, "rootfs")
    try:
        log(f"debootstrap {BASE_SUITE} (minbase + {', '.join(BASE_PACKAGES)}) from {mirror}")
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                               BASE_SUITE, rootfs, mirror], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ImageError(f"debootstrap failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        container = buildah("from", "--pull-never", "scratch").stdout.strip()
        try:
            buildah("copy", container, rootfs, "/")
            config = []
            for name, value in BASE_ENV.items():
                config += ["--env", f"{name}={value}"]
            buildah("config", *config, "--cmd", "python3", "--label", f"{KEY_LABEL}={key}", container)
            buildah("commit", "--rm", container, BASE_REF)
        except BaseException:
            buildah("rm", container, check=False)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- pause and Dockerfile images


def build_pause(pause_binary, key):
    container = buildah("from", "--pull-never", "scratch").stdout.strip()
    try:
        buildah("copy", "--chmod", "0755", container, pause_binary, "/pause")
        buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535",
                "--label", f"{KEY_LABEL}={key}", container)
        buildah("commit", "--rm", container, PAUSE_REF)
    except BaseException:
        buildah("rm", container, check=False)
        raise


def _build_mounts(tmp):
    """--volume flags that let pip and npm inside a build trust this machine's CA bundle."""
    if not os.path.exists(HOST_CA):
        return []
    pip_conf = os.path.join(tmp, "pip.conf")
    with open(pip_conf, "w") as fh:
        fh.write("[global]\ncert = /run/host-ca.crt\n")
    npmrc = os.path.join(tmp, "npmrc")
    with open(npmrc, "w") as fh:
        fh.write("cafile=/run/host-ca.crt\n")
    return ["--volume", f"{HOST_CA}:/run/host-ca.crt:ro", "--volume", f"{pip_conf}:/etc/pip.conf:ro",
            "--volume", f"{npmrc}:/root/.npmrc:ro"]


def build_dockerfile_image(image, key):
    args = []
    for name, value in build_args(image).items():
        args += ["--build-arg", f"{name}={value}"]
    with tempfile.TemporaryDirectory() as tmp:
        proc = buildah("bud", "--layers", "--pull-never", "--network", "host",
                       *_build_mounts(tmp), *args, "--label", f"{KEY_LABEL}={key}",
                       "-f", os.path.join(REPO, image["dockerfile"]), "-t", image["ref"], REPO,
                       capture=False, check=False)
    if proc.returncode != 0:
        raise ImageError(f"building {image['ref']} from {image['dockerfile']} failed (output above)")


# ---------------------------------------------------------------- build all


def build_all(pause_binary):
    """Build every image whose key changed; write the manifest; return {ref: key}."""
    require_root("make images")
    os.makedirs(os.path.dirname(MANIFEST), exist_ok=True)
    with open(os.path.join(os.path.dirname(MANIFEST), "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a second caller then finds all cached
        return _build_all(pause_binary)


def _build_all(pause_binary):
    keys = planned_keys(pause_binary)
    steps = {BASE_REF: lambda k: build_base(k), PAUSE_REF: lambda k: build_pause(pause_binary, k)}
    for image in DOCKERFILE_IMAGES:
        steps[image["ref"]] = lambda k, image=image: build_dockerfile_image(image, k)
    for ref, key in keys.items():
        if image_label(ref) == key:
            log(f"{ref}: cached")
            continue
        t0 = time.monotonic()
        log(f"building {ref}")
        steps[ref](key)
        if image_label(ref) != key:
            raise ImageError(f"{ref} was built but does not carry {KEY_LABEL}={key}")
        log(f"{ref} built in {time.monotonic() - t0:.0f}s")
    manifest = {ref: {"key": key} for ref, key in keys.items() if ref != BASE_REF}
    write_json(MANIFEST, manifest)
    return keys


def built_images():
    """{ref: key} of the images `make images` built last (the node imports these)."""
    try:
        with open(MANIFEST) as fh:
            return {ref: info["key"] for ref, info in json.load(fh).items()}
    except FileNotFoundError:
        return {}


def stale_images(refs, pause_binary):
    """Those of `refs` not built from this tree: missing, or built from other sources
    (another checkout, older code); `make images` rebuilds them."""
    built, planned = built_images(), planned_keys(pause_binary)
    return [ref for ref in refs if built.get(ref) != planned[ref]]


def export_command(ref):
    """argv that writes a built image as an (uncompressed) docker archive to stdout, for
    `ctr images import -`; piping it takes about half the time of a compressed OCI archive."""
    return buildah_cmd("push", "--quiet", ref, f"docker-archive:/dev/stdout:{ref}")


def require_root(what):
    if os.geteuid() != 0:
        raise ImageError(f"{what} needs root (buildah, debootstrap)")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build the images of images/ with buildah.")
    parser.add_argument("action", choices=["build", "list"])
    parser.add_argument("--bin-dir", help="the k8s bin dir holding `pause` (default: build.sh --print)")
    args = parser.parse_args(argv)
    bin_dir = args.bin_dir or subprocess.run([os.path.join(HERE, "build.sh"), "--print"], check=True,
                                             capture_output=True, text=True).stdout.strip()
    pause = os.path.join(bin_dir, "pause")
    if args.action == "list":
        for ref, key in planned_keys(pause if os.path.exists(pause) else None).items():
            print(f"{ref} {key}")
        return 0
    if not os.path.exists(pause):
        print(f"images: {pause} is missing; run `make k8s-bin` first", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    try:
        build_all(pause)
    except ImageError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    log(f"images ready in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
