"""Under pytest-xdist the files go out longest first, by the last run's record
(tests/file_schedule.py), and the controller records this run's."""

import json
import subprocess

from file_schedule import DURATIONS_FILE, longest_files_first, read_record
from serverutil import isolated_pytest

RECORD = {"test_isolated.py": 50.0, "test_c.py": 10.0}  # the last run's, as the test finds it
FILE_TEST = '''
def test_{name}():
    with open({log!r}, "a") as log:
        log.write("{name}\\n")
'''


def run_three_files(tmp_path, *args: str) -> tuple[list[str], dict]:
    """Three one-test files, test_b.py never timed; returns the order they ran in and the record."""
    log = tmp_path / "order.log"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / DURATIONS_FILE.name).write_text(json.dumps(RECORD))
    cmd, env = isolated_pytest(tmp_path, FILE_TEST.format(name="isolated", log=str(log)), "-p", "file_schedule", *args)
    for name in ("b", "c"):
        (tmp_path / f"test_{name}.py").write_text(FILE_TEST.format(name=name, log=str(log)))
    cmd[-1] = str(tmp_path)
    done = subprocess.run(cmd, cwd=tmp_path, env={**env, "PADDLECLOUD_CACHE": str(cache)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return log.read_text().split(), read_record(cache / DURATIONS_FILE.name)


def test_xdist_hands_out_the_untimed_file_then_the_longest_and_records_every_file(tmp_path):
    order, record = run_three_files(tmp_path, "-n", "1", "--dist", "loadfile", "--no-loadscope-reorder")
    assert order == ["b", "isolated", "c"]
    assert set(record) == {"test_b.py", "test_c.py", "test_isolated.py"}
    assert record["test_isolated.py"] != RECORD["test_isolated.py"]  # replaced by this run's


def test_one_process_keeps_the_collected_order_and_records_nothing(tmp_path):
    order, record = run_three_files(tmp_path)
    assert order == ["b", "c", "isolated"]  # pytest's own order: by path
    assert record == RECORD


class Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_each_files_tests_stay_together_in_their_order():
    items = [Item(n) for n in ("a.py::t2", "a.py::t1", "b.py::t1", "c.py::t3", "c.py::t1")]
    ordered = longest_files_first(items, {"a.py": 5.0, "c.py": 9.0})
    assert [i.nodeid for i in ordered] == ["b.py::t1", "c.py::t3", "c.py::t1", "a.py::t2", "a.py::t1"]


def test_an_unreadable_record_is_no_record(tmp_path):
    path = tmp_path / "durations.json"
    for text in ("{not json", "[1, 2]", '{"a.py": "slow", "b.py": 3}'):
        path.write_text(text)
        assert read_record(path) == ({"b.py": 3.0} if "b.py" in text else {})
    assert read_record(tmp_path / "missing.json") == {}
