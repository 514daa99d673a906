"""Hypothesis strategies for hostile-but-plausible input: job specs, quantities, image
references and names, shared by the unit, local and cluster tiers.

The strategies are deliberately wider than what is valid: tests either check that what
is refused is refused with a SpecError/QuotaInputError naming the field, or keep only
what was accepted (`accepted_specs`) and check that the OS and the API server take it.
"""

from __future__ import annotations

import string

from hypothesis import strategies as st

from paddle_ext.errors import SpecError
from paddle_ext.quantity import LARGEST_COUNT
from paddle_ext.spec import MAX_RESTARTS, MAX_RUNTIME_SECONDS, MAX_WORKERS, JobSpec

# Text a hostile or careless user might send: every Unicode plane (lone surrogates and
# NUL included), shell and Kubernetes metacharacters, control characters.
NASTY = ["", " ", "\x00", "\n", "\r\n", "\t", "$(HOME)", "$$(X)", "$", "${PATH}", "`id`", "'; rm -rf / #",
         "\\", "\"", "%00", "..", "../../etc/passwd", "ü", "日本語", "\U0001F600", "\ud800", "\udcff",
         "\u202e", "\x7f", "-", "--help", "--master=evil:1", "a" * 300]
hostile_text = st.one_of(st.sampled_from(NASTY), st.text(max_size=40),
                         st.text(st.characters(codec="utf-8"), max_size=40),
                         st.text(st.characters(min_codepoint=0, max_codepoint=0x3F), max_size=20))

