"""A test run stopped with SIGTERM (`kill`, a CI job's timeout, `timeout(1)`) ends as Ctrl-C
does: KeyboardInterrupt, after which pytest still tears down every fixture. Without it the
process just died and what its fixtures had started in sessions of their own (a test cluster's
etcd, API server and Kueue, a hub, a notebook server) went on running with no one to stop it.

A pytest plugin: tests/conftest.py takes its hook; a run outside the suite loads it with
`-p stop_on_sigterm`."""

import signal


def stop_as_interrupted(signum, frame):
    raise KeyboardInterrupt(f"stopped by signal {signal.Signals(signum).name}")


def pytest_configure(config):
    signal.signal(signal.SIGTERM, stop_as_interrupted)
