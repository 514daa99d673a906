#!/usr/bin/env bash
# Build (or reuse) the test cluster's binaries into ~/.cache/paddlecloud/k8s-<key>/bin:
# the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, KWOK, helm), the Kueue controller manager, the real node (kubelet, kube-proxy,
# CoreDNS, pause), the default StorageClass's local-path provisioner (tools/k8s/storage.py) and
# kube-router's NetworkPolicy controller (tools/k8s/netpol.py).
# Also copies Kueue's CRDs and webhook manifests from its module and fetches what the tests
# would otherwise download (Kubeflow's PaddleJob CRD).
# Usage: tools/k8s/build.sh            build what is missing, print the bin dir
#        tools/k8s/build.sh --print    only print the bin dir
# Each binary is cached on its own under ~/.cache/paddlecloud/bin/<name>-<version>-<key>,
# keyed by its version, package, link flags, BUILD_REV and its Go module's go.mod/go.sum (and
# the .go files of our own main packages: coredns, pause, kube-router);
# the bin dir is a set of hard links keyed by all of them. Binaries are built one at a
# time (each link needs ~2 GiB RSS).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

ver() { sed -n "s/^$1=//p" "$HERE/VERSIONS"; }
K8S="$(ver KUBERNETES)"; ETCD="$(ver ETCD)"; KWOK="$(ver KWOK)"; HELM="$(ver HELM)"
COREDNS="$(ver COREDNS)"; KUEUE="$(ver KUEUE)"; KUBE_ROUTER="$(ver KUBE_ROUTER)"; BUILD_REV="$(ver BUILD_REV)"; LOCAL_PATH="$(ver LOCAL_PATH_PROVISIONER)"
CACHE_ROOT="${PADDLECLOUD_CACHE:-$HOME/.cache/paddlecloud}"

minor="${K8S#v1.}"; minor="${minor%%.*}"
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
helm_minor="${HELM#v3.}"; helm_minor="${helm_minor%%.*}"
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"

# name | module dir under tools/k8s | package | version | link flags
BINARIES="\
etcd|etcd|go.etcd.io/etcd/server/v3|$ETCD|-s -w
kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|$KWOK|-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK
kube-apiserver|kube|k8s.io/kubernetes/cmd/kube-apiserver|$K8S|$kube_ldflags
kube-controller-manager|kube|k8s.io/kubernetes/cmd/kube-controller-manager|$K8S|$kube_ldflags
kube-scheduler|kube|k8s.io/kubernetes/cmd/kube-scheduler|$K8S|$kube_ldflags
kubectl|kube|k8s.io/kubernetes/cmd/kubectl|$K8S|$kube_ldflags
kubelet|kube|k8s.io/kubernetes/cmd/kubelet|$K8S|$kube_ldflags
kube-proxy|kube|k8s.io/kubernetes/cmd/kube-proxy|$K8S|$kube_ldflags
helm|helm|helm.sh/helm/v3/cmd/helm|$HELM|$helm_ldflags
coredns|coredns|paddlecloud.local/tools/k8s/coredns|$COREDNS|-s -w
pause|pause|paddlecloud.local/tools/k8s/pause|$BUILD_REV|-s -w
local-path-provisioner|local-path|github.com/rancher/local-path-provisioner|$LOCAL_PATH|-s -w -X main.VERSION=$LOCAL_PATH
kueue|kueue|sigs.k8s.io/kueue/cmd/kueue|$KUEUE|-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE
kube-router|kube-router|paddlecloud.local/tools/k8s/kube-router|$KUBE_ROUTER|-s -w"

binary_key() {  # binary_key <name> <dir> <pkg> <version> <ldflags> -> 12 hex digits
  { printf '%s\n' "$1" "$3" "$4" "$5" "rev=$BUILD_REV"; cat "$HERE/$2/go.mod"; cat "$HERE/$2/go.sum" 2>/dev/null || true
    cat "$HERE/$2"/*.go 2>/dev/null || true; } \
    | sha1sum | cut -c1-12
}

declare -A CACHED  # name -> path of its cached binary
all_keys=""
while IFS='|' read -r name dir pkg version flags; do
  key="$(binary_key "$name" "$dir" "$pkg" "$version" "$flags")"
  CACHED[$name]="$CACHE_ROOT/bin/$name-$version-$key"
  all_keys+="$name=$key;"
done <<< "$BINARIES"
DEST="$CACHE_ROOT/k8s-$K8S-$(printf '%s' "$all_keys$KWOK" | sha1sum | cut -c1-10)"
BIN="$DEST/bin"
if [ "${1:-}" = "--print" ]; then echo "$BIN"; exit 0; fi
if [ -f "$DEST/.complete" ]; then echo "$BIN"; exit 0; fi

mkdir -p "$CACHE_ROOT/bin" "$BIN"
exec 9>"$CACHE_ROOT/k8s-build.lock"
flock 9  # one build at a time on this machine; a second caller waits, then reuses
if [ -f "$DEST/.complete" ]; then echo "$BIN"; exit 0; fi
start=$(date +%s)

build() {  # build <name> <module dir> <package> <ldflags>
  local name="$1" dir="$2" pkg="$3" flags="$4" out="${CACHED[$1]}"
  if [ -x "$out" ]; then echo "== $name: cached" >&2; else
    local t0; t0=$(date +%s)
    echo "== building $name ($pkg)" >&2
    (cd "$HERE/$dir" && go build -trimpath -ldflags "$flags" -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
    echo "== $name built in $(( $(date +%s) - t0 ))s" >&2
  fi
  ln -f "$out" "$BIN/$name"
}

while IFS='|' read -r name dir pkg version flags; do
  build "$name" "$dir" "$pkg" "$flags"
done <<< "$BINARIES"

# KWOK's stage and CRD manifests ship in its module source; keep a copy next to the binaries.
KWOK_SRC="$(cd "$HERE/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
rm -rf "$DEST/kwok" && mkdir -p "$DEST/kwok"
cp -r "$KWOK_SRC/kustomize/stage" "$KWOK_SRC/kustomize/crd" "$DEST/kwok/"
chmod -R u+w "$DEST/kwok"
# Kueue's CRDs and webhook configurations ship in its module source too (tools/k8s/kueue.py).
KUEUE_SRC="$(cd "$HERE/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
rm -rf "$DEST/kueue" && mkdir -p "$DEST/kueue"
cp -r "$KUEUE_SRC/config/components/crd/bases" "$DEST/kueue/crd"
cp "$KUEUE_SRC/config/components/webhook/manifests.yaml" "$DEST/kueue/webhook.yaml"
chmod -R u+w "$DEST/kueue"
# Everything the tests need from the network is fetched here, never by a test.
"$HERE/fetch_crd.sh" >/dev/null
while IFS='|' read -r name _; do
  test -x "$BIN/$name" || { echo "missing $name" >&2; exit 1; }
done <<< "$BINARIES"
echo "$(( $(date +%s) - start ))" > "$DEST/.build-seconds"
touch "$DEST/.complete"
echo "built in $(( $(date +%s) - start ))s; $(du -sh "$CACHE_ROOT/bin" | cut -f1) in $CACHE_ROOT/bin" >&2
echo "$BIN"
