"""Framework noise vs the user's own output, on real PaddlePaddle logs (pure).

tests/unit/data/*.log are real merged logs (see test_metrics.py for how they were made)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddle_ext.loglines import FrameworkFilter, framework_flags, prefix_line, split_prefix, users_lines

DATA = Path(__file__).resolve().parent / "data"


def test_prefix_round_trip():
    assert prefix_line(12, "hello") == "[worker-12] hello"
    assert split_prefix("[worker-12] hello") == (12, "hello")
    assert split_prefix("[worker-x] hello") == (None, "[worker-x] hello")
    assert split_prefix("plain") == (None, "plain")


def test_two_worker_paddle_log_keeps_exactly_the_users_lines():
    lines = (DATA / "paddle_fit_2_workers_verbose2.log").read_text().splitlines()
    mine = users_lines(lines)
    assert mine == [
        "[worker-0] Epoch 1/2",
        "[worker-0] step 2/4 - loss: 0.9430 - acc: 0.3281 - 10ms/step",
        "[worker-0] step 4/4 - loss: 0.6278 - acc: 0.4062 - 7ms/step",
        "[worker-0] Eval begin...",
        "[worker-0] step 1/1 - loss: 0.7450 - acc: 0.4531 - 6ms/step",
        "[worker-0] Eval samples: 64",
        "[worker-0] Epoch 2/2",
        "[worker-0] step 2/4 - loss: 0.5358 - acc: 0.5625 - 4ms/step",
        "[worker-0] step 4/4 - loss: 0.4123 - acc: 0.6406 - 3ms/step",
        "[worker-0] Eval begin...",
        "[worker-0] step 1/1 - loss: 0.5837 - acc: 0.6094 - 8ms/step",
        "[worker-0] Eval samples: 64",
        "[worker-0] user line: done",
        "[worker-1] user line: done",
    ]
    assert len(lines) - len(mine) > 100  # what the toggle hides


def test_single_worker_log_without_prefixes():
    lines = (DATA / "paddle_fit_1_worker_verbose1.log").read_text().splitlines()
    mine = users_lines(lines)
    assert mine[0] == "Epoch 1/2" and mine[-1] == "user line: done"
    assert not any(line.startswith(("LAUNCH", "/")) or "warnings.warn" in line or "return tensor(" in line
                   for line in mine)


@pytest.mark.parametrize("line", [
    "I1130 09:33:30.985277 17370 tcp_utils.cc:109] Retry to connect to 127.0.0.1:49140",
    "W1130 09:33:30.985277 17370 gpu_resources.cc:119] Please NOTE: device: 0, GPU Compute Capability: 8.0",
    "E1130 09:33:30.985277    17 collective.cc:9] something the framework logs",
    "LAUNCH INFO 2026-11-30 09:33:28,711 auto_cluster_config: 0",
    "LAUNCH WARNING 2026-11-30 09:33:28,707 Host ip reset to 127.0.0.1",
    "[2026-11-30 09:33:29,172] [    INFO] _client.py:1025 - HTTP Request: GET http://127.0.0.1:49551/healthy",
    "/usr/local/lib/python3.11/dist-packages/paddle/fluid/x.py:1: DeprecationWarning: old API",
    "/opt/paddle/phi/kernels/gpu/x.cu:12:5: warning: unused variable 'y'",
    "The loss value printed in the log is the current step, and the metric is the average value of previous steps.",
])
def test_framework_lines(line):
    assert FrameworkFilter().is_framework(line)
    assert FrameworkFilter().is_framework(prefix_line(3, line))


@pytest.mark.parametrize("line", [
    "rank 0: epoch 1/3 loss 0.35",
    "/home/alice/train.py:12: UserWarning: my own warning",  # the user's own code
    "  indented user output",
    "I think this is fine",
    "Traceback (most recent call last):",
    "",
])
def test_users_lines_stay(line):
    assert not FrameworkFilter().is_framework(line)


def test_banner_and_warning_source_lines_are_tracked_per_worker():
    lines = [
        "[worker-0] ======================= Modified FLAGS detected =======================",
        "[worker-1] rank 1 says hi",
        "[worker-0] FLAGS(name='FLAGS_x', current_value=True, default_value=False)",
        "[worker-1] /venv/lib/python3.11/site-packages/paddle/a.py:3: UserWarning: noise",
        "[worker-0] =======================================================================",
        "[worker-1]   warnings.warn(msg)",
        "[worker-0] after the banner",
        "[worker-1]   indented, but not right after a warning any more",
    ]
    assert framework_flags(lines) == [True, False, True, True, True, True, False, False]


def test_my_output_only_also_hides_metric_records():
    lines = ["[worker-0] PADDLECLOUD_METRIC {\"step\": 1, \"values\": {}}", "[worker-0] mine",
             "PADDLECLOUD_METRIC {}", "PADDLECLOUD_METRIC_SOMETHING_ELSE is mine"]
    assert users_lines(lines) == ["[worker-0] mine", "PADDLECLOUD_METRIC_SOMETHING_ELSE is mine"]
    assert framework_flags(lines) == [False] * 4
