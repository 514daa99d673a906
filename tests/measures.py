"""Figures a test puts on record in every run's output, whether it passes or fails:
`record_property(MEASURE, text)` in the test, printed under "measures" at the run's end (hooked
in tests/conftest.py). A test's own output is not shown when it passes, nor at all under
pytest-xdist; its reports' properties reach the controller either way."""

MEASURE = "measure"

measures: list[tuple[str, str]] = []


def pytest_runtest_logreport(report):
    if report.when == "call":
        measures.extend((report.nodeid, text) for key, text in report.user_properties if key == MEASURE)


def pytest_terminal_summary(terminalreporter):
    if measures:
        terminalreporter.write_sep("=", "measures")
        for nodeid, text in measures:
            terminalreporter.write_line(f"{text}  ({nodeid})")
