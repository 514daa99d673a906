"""The suite keeps its own timing rules (docs/development/tests.md, "How the tests stay honest"), checked by
pattern so that what was fixed cannot come back:

1. no assertion on elapsed wall-clock time: an `assert` whose condition reads a clock
   (`time.monotonic()`, `time.time()`, `perf_counter()`, `loop.time()`, ...) or a variable
   named like a duration (`elapsed`, `took`, `duration`, `t0`); an assert that compares with
   a deadline (`assert time.monotonic() < deadline`) is a wait failing, and allowed;
2. no fixed sleep as a check: in a test module (`test_*.py`), `time.sleep(` and
   `asyncio.sleep(` only inside a polling loop that FAILS at its deadline (below);
   `asyncio.sleep(0)` (a yield to the event loop, no wait) is allowed; helper modules
   (conftest.py, *util.py, *_helpers.py, ...) hold the shared waits and are exempt;
3. no `while True:` without a deadline, in any module: the loop must fail at its deadline;
4. in labextension/test, no clock and no timer: `Date.now(`, `performance.now(`, `hrtime`,
   `setTimeout(` (jest's fake timers are the way to test time there).

"A loop that fails at its deadline" is a `while` loop whose body has an `if` that tests a
deadline (a name containing "deadline", or a clock call) and raises or calls `pytest.fail`,
or an `assert` on a deadline, or a `while <deadline test>:` loop followed at once by a `raise`, `assert` or `pytest.fail`.
A loop that merely stops at its deadline and carries on is what rule 2/3 is for.

tests/local/scripts/ is not scanned: those are the programs the tests run as jobs (the
stand-in for users' training code); their sleeps and endless loops are the workload.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
LAB_TESTS = REPO / "labextension" / "test"
NOT_SCANNED = [TESTS / "local" / "scripts"]

CLOCKS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}
DURATION_NAME = re.compile(r"elapsed|took|duration|^t0$")
SLEEPS = {("time", "sleep"), ("asyncio", "sleep")}
LAB_TIMING = re.compile(r"Date\.now\(|performance\.now\(|hrtime|setTimeout\(")

# (path relative to the repo, rule, enclosing function): each with why it is allowed.
ALLOWED = {
    # A fake HTTP server's connection loop: it ends when the client closes the connection
    # (IncompleteReadError), it waits for nothing.
    ("tests/unit/test_kubeapi_http.py", "while-true", "_serve"),
    # Returns the jobs still running at its deadline; its one caller asserts that list is empty.
    ("tests/local/test_openapi_fuzz.py", "while-true", "wait_until_jobs_ended"),
    ("tests/local/test_openapi_fuzz.py", "sleep", "wait_until_jobs_ended"),
    # Fake servers and streams whose pauses are the workload (a slow chunked reply, slow
    # workers' logs), not a wait for something.
    ("tests/unit/test_kubeapi_http.py", "sleep", "reply"),
    ("tests/unit/test_log_chunks.py", "sleep", "chunks_of"),
    ("tests/unit/test_log_chunks.py", "sleep", "slow"),
}


def is_clock_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS)
        or (isinstance(node.func, ast.Name) and node.func.id in CLOCKS))


def mentions_deadline(node: ast.AST) -> bool:
    return any(is_clock_call(n) or (isinstance(n, ast.Name) and "deadline" in n.id.lower()) for n in ast.walk(node))


def fails(stmt: ast.AST) -> bool:
    """A statement that raises or fails the test (pytest.fail / fail / assert)."""
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Raise, ast.Assert)):
            return True
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Attribute) and f.attr == "fail") or (isinstance(f, ast.Name) and f.id == "fail"):
                return True
    return False


def own_nodes(node: ast.AST):
    """The nodes under `node`, not descending into nested functions or classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield child
        yield from own_nodes(child)


def fails_at_deadline(loop: ast.While, following: ast.stmt | None) -> bool:
    for n in own_nodes(loop):
        if isinstance(n, ast.If) and mentions_deadline(n.test) and any(fails(s) for s in n.body):
            return True
        if isinstance(n, ast.Assert) and mentions_deadline(n.test):
            return True
    if mentions_deadline(loop.test):
        if any(fails(s) for s in loop.orelse) or (following is not None and fails(following)):
            return True
    return False


