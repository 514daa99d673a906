"""Hostile input at the pure layer: what the OS or Kubernetes would refuse at start is
refused by JobSpec and the quota model first, with a sentence naming the field.

The real API server's verdict on what is accepted here is in
tests/cluster/test_hostile_k8s.py; the real local backend's in tests/local/test_hostile_input.py.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specgen
from paddle_ext.constants import LAUNCHER_ENV
from paddle_ext.errors import SpecError
from paddle_ext.jobkinds import job_objects
from paddle_ext.launch import launch_argv
from paddle_ext.manifests import ManifestSettings
from paddle_ext.quantity import LARGEST_COUNT, LARGEST_QUANTITY, SMALLEST_QUANTITY, check_quantity, parse_quantity
from paddle_ext.quota.model import QuotaInputError, parse_patch
from paddle_ext.spec import MAX_COMMAND_AND_ENV_BYTES, MAX_WORKERS, JobSpec, is_job_name, text_problem


@pytest.mark.parametrize("fields, field, words", specgen.HOSTILE_SPECS)
def test_what_the_os_or_kubernetes_would_refuse_is_refused_naming_the_field(fields, field, words):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"command": ["python", "train.py"], **fields})
    assert field in info.value.problems, info.value.problems
    assert words in info.value.problems[field]
    assert info.value.message.startswith("Invalid job spec: ") and info.value.message.endswith(".")


@pytest.mark.parametrize("image", [
    "busybox", "paddle:3.3.1-cpu", "registry.example.com/team/paddle:3.3.1-gpu", "localhost:5000/a/b_c__d-e.f",
    "Registry.Example.COM/x", "[::1]:5000/x:latest", "x@sha256:" + "0" * 64, "x:tag@sha256:" + "f" * 64,
])
def test_image_references_runtimes_parse_are_accepted(image):
    assert JobSpec(command=["python"], image=image).image == image


@pytest.mark.parametrize("text, amount", [
    ("2", Decimal(2)), ("500m", Decimal("0.5")), ("1.", Decimal(1)), (".5", Decimal("0.5")), ("1e3", Decimal(1000)),
    ("1.5E3", Decimal(1500)), ("2Ki", Decimal(2048)), ("1E", Decimal(10**18)), ("1Ei", Decimal(2**60)),
    ("10e99", Decimal("1e100")), ("1111111111111111111111111111111111111111", Decimal("1" * 40)),
])
def test_quantities_parse_exactly(text, amount):
    assert parse_quantity(text) == amount  # no rounding at 28 digits, 'Ei' and 'E' are suffixes


@settings(max_examples=400)
@given(specgen.quantity_text)
def test_a_quantity_check_refuses_with_a_sentence_or_keeps_the_exact_amount(text):
    try:
        amount = check_quantity(text)
    except ValueError as exc:  # never decimal.Overflow, InvalidOperation or a long computation
        assert str(exc).startswith(f"'{text}' ")
        return
    assert 0 <= amount <= LARGEST_QUANTITY and amount % SMALLEST_QUANTITY == 0
    assert text == text.strip()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(specgen.spec_data)
def test_any_spec_is_either_refused_naming_fields_or_safe_to_start(data):
    try:
        spec = JobSpec.from_dict(data).with_name()
    except SpecError as exc:
        assert exc.problems and all(isinstance(rule, str) and rule for rule in exc.problems.values())
        return
    argv = launch_argv(spec, "127.0.0.1:1", "0", python="python", host="127.0.0.1")
    for arg in argv + [f"{k}={v}" for k, v in spec.env.items()]:
        assert b"\x00" not in os.fsencode(arg)  # exec takes every argument and variable
    assert not set(spec.env) & set(LAUNCHER_ENV)
    assert argv[len(argv) - len(spec.command)] == spec.command[0] and not spec.command[0].startswith("-")
    assert len(json.dumps([list(spec.command), dict(spec.env)])) <= MAX_COMMAND_AND_ENV_BYTES
    assert 1 <= spec.workers <= MAX_WORKERS
    for quantity in (spec.cpu, spec.memory):
        assert check_quantity(quantity) > 0


def test_kubernetes_gets_the_users_dollar_signs_literally():
    spec = JobSpec(name="dollars", command=["python", "x.py", "$(HOME)", "cost: $5"], env={"A": "$(PATH)"})
    service, job = job_objects(spec, ManifestSettings(namespace="ns", image="img"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-4:] == ["python", "x.py", "$$(HOME)", "cost: $$5"]
    assert "--rank" in container["command"] and "$(JOB_COMPLETION_INDEX)" in container["command"]
    assert {"name": "A", "value": "$$(PATH)"} in container["env"]


def test_launcher_env_is_what_paddles_launcher_reads():
    """LAUNCHER_ENV copies Paddle's env_args_mapping (read from its source, without importing Paddle)."""
    found = importlib.util.find_spec("paddle")
    if found is None:
        pytest.skip("PaddlePaddle is not installed")
    source = Path(found.origin).parent / "distributed" / "launch" / "context" / "args_envs.py"
    tree = ast.parse(source.read_text())
    mapping = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and any(getattr(t, "id", "") == "env_args_mapping" for t in node.targets))
    names = {key.value for key in mapping.keys}
    assert names and names | {"PADDLE_TRAINER_ID"} == set(LAUNCHER_ENV)
    assert "PADDLE_TRAINER_ID" in source.read_text()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\n", "\x00", "ü", "a" * 51, "A", "-a", "a-", "%2e%2e"])