_digits = st.text(string.digits, min_size=1, max_size=22)
_number = st.one_of(
    _digits,
    st.builds(lambda a, b: f"{a}.{b}", _digits, st.text(string.digits, max_size=12)),
    st.builds(lambda b: f".{b}", _digits),
)
_suffix = st.one_of(
    st.sampled_from(["", "", "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.builds(lambda e, sign, d: f"{e}{sign}{d}", st.sampled_from("eE"), st.sampled_from(["", "+", "-"]),
              st.text(string.digits, min_size=1, max_size=5)),
)
# Quantity-shaped strings, mostly in Kubernetes' grammar, sometimes a little off.
quantity_text = st.one_of(
    st.builds(lambda n, s: n + s, _number, _suffix),
    st.builds(lambda n, s, pad: pad + n + s, _number, _suffix, st.sampled_from([" ", "+", "-", "0x"])),
    st.builds(lambda n, s, pad: n + s + pad, _number, _suffix, st.sampled_from([" ", "\n", "i", "b"])),
    st.sampled_from(["1", "500m", "2Gi", "0", "0.0001", "1e9999999999", "1Ei", "8Pi", "9Pi", ".5", "1.", "1e-3"]),
)

_lower = string.ascii_lowercase + string.digits
_component = st.text(_lower, min_size=1, max_size=8)
image_text = st.one_of(
    st.builds(lambda host, path, tag: f"{host}{'/'.join(path)}{tag}",
              st.sampled_from(["", "registry.example.com/", "localhost:5000/", "[::1]:5000/", "Reg.Example/"]),
              st.lists(st.one_of(_component, st.builds(lambda a, sep, b: a + sep + b, _component,
                                                       st.sampled_from([".", "_", "__", "-", "--"]), _component)),
                       min_size=1, max_size=3),
              st.one_of(st.just(""), st.builds(lambda t: ":" + t, st.text(string.ascii_letters + string.digits + "_.-",
                                                                          min_size=1, max_size=20)),
                        st.just("@sha256:" + "a" * 64))),
    hostile_text,
    st.sampled_from(["UPPER/case", "busybox ", "a" * 300, "paddle:3.3.1-cpu", "x@sha256:abc"]),
)

job_names = st.one_of(st.none(), st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z"), hostile_text)
env_names = st.one_of(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z"),
                      st.sampled_from(["PADDLE_MASTER", "PADDLE_TRAINER_ID", "JOB_COMPLETION_INDEX", "PATH", "1X"]))
counts = st.one_of(st.integers(min_value=-2, max_value=12), st.integers(min_value=-10**20, max_value=10**20),
                   st.sampled_from([100_000, 100_001, 2**63, 10**400]))

spec_data = st.fixed_dictionaries(
    {"command": st.one_of(
        st.builds(lambda first, rest: [first, *rest],
                  st.one_of(st.sampled_from(["python", "python3", "train.py", "./run.sh"]), hostile_text),
                  st.lists(hostile_text, max_size=6)),
        st.lists(hostile_text, max_size=3))},
    optional={
        "name": job_names,
        "workers": counts,
        "gpus_per_worker": counts,
        "cpu": quantity_text,
        "memory": quantity_text,
        "image": st.one_of(st.none(), image_text),
        "env": st.dictionaries(env_names, hostile_text, max_size=4),
        "max_runtime_seconds": st.one_of(st.none(), counts),
        "max_restarts": st.one_of(st.none(), counts),
    },
)


# Leaning towards valid: plain programs, counts in range, quantities in Kubernetes'
# grammar; hostile text where users put free text (arguments, env values).
plausible_spec_data = st.fixed_dictionaries(
    {"command": st.builds(lambda first, rest: [first, *rest],
                          st.sampled_from(["python", "python3", "train.py", "./run.sh", "/usr/bin/env"]),
                          st.lists(hostile_text, max_size=6))},
    optional={
        "name": st.from_regex(r"\A[a-z]([-a-z0-9]{0,48}[a-z0-9])?\Z"),
        "workers": st.one_of(st.integers(min_value=1, max_value=4), st.just(100_000)),
        "gpus_per_worker": st.one_of(st.integers(min_value=0, max_value=8), st.integers(min_value=0, max_value=2**53)),
        "cpu": st.builds(lambda n, s: n + s, _number, _suffix),
        "memory": st.builds(lambda n, s: n + s, _number, _suffix),
        "image": image_text,
        "env": st.dictionaries(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,15}\Z"), hostile_text, max_size=4),
        "max_runtime_seconds": st.one_of(st.none(), st.integers(min_value=1, max_value=31_622_400)),
        "max_restarts": st.one_of(st.none(), st.integers(min_value=0, max_value=1000)),
    },
)


def _accepted(data: dict) -> JobSpec | None:
    try:
        return JobSpec.from_dict(data)
    except SpecError:
        return None


# What JobSpec accepts out of the above, with a name (as the backends give it one).
accepted_specs = (plausible_spec_data.map(_accepted).filter(lambda spec: spec is not None)
                  .map(lambda spec: spec.with_name()))


# Specs that must be refused, each naming the field: (fields, the field named, words of the rule).
HOSTILE_SPECS = [
    # (the spec's fields, the field named, words of the rule)
    ({"command": ["python", "a\x00b"]}, "command", "NUL"),
    ({"command": ["python\x00"]}, "command", "NUL"),
    ({"command": ["python", "\ud800"]}, "command", "lone surrogate"),
    ({"command": ["--help"]}, "command", "must not start with '-'"),
    ({"command": ["-m", "evil"]}, "command", "must not start with '-'"),
    ({"command": ["python", "x" * 70_000]}, "command", "the most a job may carry is 65536"),
    ({"command": ["python"], "env": {"BIG": "x" * 70_000}}, "command", "the most a job may carry"),
    ({"env": {"A": "x\x00y"}}, "env", "NUL"),
    ({"env": {"A": "\udcff"}}, "env", "lone surrogate"),
    ({"env": {"PADDLE_MASTER": "evil:1"}}, "env", "read by Paddle's launcher"),
    ({"env": {"PADDLE_NNODES": "3"}}, "env", "read by Paddle's launcher"),
    ({"env": {"PADDLE_TRAINER_ID": "0"}}, "env", "read by Paddle's launcher"),
    ({"env": {"JOB_COMPLETION_INDEX": "0"}}, "env", "set by PaddleCloud"),
    ({"env": {"PADDLECLOUD_OUTPUT_DIR": "/"}}, "env", "set by PaddleCloud"),
    ({"env": {"A\n": "1"}}, "env", "not a valid environment variable name"),
    ({"cpu": "1e9999999999"}, "cpu", "out of the range"),
    ({"cpu": "1e99"}, "cpu", "more than Kubernetes can count"),
    ({"memory": "9Pi"}, "memory", "more than Kubernetes can count"),
    ({"memory": "1Ei"}, "memory", "more than Kubernetes can count"),
    ({"cpu": "0.0001"}, "cpu", "finer than Kubernetes keeps"),
    ({"cpu": "1u"}, "cpu", "finer than Kubernetes keeps"),
    ({"cpu": " 2"}, "cpu", "not a Kubernetes quantity"),
    ({"cpu": "2\n"}, "cpu", "not a Kubernetes quantity"),
    ({"cpu": "+2"}, "cpu", "not a Kubernetes quantity"),
    ({"workers": MAX_WORKERS + 1}, "workers", f"at most {MAX_WORKERS}"),
    ({"workers": 10**400}, "workers", f"at most {MAX_WORKERS}"),
    ({"gpus_per_worker": 2**63}, "gpus_per_worker", f"at most {LARGEST_COUNT}"),
    ({"max_runtime_seconds": MAX_RUNTIME_SECONDS + 1}, "max_runtime_seconds", f"at most {MAX_RUNTIME_SECONDS}"),
    ({"max_runtime_seconds": 10**400}, "max_runtime_seconds", "at most"),
    ({"max_restarts": -1}, "max_restarts", "at least 0"),
    ({"max_restarts": MAX_RESTARTS + 1}, "max_restarts", f"at most {MAX_RESTARTS}"),
    ({"max_restarts": True}, "max_restarts", "whole number"),
    ({"env": {"PADDLECLOUD_RESTART": "0"}}, "env", "set by PaddleCloud"),
    ({"name": "abc\n"}, "name", "lowercase"),
    ({"name": "a" * 300}, "name", "at most 50"),
    ({"image": "UPPER/case"}, "image", "must be lowercase"),
    ({"image": "busybox "}, "image", "image reference"),
    ({"image": "exa mple"}, "image", "image reference"),
    ({"image": "ex\x00a"}, "image", "image reference"),
    ({"image": "x@sha256:abc"}, "image", "image reference"),
    ({"image": "-x"}, "image", "image reference"),
    ({"image": "a" * 256}, "image", "at most 255"),
    ({"datasets": ["abc\n"]}, "datasets", "not a dataset name"),
]

