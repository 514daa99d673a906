#!/usr/bin/env bash
# Runs a command (make test's tiers) while tools/k8s/build.sh builds the control plane's
# binaries in the background. On a cold machine that build is ~25 minutes of Go compiling
# that would otherwise begin only when the cluster tier does; started first, it overlaps
# setup and the quick tiers. build.sh holds a lock, so the cluster tier's own `make k8s-bin`
# waits for it and then finds every binary cached; on a warm machine it ends in seconds.
# Its output goes to $PADDLECLOUD_CACHE/prebuild.log; a build that failed in the background
# runs again in the foreground, where its error shows. The background build is stopped when
# the command ends, however it ends, and the command's exit status is kept.
#   tools/k8s/prebuild.sh COMMAND...
set -uo pipefail
if [ "${PADDLECLOUD_SKIP_CLUSTER:-}" = 1 ] || ! command -v go >/dev/null || ! command -v setsid >/dev/null; then
  exec "$@"
fi
cache="${PADDLECLOUD_CACHE:-$HOME/.cache/paddlecloud}"
mkdir -p "$cache"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../background.sh"
start_background "$cache/prebuild.log" "$here/build.sh"
"$@"
status=$?
stop_background
exit "$status"
