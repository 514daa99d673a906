"""How the widget monitor shows a job's code and output folder (pure rendering)."""

from __future__ import annotations

from paddle_ext.constants import SERVER_BASE_URL_ENV, SERVER_ROOT_ENV
from paddle_ext.jobs import outputs_record
from paddle_ext.widgets.monitor import lab_tree_url, render_code_and_outputs, server_location, short_digest

CODE = {"workdir": "/home/jovyan/project", "digest": "sha256:0123456789abcdef" + "0" * 48, "files": 12,
        "bytes": 3481, "stored": True}
SERVER = ("/home/jovyan", "/user/alice/")


def test_code_reads_as_files_size_and_a_short_digest():
    html = render_code_and_outputs(CODE, None, SERVER)
    assert "<b>Code:</b> 12 files, 3.4 KiB, " in html
    assert f'<code title="{CODE["digest"]}">0123456789ab</code>' in html
    assert "from <code>/home/jovyan/project</code>" in html
    assert "1 file, 10 B" in render_code_and_outputs({**CODE, "files": 1, "bytes": 10, "digest": None}, None, None)
    assert short_digest("sha256:abcdef0123456789") == "abcdef012345" and short_digest(None) == ""


def test_a_kept_output_folder_under_the_server_root_links_into_jupyterlab():
    outputs = outputs_record("/home/jovyan/project/paddlecloud-outputs/my job", kept=True)
    html = render_code_and_outputs(None, outputs, SERVER)
    assert "<code>/home/jovyan/project/paddlecloud-outputs/my job</code>" in html
    assert '<a href="/user/alice/lab/tree/project/paddlecloud-outputs/my%20job" target="_blank"' in html
    assert "Open in JupyterLab" not in render_code_and_outputs(None, outputs, None)  # no server: the path only


def test_a_folder_the_file_browser_cannot_reach_or_that_is_not_kept_gets_no_link():
    assert lab_tree_url("/tmp/out", "/home/jovyan", "/") is None
    assert lab_tree_url("/home/jovyanx/out", "/home/jovyan", "/") is None
    assert lab_tree_url("/home/jovyan", "/home/jovyan", "/") == "/lab/tree/"
    assert lab_tree_url("/srv/out", "/", "/base") == "/base/lab/tree/srv/out"
    gone = outputs_record("/tmp/paddlecloud-outputs/j", kept=False, note="Outputs are not kept on this site.")
    html = render_code_and_outputs(None, gone, ("/", "/"))
    assert "href" not in html and "(Outputs are not kept on this site.)" in html
    assert render_code_and_outputs(None, None, SERVER) == ""


def test_the_server_location_comes_from_the_environment_the_server_extension_sets(monkeypatch):
    monkeypatch.delenv(SERVER_ROOT_ENV, raising=False)
    assert server_location() is None
    monkeypatch.setenv(SERVER_ROOT_ENV, "/home/jovyan")
    monkeypatch.setenv(SERVER_BASE_URL_ENV, "/user/alice/")
    assert server_location() == SERVER