def python_violations(path: Path, source: str) -> list[tuple[str, int, str]]:
    """(rule, line, enclosing function) for each break of rules 1-3 in one module."""
    tree = ast.parse(source)
    is_test_module = path.name.startswith("test_")
    found = []

    def visit(node, function, loops):
        """`loops`: the enclosing while-loops that fail at their deadline (True) or not (False)."""
        for field, value in ast.iter_fields(node):
            block = value if isinstance(value, list) else [value]
            for i, child in enumerate(block):
                if not isinstance(child, ast.AST):
                    continue
                following = block[i + 1] if field in ("body", "orelse", "finalbody") and i + 1 < len(block) else None
                name, inner = function, loops
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name, inner = child.name, ()
                elif isinstance(child, ast.Lambda):
                    inner = ()
                elif isinstance(child, ast.While):
                    ok = fails_at_deadline(child, following if isinstance(following, ast.stmt) else None)
                    if isinstance(child.test, ast.Constant) and child.test.value is True and not ok:
                        found.append(("while-true", child.lineno, function))
                    inner = (*loops, ok)
                elif isinstance(child, (ast.For, ast.AsyncFor)):
                    inner = (*loops, False)
                elif isinstance(child, ast.Assert) and not any(
                        isinstance(n, ast.Name) and "deadline" in n.id.lower() for n in ast.walk(child.test)):
                    if any(is_clock_call(n) or (isinstance(n, ast.Name) and DURATION_NAME.search(n.id))
                           for n in ast.walk(child.test)):
                        found.append(("elapsed-assert", child.lineno, function))
                elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                      and isinstance(child.func.value, ast.Name)
                      and (child.func.value.id, child.func.attr) in SLEEPS):
                    yields = (child.args and isinstance(child.args[0], ast.Constant) and child.args[0].value == 0)
                    if is_test_module and not yields and not (loops and loops[-1]):
                        found.append(("sleep", child.lineno, function))
                visit(child, name, inner)

    visit(tree, "<module>", ())
    return found


def lab_violations(source: str) -> list[tuple[str, int, str]]:
    return [("lab-timing", number, line.strip()) for number, line in enumerate(source.splitlines(), 1)
            if LAB_TIMING.search(line)]


def scanned_python() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if not any(p.is_relative_to(d) for d in NOT_SCANNED))


def test_the_suite_has_no_timing_assertion_fixed_sleep_or_endless_loop():
    found = []
    for path in scanned_python():
        rel = path.relative_to(REPO).as_posix()
        for rule, line, function in python_violations(path, path.read_text()):
            if (rel, rule, function) not in ALLOWED:
                found.append(f"{rel}:{line} ({function}): {rule}")
    for path in sorted(LAB_TESTS.glob("*.ts")):
        rel = path.relative_to(REPO).as_posix()
        found += [f"{rel}:{line}: {rule}: {text}" for rule, line, text in lab_violations(path.read_text())]
    assert found == [], "timing rules broken (see this module's docstring):\n" + "\n".join(found)


def test_every_allowance_is_still_needed():
    """An allowance whose loop is gone or fixed must go too, so the list stays short."""
    used = set()
    for path in scanned_python():
        rel = path.relative_to(REPO).as_posix()
        used |= {(rel, rule, function) for rule, _, function in python_violations(path, path.read_text())}
    assert ALLOWED - used == set()


# The patterns issue 22 removed, each of which the rules must still catch.
CAUGHT = {
    "elapsed-assert": [
        "def test_x():\n    t0 = time.monotonic()\n    run()\n    assert time.monotonic() - t0 < 60\n",
        "def test_x():\n    elapsed = time.monotonic() - start\n    assert elapsed < 60, 'slow'\n",
        "async def test_x(loop):\n    assert loop.time() - start < 0.5 and done\n",
    ],
    "sleep": [
        "async def test_x(jobs):\n    await asyncio.sleep(2)  # nothing admits it\n    assert queued()\n",
        # stops at its deadline and carries on: not a wait that fails
        "async def test_x():\n    deadline = time.monotonic() + 120\n"
        "    while 'tick' not in lines and time.monotonic() < deadline:\n        await asyncio.sleep(0.1)\n"
        "    evict()\n",
        "async def test_x():\n    for _ in range(100):\n        if done():\n            break\n"
        "        await asyncio.sleep(0.3)\n",
    ],
    "while-true": [
        "async def test_x():\n    while True:\n        free = count()\n        if count() == free:\n            break\n",
        "def helper():\n    deadline = time.monotonic() + 9\n    while True:\n        if done() or "
        "time.monotonic() > deadline:\n            return\n        time.sleep(1)\n",
    ],
}

