"""Reading credentials the way kubectl does: kubeconfig contexts, relative paths, inline
data, several files, exec credential plugins; and the errors for what is not supported."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
import yaml

from paddle_ext.kubeapi import (KubeConfigError, api_path, without_managed_fields, kubeconfig_credentials, run_exec_plugin,
                                split_lines)
from paddle_ext.kubeapi.client import ListDecoder


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return str(path)


def config(server="https://127.0.0.1:6443", user=None, namespace=None, current="ctx"):
    context = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Config", "current-context": current,
            "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": "pki/ca.crt"}}],
            "users": [{"name": "u", "user": user or {"token": "abc"}}],
            "contexts": [{"name": "ctx", "context": context}]}


def test_current_context_namespace_and_paths_relative_to_the_file(tmp_path):
    path = write(tmp_path / "kubeconfig", config(namespace="team-a", user={
        "client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"}))
    creds = kubeconfig_credentials(path)
    assert creds.server == "https://127.0.0.1:6443" and creds.namespace == "team-a"
    assert creds.ca_file == str(tmp_path / "pki" / "ca.crt")
    assert creds.cert_file == str(tmp_path / "pki" / "admin.crt") and creds.key_file == "/abs/admin.key"


def test_inline_data_and_a_named_context_from_the_second_file(tmp_path):
    first = write(tmp_path / "one", config())
    second = config(user={"client-certificate-data": base64.b64encode(b"CERT").decode(),
                          "client-key-data": base64.b64encode(b"KEY").decode()})
    second["contexts"][0]["name"] = "other"
    second["clusters"][0]["name"] = "c"
    other = write(tmp_path / "two", second)
    creds = kubeconfig_credentials(f"{first}{os.pathsep}{other}", context="other")
    # kubectl's merge rule: the first file's cluster and user named c/u win.
    assert creds.token == "abc" and creds.cert_data is None


def test_unsupported_or_broken_configs_are_named(tmp_path):
    with pytest.raises(KubeConfigError, match="No kubeconfig found"):
        kubeconfig_credentials(str(tmp_path / "missing"))
    path = write(tmp_path / "gcp", config(user={"auth-provider": {"name": "gcp"}}))
    with pytest.raises(KubeConfigError, match="auth-provider"):
        kubeconfig_credentials(path)
    path = write(tmp_path / "nocontext", config(current=""))
    with pytest.raises(KubeConfigError, match="no current context"):
        kubeconfig_credentials(path)
    with pytest.raises(KubeConfigError, match="no context named 'nope'"):
        kubeconfig_credentials(write(tmp_path / "ok", config()), context="nope")


def test_exec_plugin_token_and_failure(tmp_path):
    plugin = tmp_path / "plugin.sh"
    plugin.write_text('#!/bin/sh\necho "{\\"kind\\": \\"ExecCredential\\", \\"status\\": {\\"token\\": \\"$TOKEN\\", '
                      '\\"expirationTimestamp\\": \\"2099-01-01T00:00:00Z\\"}}"\n')
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    result = run_exec_plugin({"command": str(plugin), "env": [{"name": "TOKEN", "value": "t0k"}]})
    assert result.token == "t0k" and result.expires.year == 2099
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/sh\necho 'login first' >&2\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(KubeConfigError, match="exited with 3: login first"):
        run_exec_plugin({"command": str(failing)})


def test_paths():
    assert api_path("v1", "pods", "ns", "p-0", "log") == "/api/v1/namespaces/ns/pods/p-0/log"
    assert api_path("batch/v1", "jobs", "ns") == "/apis/batch/v1/namespaces/ns/jobs"
    assert api_path("v1", "nodes") == "/api/v1/nodes"


async def test_split_lines_joins_lines_across_chunks():
    async def chunks():
        for part in (b"one\ntw", b"o\n", b"", b"thr", b"ee"):
            yield part

    assert [line async for line in split_lines(chunks())] == [b"one", b"two", b"three"]


def _go_ordered(items: list[dict]) -> bytes:
    """A list as the API server writes a built-in kind: fields in struct order, no spaces."""
    return json.dumps({"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "9"},
                       "items": items}, separators=(",", ":")).encode()


def _job(name: str, annotation: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"note": annotation},
                     "managedFields": [{"manager": 'odd ]},"spec": [', "operation": "Update",
                                        "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {}}},
                                                     "f:metadata": {"f:finalizers": {'v:"x"': {}}}}}]},
        "spec": {"template": {"metadata": {"finalizers": ["f"]}, "spec": {"containers": []}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }


def _without_managed(listing: dict) -> dict:
    """The list with every item's metadata.managedFields left out."""
    items = [{**item, "metadata": {k: v for k, v in item["metadata"].items() if k != "managedFields"}}
             for item in listing.get("items") or []]
    return {**listing, "items": items} if "items" in listing else listing


