"""The documentation stays true to the code (fast, no network).

1. docs/reference/*.md equal what tools/docs/reference.py makes from the code now: a flag,
   route, chart value, setting or environment variable removed or changed in the code
   without regenerating fails here.
2. Every command in a fenced code block of README.md and docs/**/*.md that starts with
   `paddlecloud` parses with the real parser (paddle_ext.cli.build_parser); a usage
   synopsis (`[--opt X]`) names only options the command has.
3. What a page names in backticks and that can only be a repo path (first part an existing
   top-level folder, or a test path under tests/), a test id (`file.py::test_name`), a
   module of the package (`paddle_ext.x.y`), or, in a paragraph about fixtures, a
   snake_case name, exists.
4. Internal Markdown links between those pages resolve to files (and headings).

It works on whatever pages exist; each check names the page and line of what it found.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from paddle_ext.cli import UsageError, build_parser
from tools.docs import reference

REPO = Path(__file__).resolve().parents[2]
REGENERATE = f"run `{reference.COMMAND}` and commit docs/reference/"


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/ but build outputs (_build, hidden)."""
    pages = [REPO / "README.md"] if (REPO / "README.md").exists() else []
    for path in sorted((REPO / "docs").rglob("*.md")):
        if not any(part.startswith(("_", ".")) for part in path.relative_to(REPO / "docs").parts):
            pages.append(path)
    return pages


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


# ------------------------------------------------------------------ Markdown reading

@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its info string and (line number, text) of each line."""

    info: str
    lines: tuple[tuple[int, str], ...]


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Prose between blank lines (or list items), fenced blocks left out."""

    line: int
    text: str


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def split_markdown(text: str) -> tuple[list[Block], list[Chunk]]:
    blocks: list[Block] = []
    chunks: list[Chunk] = []
    fence: str | None = None
    info = ""
    body: list[tuple[int, str]] = []
    prose: list[str] = []
    start = 0

    def flush() -> None:
        nonlocal prose
        if prose:
            chunks.append(Chunk(start, "\n".join(prose)))
        prose = []

    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                flush()
                fence, info, body = match[1], match[2].strip(), []
            elif not line.strip() or _ITEM.match(line):
                flush()
                if line.strip():
                    start, prose = number, [line]
            else:
                if not prose:
                    start = number
                prose.append(line)
        elif match and match[1][0] == fence[0] and len(match[1]) >= len(fence) and not match[2].strip():
            blocks.append(Block(info, tuple(body)))
            fence = None
        else:
            body.append((number, line))
    flush()
    return blocks, chunks


_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)


def code_spans(chunk: Chunk) -> list[str]:
    return [" ".join(match[2].split()) for match in _CODE_SPAN.finditer(chunk.text)]


def pages_and_text():
    for path in doc_pages():
        yield path, path.read_text()


# ------------------------------------------------------------------ 1. generated reference

@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_reference_pages_are_what_the_code_makes_now(name):
    path = reference.REFERENCE_DIR / name
    assert path.exists(), f"docs/reference/{name} is missing: {REGENERATE}"
    expected = reference.PAGES[name]()
    committed = path.read_text()
    if committed != expected:
        diff = list(difflib.unified_diff(committed.splitlines(), expected.splitlines(), "committed", "from the code",
                                         lineterm="", n=0))
        pytest.fail(f"docs/reference/{name} differs from the code (a flag, route, chart value, setting or "
                    f"environment variable changed): {REGENERATE}\n" + "\n".join(diff[:30]), pytrace=False)


