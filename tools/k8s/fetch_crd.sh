#!/usr/bin/env bash
# Prints the path of Kubeflow training-operator's PaddleJob CRD, fetched once from the
# Go module proxy (the CRD ships in the module) and cached outside the repo.
# tools/k8s/build.sh (make k8s-bin) runs it, so tests only ever read the cached copy; the test
# cluster installs it before Kueue starts (tools/k8s/kueue.py), which manages PaddleJobs too.
#   tools/k8s/fetch_crd.sh          -> ~/.cache/paddlecloud/crds/training-operator-<VERSION>/kubeflow.org_paddlejobs.yaml
#   tools/k8s/fetch_crd.sh --print  only print that path (fetch nothing; the file may be missing)
# The version is TRAINING_OPERATOR in tools/k8s/VERSIONS (env TRAINING_OPERATOR_VERSION overrides).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="${TRAINING_OPERATOR_VERSION:-$(sed -n 's/^TRAINING_OPERATOR=//p' "$HERE/VERSIONS")}"
DEST="${PADDLECLOUD_CACHE:-$HOME/.cache/paddlecloud}/crds/training-operator-$VERSION"
FILE="$DEST/kubeflow.org_paddlejobs.yaml"
if [ "${1:-}" = "--print" ]; then
  echo "$FILE"
  exit 0
fi
if [ ! -s "$FILE" ]; then
  mkdir -p "$DEST"
  dir=$(cd "$(mktemp -d)" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json \
        "github.com/kubeflow/training-operator@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  cp "$dir/manifests/base/crds/kubeflow.org_paddlejobs.yaml" "$FILE.tmp"
  mv "$FILE.tmp" "$FILE"
fi
echo "$FILE"
