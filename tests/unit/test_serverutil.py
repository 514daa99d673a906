"""The test helper that fails a tier on errors in a server's log must find real errors, and
only them (it can fail: a log with a crash in it)."""

from serverutil import tracebacks

CRASH = """[I 2026-11-30 14:26:17.050 JupyterHub app:1] Starting
Traceback (most recent call last):
  File "x.py", line 1, in <module>
[D 2026-11-30 14:26:17.052 JupyterHub user:1162] Stopping bob
    import missing
ModuleNotFoundError: No module named 'missing'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "y.py", line 2, in <module>
ValueError: the real error
[I 2026-11-30 14:26:18.000 JupyterHub app:1] Done
"""
INTERRUPTED = CRASH.replace("ValueError: the real error", "KeyboardInterrupt")


def test_a_crash_is_found_and_an_interrupted_start_is_not(tmp_path):
    log = tmp_path / "hub.log"
    log.write_text(CRASH)
    (found,) = tracebacks(log)
    assert found.splitlines()[-1] == "ValueError: the real error"
    log.write_text(INTERRUPTED)
    assert tracebacks(log) == []
    assert tracebacks(tmp_path / "absent.log") == []


def test_a_server_the_hub_interrupted_mid_import_is_not_an_error(tmp_path):
    log = tmp_path / "hub.log"
    log.write_text("[D 2026-11-30 14:51:04.602 JupyterHub spawner:2241] Interrupting 32151\n"
                   "Traceback (most recent call last):\n  File \"<frozen runpy>\", line 189, in _run_module\n"
                   "2026-11-30T14:51:04.603Z [ConfigProxy] warn: Terminated\n")
    assert tracebacks(log) == []
    log.write_text(log.read_text().replace("Interrupting 32151", "Starting 32151"))
    assert len(tracebacks(log)) == 1