def test_names_from_urls_that_no_job_can_have(name):
    assert not is_job_name(name)


@pytest.mark.parametrize("text, problem", [("ok", None), ("a\x00", "NUL"), ("\ud800", "surrogate"), ("日本", None)])
def test_text_problems(text, problem):
    found = text_problem(text)
    assert (found is None) if problem is None else (problem in found)


QUOTA_CASES = [
    ({"cpu": "0.0001"}, "cpu", "finer than Kubernetes keeps"),
    ({"cpu": "1e9999999999"}, "cpu", "out of the range"),
    ({"memory": "8Ei"}, "memory", "more than Kubernetes can count"),
    ({"memory": "1e100"}, "memory", "more than Kubernetes can count"),
    ({"cpu": 1e300}, "cpu", "more than Kubernetes can count"),
    ({"cpu": 0.0001}, "cpu", "finer than Kubernetes keeps"),
    ({"gpus": 2**63}, "gpus", f"at most {LARGEST_COUNT}"),
    ({"pods": 10**30}, "pods", f"at most {LARGEST_COUNT}"),
    ({"running_jobs": str(10**30)}, "running_jobs", f"at most {LARGEST_COUNT}"),
    ({"cpu": "2x"}, "cpu", "not a Kubernetes quantity"),
    ({"gpus": "9" * 5000}, "gpus", "whole number"),  # too long to read as a number: no 500
]


@pytest.mark.parametrize("body, field, words", QUOTA_CASES)
def test_quota_values_kubernetes_would_change_or_refuse_are_refused(body, field, words):
    with pytest.raises(QuotaInputError) as info:
        parse_patch(body)
    assert words in info.value.problems[field]


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(["gpus", "cpu", "memory", "pods", "running_jobs", "revision", "x"]),
                       st.one_of(st.none(), specgen.quantity_text, specgen.counts, st.floats(), st.booleans(),
                                 specgen.hostile_text), max_size=5))
def test_any_quota_body_is_refused_naming_fields_or_stored_in_kubernetes_terms(body):
    try:
        patch = parse_patch(body, allow_revision=True)
    except QuotaInputError as exc:
        assert exc.problems
        return
    for field, value in patch.items():
        if value is None or field == "revision":
            continue
        if field in ("cpu", "memory"):
            check_quantity(value)
        else:
            assert isinstance(value, int) and 0 <= value <= LARGEST_COUNT


def test_form_numbers_with_odd_whitespace_are_read_not_a_500():
    """Found by the property above: '0\\x1f' passed a `\\s` check that int() then refused."""
    assert parse_patch({"gpus": "4\x1f", "pods": " 2 "}) == {"gpus": 4, "pods": 2}