def test_without_managed_fields_cuts_exactly_each_items_managed_fields():
    tricky = ',"managedFields":[ and ]},"spec": and "metadata":{ in a string'
    items = [_job("a", tricky), _job("b", "plain"), {**_job("c", "x"), "metadata": {"name": "c"}}]
    trimmed = json.loads(without_managed_fields(_go_ordered(items)))
    assert trimmed == _without_managed(json.loads(_go_ordered(items)))
    assert trimmed["items"][0]["metadata"]["annotations"]["note"] == tricky


def test_without_managed_fields_cuts_a_custom_resources_sorted_metadata_too():
    # An unstructured object's keys come sorted (a Kueue Workload): `name` follows managedFields.
    items = [_job("a", ',"managedFields":[ and ],"name":" in a string'), _job("b", "y")]
    body = json.dumps({"items": items}, sort_keys=True, separators=(",", ":")).encode()
    expected = json.loads(body)
    for item in expected["items"]:
        del item["metadata"]["managedFields"]
    assert json.loads(without_managed_fields(body)) == expected


def _decoded_in_pieces(body: bytes, cuts) -> dict:
    decoder = ListDecoder()
    for start, end in zip([0, *cuts], [*cuts, len(body)]):
        decoder.feed(body[start:end])
    return decoder.finish()