def _names_in_code(folders: tuple[str, ...]) -> dict[str, str]:
    """Every PADDLECLOUD_* name in the files under `folders`: name -> first file it is in."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".png", ".gz"):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for name in re.findall(r"PADDLECLOUD_[A-Z0-9_]+", text):
                found.setdefault(name, page_id(path))
    return found


# Not environment variables although spelt like one.
NOT_VARIABLES = {
    "PADDLECLOUD_METRIC": "the marker of paddle_ext.report()'s log lines (constants.METRIC_MARKER)",
}


def test_every_environment_variable_the_code_names_is_in_the_table():
    from paddle_ext.environment import VARIABLES, setting_env_name
    from paddle_ext.hub.settings import HubSettings

    table = {variable.name for variable in VARIABLES}
    families = [name.split("<", 1)[0] for name in table if "<" in name]
    # HubSettings' fields, each read as PADDLECLOUD_<FIELD>: the table's family row covers them
    # (docs/reference/settings.md lists them all).
    assert setting_env_name("<SETTING>") in table
    settings = {setting_env_name(field.name) for field in dataclasses.fields(HubSettings)}
    missing = []
    for name, where in _names_in_code(("paddle_ext", "hub_config", "images", "tools")).items():
        if name in table or name in NOT_VARIABLES or name in settings:
            continue
        if name.endswith("_") and any(family.startswith(name) for family in families):
            continue  # the prefix of a family, e.g. PADDLECLOUD_DATASET_ in dataset_env_name
        missing.append(f"{name} ({where})")
    assert not missing, ("environment variables missing from paddle_ext/environment.py's VARIABLES: "
                         + ", ".join(missing) + f"; add them there, then {REGENERATE}")


def test_the_environment_table_names_each_variable_once_and_says_what_it_is():
    from paddle_ext.environment import VARIABLES

    names = [variable.name for variable in VARIABLES]
    assert len(names) == len(set(names)), f"named twice: {sorted({n for n in names if names.count(n) > 1})}"
    for variable in VARIABLES:
        assert re.fullmatch(r"PADDLECLOUD_[A-Z0-9_]*(<[A-Z]+>)?", variable.name), variable.name
        assert variable.read_by and variable.meaning, f"{variable.name} says not who reads it or what it means"


def test_every_hub_setting_is_a_variable_the_hub_reads():
    """HubSettings.load reads PADDLECLOUD_<FIELD>: the family row of the table is true."""
    from paddle_ext.environment import setting_env_name
    from paddle_ext.hub.settings import HubSettings

    settings = HubSettings.load(environ={setting_env_name("cull_idle_seconds"): "7"})
    assert settings.cull_idle_seconds == 7


# ------------------------------------------------------------------ 2. commands in code blocks

PROMPT = re.compile(r"^\s*(?:\$|%|>>>)\s+|^\s*!")
# A placeholder in a command: <lowercase words>, replaced by a word before parsing.
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9 _-]*>")
SHELL_OPERATORS = set("();<>|&")


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """The block's lines, with backslash continuations and a synopsis' indented lines joined."""
    out: list[tuple[int, str]] = []
    joining = False
    for number, line in block.lines:
        text = PROMPT.sub("", line, count=1)
        synopsis_tail = out and "[-" in out[-1][1] and line[:1].isspace() and line.strip().startswith("[")
        if (joining or synopsis_tail) and out:
            out[-1] = (out[-1][0], out[-1][1] + " " + text.strip())
        else:
            out.append((number, text))
        joining = text.rstrip().endswith("\\")
        if joining:
            out[-1] = (out[-1][0], out[-1][1].rstrip()[:-1])
    return out


def paddlecloud_commands(line: str) -> list[list[str]]:
    """Each `paddlecloud ...` command of a shell line, as its arguments (after `paddlecloud`)."""
    lexer = shlex.shlex(PLACEHOLDER.sub("placeholder", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    tokens = list(lexer)
    commands, current, at_start = [], None, True
    for token in tokens:
        if set(token) <= SHELL_OPERATORS:
            current, at_start = None, True
            continue
        if current is not None:
            current.append(token)
        elif at_start and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            continue  # VAR=value before the command
        elif at_start and token == "paddlecloud":
            current = []
            commands.append(current)
        else:
            at_start = False
    return commands


def _options_of(parser) -> dict[str, set[str]]:
    import argparse

    top = {o for action in parser._actions for o in action.option_strings}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: top | {o for action in p._actions for o in action.option_strings}
            for name, p in sub.choices.items()}


def check_synopsis(line: str) -> str | None:
    """A usage line such as `paddlecloud logs NAME [-f|--follow]`: its command and options exist."""
    words = line.split()
    options = _options_of(build_parser())
    command = words[1] if len(words) > 1 else ""
    if command not in options:
        return f"`paddlecloud {command}` is not a command (commands: {', '.join(options)})"
    named = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line)
    unknown = [option for option in named if option not in options[command]]
    return f"`paddlecloud {command}` has no option {', '.join(unknown)}" if unknown else None


def check_command(arguments: list[str]) -> str | None:
    try:
        build_parser().parse_args(arguments)
    except UsageError as exc:
        return str(exc)
    except SystemExit as exc:  # --help
        return None if exc.code == 0 else f"exits {exc.code}"
    return None


def docs_commands():
    for path, text in pages_and_text():
        blocks, _ = split_markdown(text)
        for block in blocks:
            for number, line in logical_lines(block):
                if not re.match(r"\s*paddlecloud\s|.*[\s;&|(]paddlecloud\s", line):
                    continue
                yield f"{page_id(path)}:{number}", line


def test_every_paddlecloud_command_in_a_code_block_parses():
    failures = []
    for where, line in docs_commands():
        stripped = line.strip()
        if stripped.startswith("paddlecloud ") and "[-" in stripped:
            problem = check_synopsis(stripped)
            if problem:
                failures.append(f"{where}: {problem}: {stripped}")
            continue
        try:
            commands = paddlecloud_commands(line)
        except ValueError as exc:  # unbalanced quotes
            failures.append(f"{where}: cannot split ({exc}): {stripped}")
            continue
        for arguments in commands:
            problem = check_command(arguments)
            if problem:
                failures.append(f"{where}: {problem}: paddlecloud {shlex.join(arguments)}")
    assert not failures, "commands in the docs that the real parser refuses:\n" + "\n".join(failures)


def test_the_command_checks_catch_what_they_are_for():
    block = Block("sh", ((1, "$ paddlecloud submit --workers 2 \\"), (2, "    --bogus -- python t.py"),
                         (3, "NAME=$(paddlecloud submit -- x) && paddlecloud logs <job> -f | head"),
                         (4, "paddlecloud logs NAME [-f|--follow]"), (5, "       [--nope]")))
    lines = logical_lines(block)
    assert [number for number, _ in lines] == [1, 3, 4]
    assert check_command(paddlecloud_commands(lines[0][1])[0]) is not None  # --bogus
    assert [check_command(arguments) for arguments in paddlecloud_commands(lines[1][1])] == [None, None]
    assert "--nope" in (check_synopsis(lines[2][1]) or "")
    assert check_synopsis("paddlecloud logs NAME [-f|--follow] [--tail N]") is None
    assert paddlecloud_commands("paddlecloud-demo --port 1; echo paddlecloud") == []


# ------------------------------------------------------------------ 3. named files, tests, modules, fixtures

@lru_cache(maxsize=1)
def top_level_folders() -> frozenset[str]:
    return frozenset(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")
                     and p.name not in ("node_modules", "build", "dist"))


@lru_cache(maxsize=1)
def subfolders_of_tests() -> frozenset[str]:
    return frozenset(p.name for p in (REPO / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


PATH_CHARS = re.compile(r"^[A-Za-z0-9_.\-/]+(::[A-Za-z0-9_]+(\[[^\]]*\])?)*$")


def is_build_output(path: Path, folder: bool = False) -> bool:
    """A path git ignores (labextension/prebuilt/, .venv/, ...); `folder`: it names a folder."""
    name = str(path.relative_to(REPO)) + ("/" if folder else "")
    try:
        result = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "--no-index", name],
                                capture_output=True, timeout=60)
    except OSError:  # no git here: nothing counts as a build output
        return False
    return result.returncode == 0


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", path.read_text(), re.M) is not None


def check_path(span: str) -> str | None:
    """None when `span` is not a repo path or exists; else what is missing."""
    if not PATH_CHARS.match(span) or "/" not in span and "::" not in span:
        return None
    path_text, *names = span.split("::")
    first = path_text.split("/", 1)[0]
    candidates = []
    if first in top_level_folders():
        candidates.append(REPO / path_text)
    if first in subfolders_of_tests() and (path_text.endswith(".py") or names):
        candidates.append(REPO / "tests" / path_text)  # a test named relative to tests/, as in the promise table
    if not candidates:
        return None
    path = next((candidate for candidate in candidates if candidate.exists()), candidates[0])
    if not path.exists():
        if is_build_output(path, folder=path_text.endswith("/")):
            return None  # made by a build (git-ignored): whether it is there depends on what ran
        return f"`{span}`: there is no {path.relative_to(REPO)}"
    for name in names:
        name = name.split("[", 1)[0]
        if path.is_file() and not _defines(path, name):
            return f"`{span}`: {path.relative_to(REPO)} defines no {name}"
    return None


def check_module(span: str) -> str | None:
    """`paddle_ext.a.b[.Name]`: the module exists, and the name after it is in it."""
    text = span[:-2] if span.endswith("()") else span
    if not re.fullmatch(r"paddle_ext(\.[A-Za-z_][A-Za-z0-9_]*)+", text):
        return None
    parts = text.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            if rest and not re.search(rf"\b{re.escape(rest[0])}\b", module.read_text()):
                return f"`{span}`: {module.relative_to(REPO)} has no {rest[0]}"
            return None
    return f"`{span}`: no such module"


PYTEST_BUILTIN_FIXTURES = {"tmp_path", "tmp_path_factory", "monkeypatch", "capsys", "capfd", "caplog",
                           "request", "pytestconfig", "recwarn", "tmpdir", "tmpdir_factory"}


@lru_cache(maxsize=1)
def known_test_names() -> frozenset[str]:
    """pytest fixtures under tests/ (and markers), plus every def and class under tests/ and tools/."""
    names = set(PYTEST_BUILTIN_FIXTURES)
    for folder in ("tests", "tools"):
        for path in (REPO / folder).rglob("*.py"):
            if "node_modules" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                    for decorator in getattr(node, "decorator_list", []):
                        call = decorator if isinstance(decorator, ast.Call) else None
                        for keyword in call.keywords if call else []:
                            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                                names.add(keyword.value.value)  # @pytest.fixture(name=...)
    pyproject = (REPO / "pyproject.toml").read_text()
    names.update(re.findall(r'^\s*"([a-z_]+):', pyproject, re.M))  # markers
    return frozenset(names)


@lru_cache(maxsize=1)
def fixtures() -> frozenset[str]:
    found = set()
    for path in (REPO / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    "fixture" in ast.unparse(d) for d in node.decorator_list):
                found.add(node.name)
    return frozenset(found)


SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


def check_fixture(span: str, chunk: Chunk) -> str | None:
    """In prose about fixtures, a snake_case name must be a fixture, a marker, or a test helper."""
    if not re.search(r"\bfixtures?\b", chunk.text, re.I) or not SNAKE.fullmatch(span):
        return None
    return None if span in known_test_names() else f"`{span}`: no fixture, marker or test helper of that name"


def named_things():
    for path, text in pages_and_text():
        _, chunks = split_markdown(text)
        for chunk in chunks:
            for span in code_spans(chunk):
                yield path, chunk, span


def test_every_file_test_module_and_fixture_a_page_names_exists():
    found: dict[tuple[str, str], list[str]] = {}
    for path, chunk, span in named_things():
        for problem in (check_path(span), check_module(span), check_fixture(span, chunk)):
            if problem:
                found.setdefault((page_id(path), problem), []).append(f"{page_id(path)}:{chunk.line}")
    failures = [f"{where[0]}: {problem}" for (page, problem), where in sorted(found.items())]
    assert not failures, "names in the docs that do not exist:\n" + "\n".join(failures)


def test_the_name_checks_catch_what_they_are_for():
    assert check_path("paddle_ext/cli.py") is None
    assert check_path("paddle_ext/no_such.py") is not None
    assert check_path("unit/test_docs.py::test_the_name_checks_catch_what_they_are_for") is None
    assert check_path("unit/test_docs.py::test_gone") is not None
    assert check_path("kueue.x-k8s.io/queue-name") is None  # not a repo path
    assert check_path("/services/quota/") is None
    assert check_path("helm/test_chart.py") is None  # tests/helm/, as the promise table names it
    assert check_path("labextension/prebuilt/") is None  # a build output
    assert check_module("paddle_ext.cli.build_parser") is None
    assert check_module("paddle_ext.cli.no_such_function") is not None
    assert check_module("paddle_ext.nowhere") is not None
    about_fixtures = Chunk(1, "The fixtures `cluster` and `real_api_client`.")
    assert fixtures() >= {"cluster"}
    assert check_fixture("real_api_client", about_fixtures) is not None
    assert check_fixture("make_namespace", about_fixtures) is None
    assert check_fixture("real_api_client", Chunk(1, "no such word here")) is None


# ------------------------------------------------------------------ 4. links

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def github_slug(heading: str) -> str:
    text = re.sub(r"[`*_]|<[^>]+>", lambda m: "_" if m[0] == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    blocks_free = split_markdown(path.read_text())[1]
    seen: dict[str, int] = {}
    out = set()
    for chunk in blocks_free:
        for line in chunk.text.splitlines():
            match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if match:
                slug = github_slug(match[1])
                out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
                seen[slug] = seen.get(slug, 0) + 1
        for label in re.findall(r"^\((\S+)\)=\s*$", chunk.text, re.M):  # MyST targets
            out.add(label)
    return out


def check_link(page: Path, target: str) -> str | None:
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None  # a URL (http:, mailto:, ...)
    file_part, _, anchor = target.partition("#")
    path = (page.parent / file_part).resolve() if file_part else page
    try:
        shown = path.relative_to(REPO)
    except ValueError:
        return f"{target}: points outside the repository"
    if not path.exists():
        return f"{target}: there is no {shown}"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{target}: {shown} has no heading #{anchor}"
    return None


def test_internal_links_resolve():
    failures = []
    for path, text in pages_and_text():
        _, chunks = split_markdown(text)
        for chunk in chunks:
            prose = _CODE_SPAN.sub("", chunk.text)
            for target in LINK.findall(prose):
                problem = check_link(path, target)
                if problem:
                    failures.append(f"{page_id(path)}:{chunk.line}: {problem}")
    assert not failures, "links in the docs that go nowhere:\n" + "\n".join(failures)


def test_the_link_check_catches_what_it_is_for():
    readme = REPO / "README.md"
    assert check_link(readme, "https://example.org/x") is None
    assert check_link(readme, "docs/reference/cli.md") is None
    assert check_link(readme, "docs/reference/cli.md#commands") is None
    assert check_link(readme, "docs/reference/cli.md#no-such-heading") is not None
    assert check_link(readme, "docs/nowhere.md") is not None
    assert LINK.findall("see [the CLI](docs/reference/cli.md) and ![shot](docs/a.png)") == [
        "docs/reference/cli.md", "docs/a.png"]
