"""One definition of the quantity, job-name and env-name grammars (paddle_ext/grammars.json),
and every spelling of them passing its cases: the server's parsing and checks here, the chart's
values schema, the quota page's script. The lab panel passes the same cases in
labextension/test/grammars.spec.ts; the server's OpenAPI document is checked in test_openapi.py."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest

from paddle_ext.grammars import (ENV_NAME_PATTERN, GRAMMARS, JOB_NAME_PATTERN, MAX_JOB_NAME_LENGTH,
                                 QUANTITY_PATTERN)
from paddle_ext.quantity import parse_quantity
from paddle_ext.errors import SpecError
from paddle_ext.spec import JobSpec, is_job_name

REPO = Path(__file__).resolve().parents[2]
CHART_SCHEMA = REPO / "helm" / "paddlecloud-hub" / "values.schema.json"
ADMIN_JS = REPO / "paddle_ext" / "hub" / "static" / "admin.js"
QUANTITY = GRAMMARS["quantity"]


@pytest.mark.parametrize(("text", "amount"), QUANTITY["accepted"].items())
def test_the_server_reads_each_accepted_quantity_exactly(text, amount):
    assert parse_quantity(text) == Decimal(amount)


@pytest.mark.parametrize("text", QUANTITY["refused"])
def test_the_server_refuses_each_refused_quantity(text):
    assert not QUANTITY_PATTERN.fullmatch(text)
    if text == text.strip():  # (parsing strips what surrounds a quantity, as the panel does)
        with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
            parse_quantity(text)


@pytest.mark.parametrize("text", QUANTITY["out_of_range"])
def test_the_server_refuses_exponents_out_of_range(text):
    assert QUANTITY_PATTERN.fullmatch(text)
    with pytest.raises(ValueError, match="out of the range of Kubernetes quantities"):
        parse_quantity(text)


@pytest.mark.parametrize(("grammar", "pattern"), [("job_name", JOB_NAME_PATTERN), ("env_name", ENV_NAME_PATTERN)])
def test_the_server_accepts_and_refuses_the_name_cases(grammar, pattern):
    cases = GRAMMARS[grammar]
    assert [text for text in cases["accepted"] if not pattern.fullmatch(text)] == []
    assert [text for text in cases["refused"] if pattern.fullmatch(text)] == []


def test_a_job_spec_checks_names_and_env_by_the_grammars():
    for name in GRAMMARS["job_name"]["accepted"]:
        assert JobSpec(name=name, command=["python", "train.py"]).name == name and is_job_name(name)
    for name in GRAMMARS["job_name"]["refused"] + ["a" * (MAX_JOB_NAME_LENGTH + 1)]:
        assert not is_job_name(name)
        with pytest.raises(SpecError):
            JobSpec(name=name, command=["python", "train.py"])
    assert is_job_name("a" * MAX_JOB_NAME_LENGTH)
    for key in GRAMMARS["env_name"]["accepted"]:
        assert JobSpec(command=["python"], env={key: "1"}).env[key] == "1"
    for key in GRAMMARS["env_name"]["refused"]:
        with pytest.raises(SpecError):
            JobSpec(command=["python"], env={key: "1"})


def chart_validator(definition: str) -> jsonschema.Draft7Validator:
    schema = json.loads(CHART_SCHEMA.read_text())
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": schema["definitions"]})


def test_the_chart_schema_spells_the_quantity_grammar_the_same():
    assert json.loads(CHART_SCHEMA.read_text())["definitions"]["quantityString"]["pattern"] == QUANTITY["pattern"]


@pytest.mark.parametrize("definition", ["quantityString", "quantity"])
def test_the_chart_schema_passes_the_quantity_cases(definition):
    validator = chart_validator(definition)
    accepted = [*QUANTITY["accepted"], *QUANTITY["out_of_range"]]  # (the hub refuses the latter when it reads them)
    assert [text for text in accepted if not validator.is_valid(text)] == []
    assert [text for text in QUANTITY["refused"] if validator.is_valid(text)] == []


def test_the_quota_page_spells_the_quantity_grammar_the_same():
    literal = re.search(r"const QUANTITY = /(.+)/;", ADMIN_JS.read_text())
    assert literal and literal.group(1) == QUANTITY["pattern"]
