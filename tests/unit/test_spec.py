from decimal import Decimal

import pytest

from paddle_ext.errors import SpecError
from paddle_ext.spec import JobSpec, generate_name, parse_quantity


def problems_of(**fields):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"command": ["python", "train.py"], **fields})
    return info.value.problems


def test_defaults_and_round_trip():
    spec = JobSpec.from_dict({"command": ["python", "train.py"], "workers": 2, "env": {"A": "1"}})
    assert spec.workers == 2 and spec.gpus_per_worker == 0 and spec.cpu == "1"
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_spec_is_immutable():
    spec = JobSpec(command=["python", "x.py"], env={"A": "1"})
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        spec.workers = 3
    with pytest.raises(TypeError):
        spec.env["B"] = "2"
    assert spec.command == ("python", "x.py")


@pytest.mark.parametrize("fields, field, words", [
    ({"workers": 0}, "workers", "at least 1"),
    ({"workers": True}, "workers", "whole number"),
    ({"workers": "2"}, "workers", "whole number"),
    ({"gpus_per_worker": -1}, "gpus_per_worker", "at least 0"),
    ({"name": "Train"}, "name", "lowercase"),
    ({"name": "a/b"}, "name", "lowercase"),
    ({"name": "-ab"}, "name", "start with a letter"),
    ({"name": "x" * 51}, "name", "at most 50"),
    ({"command": []}, "command", "non-empty"),
    ({"command": "python train.py"}, "command", "list"),
    ({"command": [""]}, "command", "must not be empty"),
    ({"command": ["python", 3]}, "command", "string"),
    ({"cpu": "two"}, "cpu", "quantity"),
    ({"cpu": "0"}, "cpu", "greater than zero"),
    ({"memory": 4}, "memory", "string quantity"),
    ({"env": {"1A": "x"}}, "env", "not a valid environment variable name"),
    ({"env": {"A": 1}}, "env", "must be a string"),
    ({"datasets": ["Bad Name"]}, "datasets", "not a dataset name"),
    ({"datasets": ["a", "a"]}, "datasets", "more than once"),
    ({"max_runtime_seconds": 0}, "max_runtime_seconds", "at least 1"),
    ({"image": "has space"}, "image", "must be an image reference"),
    ({"colour": "red"}, "colour", "unknown field"),
])
def test_rejections_name_the_field_and_rule(fields, field, words):
    problems = problems_of(**fields)
    assert field in problems
    assert words in problems[field]


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict({"command": [], "workers": 0, "gpus_per_worker": -2})
    assert set(info.value.problems) == {"command", "workers", "gpus_per_worker"}
    assert "workers: must be at least 1" in info.value.message


def test_missing_command_and_non_object():
    assert "command" in problems_of_raw({})
    assert "spec" in problems_of_raw(["python"])


def problems_of_raw(data):
    with pytest.raises(SpecError) as info:
        JobSpec.from_dict(data)
    return info.value.problems


@pytest.mark.parametrize("text, value", [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("2Gi", Decimal(2 * 2**30)),
    ("1.5", Decimal("1.5")), ("1e3", Decimal(1000)), ("128M", Decimal(128_000_000)),
])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1 Gi", "-1", "1GB", "Gi"])
def test_parse_quantity_rejects(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_generated_names_are_valid_and_derived_from_script():
    name = generate_name(("python", "scripts/Train_ResNet.py"))
    assert name.startswith("train-resnet-")
    JobSpec(command=["x"], name=name)  # valid
    assert generate_name(("sh", "-c", "echo")).startswith("job-")
    assert generate_name(("python", "train.py")) != generate_name(("python", "train.py"))


def test_with_name_keeps_an_explicit_name():
    assert JobSpec(command=["x"], name="mine").with_name().name == "mine"
    assert JobSpec(command=["x"]).with_name().name.startswith("job-")


@pytest.mark.parametrize("fields, words", [
    ({"max_restarts": -1}, "at least 0"),
    ({"max_restarts": 1.5}, "whole number"),
    ({"max_restarts": "2"}, "whole number"),
    ({"max_restarts": 1001}, "at most 1000"),
])
def test_max_restarts_is_a_non_negative_whole_number(fields, words):
    assert words in problems_of(**fields)["max_restarts"]


def test_max_restarts_left_out_is_the_sites_and_round_trips():
    assert JobSpec(command=["python", "t.py"]).max_restarts is None
    spec = JobSpec.from_dict({"command": ["python", "t.py"], "max_restarts": 3})
    assert spec.max_restarts == 3 and JobSpec.from_dict(spec.to_dict()) == spec


def test_the_site_bounds_restarts_and_fills_in_its_default():
    from paddle_ext.options import JobOptions

    options = JobOptions("local", max_restarts=2, default_max_restarts=1)
    with pytest.raises(SpecError) as info:
        options.check(JobSpec(command=["python", "t.py"], max_restarts=3))
    assert info.value.problems == {"max_restarts": "must be at most 2 here (got 3)"}
    assert options.complete(JobSpec(command=["python", "t.py"])).max_restarts == 1
    assert options.complete(JobSpec(command=["python", "t.py"], max_restarts=0)).max_restarts == 0
    assert options.to_dict()["bounds"]["max_restarts"] == {"min": 0, "max": 2}
    # A default above the site's maximum is capped, not offered.
    assert JobOptions("local", max_restarts=1, default_max_restarts=5).defaults()["max_restarts"] == 1
