"""Sphinx configuration of the PaddleCloud Hub docs (`make docs`; MyST Markdown, as JupyterHub's).

Built with warnings as errors (`-W --keep-going -n`): a broken link, a missing page or a
header out of order fails `make docs`, and so `make test`. The reference pages under
`reference/` are committed files generated from the code (see reference/index.md); nothing is
generated here.
"""

project = "PaddleCloud Hub"
author = "PaddleCloud Hub contributors"
copyright = "2026, PaddleCloud Hub contributors"  # noqa: A001 (Sphinx's name)

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: heading anchors so pages can link to a section (`page.md#a-heading`), and the
# fenced-directive syntax. Links to repository files that are not pages are written as code.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

html_theme = "furo"
html_title = "PaddleCloud Hub"
html_static_path: list[str] = []
