#!/usr/bin/env bash
# Runs two commands side by side: MAIN in the foreground, its output live, and SIDE in the
# background, its output kept in LOG and printed whole once both have ended. make test-cluster
# uses it to run the cluster tier's two parts (tests/cluster/conftest.py) at once.
# Exit status: MAIN's when it failed, else SIDE's. Stopping this script stops both.
#   tools/alongside.sh LOG 'SIDE COMMAND' MAIN COMMAND...
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 LOG 'SIDE COMMAND' MAIN COMMAND..." >&2
  exit 2
fi
log="$1" side="$2"
shift 2
mkdir -p "$(dirname "$log")"
echo "alongside: '$side' runs in the background, its output in $log (printed when it ends)"
. "$(dirname "$0")/background.sh"
start_background "$log" bash -c "$side"
"$@"
main_status=$?
wait_background
side_status=$?
echo
echo "==== alongside: the output of '$side' (exit status $side_status), kept in $log ===="
cat "$log"
echo "==== alongside: end of '$side' ===="
if [ "$main_status" -ne 0 ]; then exit "$main_status"; fi
exit "$side_status"