PASSES = [
    # the shared wait_for's shape
    "def wait_for(check, timeout):\n    deadline = time.monotonic() + timeout\n    while True:\n"
    "        if check():\n            return\n        if time.monotonic() > deadline:\n"
    "            pytest.fail('timed out')\n        time.sleep(0.2)\n",
    # an assert on the deadline inside the loop; a yield to the event loop
    "def test_x():\n    while not done():\n        assert time.monotonic() < deadline, 'late'\n"
    "        time.sleep(0.5)\n\n\nasync def test_y():\n    await asyncio.sleep(0)\n",
    # a deadline in the loop's condition, then a raise
    "async def test_x():\n    while time.monotonic() < deadline:\n        if done():\n            return\n"
    "        await asyncio.sleep(0.5)\n    raise AssertionError('never')\n",
    # timing printed, not asserted; sleeps inside a program's text are the program's
    "def test_x():\n    t0 = time.monotonic()\n    print(time.monotonic() - t0)\n"
    "    run(['python', '-c', 'import time; time.sleep(30)'])\n",
]


@pytest.mark.parametrize("rule,source", [(rule, s) for rule, sources in CAUGHT.items() for s in sources])
def test_the_rules_catch_the_patterns_that_were_removed(rule, source):
    assert rule in [r for r, _, _ in python_violations(Path("test_x.py"), source)]


@pytest.mark.parametrize("source", PASSES)
def test_the_rules_let_deadline_waits_and_printed_timings_pass(source):
    assert python_violations(Path("test_x.py"), source) == []


def test_lab_tests_may_not_read_the_clock():
    assert [r for r, _, _ in lab_violations("const started = Date.now();\nexpect(x).toBe(1);\n")] == ["lab-timing"]
    assert lab_violations("jest.useFakeTimers();\njest.advanceTimersByTime(1000);\n") == []


def test_real_node_skips_fail_when_the_run_requires_the_real_node(monkeypatch):
    from availability import skip_cluster_allowed, skip_or_fail

    monkeypatch.delenv("PADDLECLOUD_REQUIRE_REAL_NODE", raising=False)
    monkeypatch.setenv("PADDLECLOUD_SKIP_CLUSTER", "1")
    with pytest.raises(pytest.skip.Exception, match="not root"):
        skip_or_fail("real node: not root")
    assert skip_cluster_allowed()
    monkeypatch.setenv("PADDLECLOUD_REQUIRE_REAL_NODE", "1")
    with pytest.raises(pytest.fail.Exception, match="real node: not root .*must run"):
        skip_or_fail("real node: not root")
    with pytest.raises(pytest.fail.Exception, match="set together"):
        skip_cluster_allowed()


def test_missing_cluster_tools_fail_unless_skipping_the_cluster_is_allowed(monkeypatch):
    from availability import require_cluster_tools

    monkeypatch.delenv("PADDLECLOUD_REQUIRE_REAL_NODE", raising=False)
    monkeypatch.delenv("PADDLECLOUD_SKIP_CLUSTER", raising=False)
    require_cluster_tools(None)  # all there: nothing happens
    with pytest.raises(pytest.fail.Exception, match="helm missing"):
        require_cluster_tools("helm missing")
    monkeypatch.setenv("PADDLECLOUD_SKIP_CLUSTER", "1")
    with pytest.raises(pytest.skip.Exception, match="helm missing"):
        require_cluster_tools("helm missing")
    monkeypatch.setenv("PADDLECLOUD_REQUIRE_REAL_NODE", "1")
    with pytest.raises(pytest.fail.Exception, match="set together"):
        require_cluster_tools(None)


def collected(path: str, seed: int) -> list[str]:
    """The test ids of `path` in the order pytest (with pytest-randomly at `seed`) would run them."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "randomly",
                           f"--randomly-seed={seed}", "--collect-only", "-q", path],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.split("::", 1)[1] for line in proc.stdout.splitlines() if line.startswith(path + "::")]


def test_a_module_of_steps_keeps_its_written_order_under_the_random_order():
    """tests/helm/test_install.py is one flow (install ... uninstall) over one release: pytest-randomly
    would shuffle its steps (seed 1 put uninstall before the spawn), STEPS_IN_ORDER keeps them written."""
    path = "tests/helm/test_install.py"
    written = re.findall(r"^def (test_\w+)\(", (REPO / path).read_text(), flags=re.M)
    assert len(written) >= 7 and written[0].startswith("test_install") and written[-1].startswith("test_uninstall")
    for seed in (1, 2):
        assert collected(path, seed) == written


def test_every_fuzzed_api_operation_is_a_test_with_an_id_of_its_own():
    """Schemathesis' tests (one per operation) would all share their function's node id, and
    pytest-xdist runs one test per id: tests/conftest.py gives each its operation."""
    ids = collected("tests/local/test_openapi_fuzz.py", 1)
    fuzzed = [i for i in ids if i.startswith("test_job_api_conforms_and_never_fails_with_5xx")]
    assert len(fuzzed) > 5 and len(set(ids)) == len(ids), ids
    assert "test_job_api_conforms_and_never_fails_with_5xx[POST /jobs]" in fuzzed, fuzzed
