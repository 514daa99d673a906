#!/usr/bin/env bash
# Build (or reuse) the test control-plane binaries into ~/.cache/paddlecloud/k8s-<key>/bin.
# Usage: tools/k8s/build.sh            build if missing, print the bin dir
#        tools/k8s/build.sh --print    only print the bin dir
# Binaries are built one at a time (each link needs ~2 GiB RSS).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

ver() { sed -n "s/^$1=//p" "$HERE/VERSIONS"; }
K8S="$(ver KUBERNETES)"; ETCD="$(ver ETCD)"; KWOK="$(ver KWOK)"; HELM="$(ver HELM)"
KEY="${K8S}-$(sha1sum "$HERE/VERSIONS" | cut -c1-10)"
CACHE_ROOT="${PADDLECLOUD_CACHE:-$HOME/.cache/paddlecloud}"
DEST="$CACHE_ROOT/k8s-$KEY"
BIN="$DEST/bin"
if [ "${1:-}" = "--print" ]; then echo "$BIN"; exit 0; fi

NAMES="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm"
if [ -f "$DEST/.complete" ]; then echo "$BIN"; exit 0; fi

mkdir -p "$BIN"
exec 9>"$DEST/.lock"
flock 9  # one build per key at a time; a second caller waits, then reuses
if [ -f "$DEST/.complete" ]; then echo "$BIN"; exit 0; fi
start=$(date +%s)
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

build() {  # build <module dir> <output name> <package> <ldflags>
  local dir="$1" name="$2" pkg="$3" flags="$4"
  if [ -x "$BIN/$name" ]; then echo "== $name: cached"; return; fi
  local t0; t0=$(date +%s)
  echo "== building $name ($pkg)"
  (cd "$HERE/$dir" && go build -trimpath -ldflags "$flags" -o "$BIN/$name.tmp" "$pkg")
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "== $name built in $(( $(date +%s) - t0 ))s"
}

build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK"
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags"
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kube_ldflags"
build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kube_ldflags"
build kube kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags"
build helm helm helm.sh/helm/v3/cmd/helm "$helm_ldflags"

# KWOK's stage and CRD manifests ship in its module source; keep a copy next to the binaries.
KWOK_SRC="$(cd "$HERE/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
mkdir -p "$DEST/kwok"
cp -r "$KWOK_SRC/kustomize/stage" "$KWOK_SRC/kustomize/crd" "$DEST/kwok/"
chmod -R u+w "$DEST/kwok"
for n in $NAMES; do test -x "$BIN/$n" || { echo "missing $n" >&2; exit 1; }; done
echo "$(( $(date +%s) - start ))" > "$DEST/.build-seconds"
touch "$DEST/.complete"
echo "built in $(( $(date +%s) - start ))s; $(du -sh "$DEST" | cut -f1) in $DEST" >&2
echo "$BIN"
