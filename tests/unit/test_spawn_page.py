"""The hub's spawn page lists the spawner's steps in view (not only in the collapsed event
log), and the admin guide (docs/admin/kubernetes.md) names every step the spawner reports."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader
from jupyterhub.app import JupyterHub

from paddle_ext.hub.spawner import TEMPLATES

REPO = Path(__file__).resolve().parents[2]


def render_spawn_page() -> str:
    """As JupyterHub renders it: our template_paths first, its own under templates/."""
    stock = JupyterHub()._template_paths_default()[0]
    env = Environment(autoescape=True, loader=ChoiceLoader([
        PrefixLoader({"templates": FileSystemLoader([stock])}, "/"), FileSystemLoader([TEMPLATES, stock])]))
    return env.get_template("spawn_pending.html").render(
        static_url=lambda *args, **kwargs: "/static", base_url="/hub/", prefix="/", user=None,
        progress_url="/hub/api/users/alice/server/progress", xsrf="", parsed_scopes=[], announcement=None)


def test_the_spawn_page_lists_the_steps_above_the_progress_bar_and_keeps_the_stock_page():
    page = render_spawn_page()
    assert page.index('id="paddle-spawn-steps"') < page.index('id="progress-bar"')
    # the stock page is all there: its event stream, its event log (which the list mirrors), Stop
    for stock in ('new EventSource("/hub/api/users/alice/server/progress")', 'id="progress-log"',
                  'id="stop-server-btn"', "MutationObserver"):
        assert stock in page


def step_messages() -> list[str]:
    """The fixed start of each message the spawner reports with self._step(...)."""
    tree = ast.parse((REPO / "paddle_ext" / "hub" / "spawner.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "_step" and node.args:
            first = node.args[0]
            if isinstance(first, ast.BinOp):  # "Quota applied: " + ...
                first = first.left
            parts = first.values if isinstance(first, ast.JoinedStr) else [first]
            found.append(parts[0].value if isinstance(parts[0], ast.Constant) else "")
    return found


def test_the_admin_guide_names_every_spawn_step():
    steps = step_messages()
    assert len(steps) >= 8 and all(steps), steps
    readme = re.sub(r"\s+", " ", (REPO / "docs" / "admin" / "kubernetes.md").read_text())
    missing = [step for step in steps if f'"{step.split(":")[0].strip()}' not in readme]
    assert not missing, f"docs/admin/kubernetes.md's list of spawn steps lacks {missing}"