def _workload(name: str, note: str) -> dict:
    """A custom resource as the API server writes it (keys sorted), with managedFields and,
    inside, an array of objects that open the way items do."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"creationTimestamp": "2026-12-06T00:00:00Z", "managedFields": [{"manager": "kueue"}],
                         "name": name, "namespace": "ns",
                         "ownerReferences": [{"apiVersion": "batch/v1", "name": "a"}, {"apiVersion": "batch/v1",
                                                                                       "name": "b"}]},
            "spec": {"note": note, "podSets": [{"apiVersion": "x", "count": 1}, {"apiVersion": "y", "count": 2}]}}


LISTS = {
    "built-in kind": _go_ordered([_job("a", '},{"metadata": in a string'), _job("b", "plain"),
                                  {"metadata": {"name": "c"}, "spec": {"claims": [{"metadata": {"name": "x"}},
                                                                                 {"metadata": {"name": "y"}}]}}]),
    "custom resource": json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList",
                                   "items": [_workload(f"w{i}", '"},{"apiVersion":"') for i in range(4)],
                                   "metadata": {"resourceVersion": "7"}}, sort_keys=True, separators=(",", ":")).encode(),
    "empty": _go_ordered([]),
    "no items key": b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}',
    "spaced out": json.dumps({"kind": "JobList", "items": [_job("a", "x"), _job("b", "y")]}, indent=1).encode(),
    "an event whose managedFields cannot be cut": _go_ordered([
        {"metadata": {"name": "e", "managedFields": [{"manager": "m"}]}, "involvedObject": {"kind": "Pod"}},
        _job("b", "y")]),
}


@pytest.mark.parametrize("shape", list(LISTS))
def test_a_list_decoded_as_it_arrives_is_the_list_in_any_pieces(shape):
    body = LISTS[shape]
    whole = _without_managed(json.loads(body))
    assert _without_managed(_decoded_in_pieces(body, [])) == whole
    for at in range(1, len(body)):  # every split in two, and every 7th byte a piece of its own
        assert _without_managed(_decoded_in_pieces(body, [at])) == whole, at
    assert _without_managed(_decoded_in_pieces(body, list(range(7, len(body), 7)))) == whole
    assert ListDecoder().finish() == {}


def test_a_list_whose_items_begin_late_is_decoded_whole(monkeypatch):
    monkeypatch.setattr(ListDecoder, "HEAD_LIMIT", 16)  # the built-in list's items begin at byte 77
    body = LISTS["built-in kind"]
    for at in range(1, len(body), 5):
        assert _without_managed(_decoded_in_pieces(body, [at])) == _without_managed(json.loads(body)), at


def test_a_list_decoded_as_it_arrives_leaves_out_managed_fields_and_decodes_items_before_the_end():
    body = LISTS["custom resource"]
    decoder = ListDecoder()
    items_begin = body.index(b'"items":[') + len(b'"items":[')
    for piece in (body[:items_begin], body[items_begin:items_begin + 1], body[items_begin + 1:body.index(b'"name":"w3"')]):
        decoder.feed(piece)  # the list's head, the first item's '{', then up to the fourth item's name
    assert [item["metadata"]["name"] for item in decoder._items] == ["w0", "w1", "w2"]
    decoder.feed(body[body.index(b'"name":"w3"'):])
    listing = decoder.finish()
    assert [item["metadata"]["name"] for item in listing["items"]] == ["w0", "w1", "w2", "w3"]
    assert all("managedFields" not in item["metadata"] for item in listing["items"])
    assert listing["metadata"] == {"resourceVersion": "7"} and listing["kind"] == "WorkloadList"


def test_an_item_full_of_objects_that_open_like_items_costs_a_bounded_number_of_tries(monkeypatch):
    """Objects are user input: one whose fields hold many objects opening the way the list's
    items do may not make the decoder try a cut at each of them (work growing with the square
    of its size); after MAX_FALSE_CUTS the rest is decoded at the end, all the same."""
    from paddle_ext.kubeapi import client

    opening = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "n"}}
    hostile = {**_workload("w1", "x"), "spec": {"decoys": [opening] * 2000}}
    items = [_workload("w0", "x"), hostile, _workload("w2", "x")]
    body = json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "items": items, "kind": "WorkloadList",
                       "metadata": {}}, sort_keys=True, separators=(",", ":")).encode()
    expected = _without_managed(json.loads(body))
    tries = []
    real_loads = json.loads
    monkeypatch.setattr(client.json, "loads", lambda text: tries.append(len(text)) or real_loads(text))
    listing = _decoded_in_pieces(body, list(range(4096, len(body), 4096)))
    monkeypatch.undo()
    assert _without_managed(listing) == expected
    # w0, then in w1 MAX_FALSE_CUTS tries and the one past them, then the rest at the end
    assert len(tries) == ListDecoder.MAX_FALSE_CUTS + 3, tries


def test_without_managed_fields_leaves_a_body_it_cannot_cut_safely_whole():
    # managedFields last in metadata, then neither `spec` nor `name` (an Event): cutting would
    # reach into the next item, so nothing is cut.
    event = {"metadata": {"name": "e", "managedFields": [{"manager": "m"}]}, "involvedObject": {"kind": "Pod"}}
    odd = _go_ordered([event, _job("b", "y")])
    assert without_managed_fields(odd) is odd
    plain = _go_ordered([{"metadata": {"name": "a"}, "spec": {}}])
    assert without_managed_fields(plain) is plain
    assert without_managed_fields(b"") == b""
