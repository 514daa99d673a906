# Sourced by scripts that run a command in the background while they run another in the
# foreground (tools/alongside.sh, tools/k8s/prebuild.sh).
#   start_background LOG COMMAND...  starts COMMAND in a session of its own, its output in LOG,
#                                    and stops it if this script is stopped (INT, TERM)
#   stop_background                  stops it and everything it started, and waits for it
#   wait_background                  waits for it to end; returns its exit status
# A session of its own because an `&` child of a script is no process group leader, so setsid
# does not fork and $! is the session: stopping its group stops everything it started (a
# `go build`, a pytest session and its clusters), which share none of the foreground's signals.

start_background() {
  local log="$1"
  shift
  setsid "$@" >"$log" 2>&1 </dev/null &
  background_pid=$!
  trap 'stop_background; exit 130' INT
  trap 'stop_background; exit 143' TERM
}

stop_background() {
  kill -TERM -- "-$background_pid" 2>/dev/null
  wait "$background_pid" 2>/dev/null
}

wait_background() {
  wait "$background_pid"
}
