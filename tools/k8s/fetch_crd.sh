#!/usr/bin/env bash
# Prints the path of Kubeflow training-operator's PaddleJob CRD, fetched once from the
# Go module proxy (the CRD ships in the module) and cached outside the repo.
#   tools/k8s/fetch_crd.sh            -> ~/.cache/paddlecloud/crds/training-operator-v1.9.3/kubeflow.org_paddlejobs.yaml
set -euo pipefail
VERSION="${TRAINING_OPERATOR_VERSION:-v1.9.3}"
DEST="${PADDLECLOUD_CACHE:-$HOME/.cache/paddlecloud}/crds/training-operator-$VERSION"
FILE="$DEST/kubeflow.org_paddlejobs.yaml"
if [ ! -s "$FILE" ]; then
  mkdir -p "$DEST"
  dir=$(cd "$(mktemp -d)" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json \
        "github.com/kubeflow/training-operator@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  cp "$dir/manifests/base/crds/kubeflow.org_paddlejobs.yaml" "$FILE.tmp"
  mv "$FILE.tmp" "$FILE"
fi
echo "$FILE"
