"""The local backend's queue decisions (paddle_ext.backends.local_queue, pure): what can
never start, what a job waits for, which queued jobs start (strict FIFO), where each
stands and when it is estimated to start; and how a queued job reads in one line."""

from __future__ import annotations

import dataclasses
import datetime
import html
from decimal import Decimal

import pytest

from paddle_ext.backends.local_queue import (ESTIMATE_BASIS, QUEUE_NAME, Holder, Room, Waiting, admit,
                                             estimated_starts, never_fits, queue_order, queue_states, shortage)
from paddle_ext.jobs import QueueState
from paddle_ext.progress import queue_detail, queue_line
from paddle_ext.quota.model import JobUsage, Limits
from paddle_ext.timestamps import to_iso

T0 = 1_800_000_000.0  # an arbitrary moment, epoch seconds


def job(name, gpus=0, cpu="1", workers=1):
    return JobUsage(name, gpus=Decimal(gpus), cpu=Decimal(cpu) * workers, memory=Decimal(0), pods=Decimal(workers))


def iso(seconds):
    return to_iso(datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc))


@pytest.mark.parametrize("request_, room, expected", [
    (job("a", gpus=16), Room(machine_gpus=8),
     "Needs 16 GPUs; this machine has 8, so the job could never start. Ask for fewer workers or GPUs per worker."),
    (job("a", gpus=4), Room(Limits(gpus=2), machine_gpus=8),
     "Needs 4 GPUs; your quota is 2, so the job could never start. Ask for less."),
    (job("a", gpus=4), Room(Limits(gpus=8), machine_gpus=2),
     "Needs 4 GPUs; this machine has 2, so the job could never start. Ask for fewer workers or GPUs per worker."),
    (job("a", cpu="3", workers=2), Room(Limits(cpu="4")),
     "Needs 6 CPU; your quota is 4, so the job could never start. Ask for less."),
    (job("a"), Room(Limits(running_jobs=0)), "Your quota allows no running jobs, so the job could never start."),
    (job("a", gpus=8), Room(Limits(gpus=8, running_jobs=1), machine_gpus=8), None),
    (job("a", gpus=100), Room(), None),  # nothing counted: nothing refused
])
def test_never_fits(request_, room, expected):
    assert never_fits(request_, room) == expected


def test_shortage_names_what_is_missing_with_the_numbers():
    room = Room(Limits(running_jobs=2, cpu="8"), machine_gpus=8)
    assert shortage(job("c"), room, [job("a"), job("b")]) == "a free running-job slot (2 of 2 running)"
    assert shortage(job("c", gpus=4), room, [job("a", gpus=6)]) == "2 more GPUs (6 of 8 in use)"
    assert shortage(job("c", gpus=3), room, [job("a", gpus=6)]) == "1 more GPU (6 of 8 in use)"
    assert shortage(job("c", cpu="5"), room, [job("a", cpu="4")]) == "1 more CPU (4 of 8 in use)"
    assert shortage(job("c", gpus=2), room, [job("a", gpus=6)]) is None


def test_admit_is_strict_fifo_a_small_job_never_overtakes_a_big_one():
    room = Room(Limits(running_jobs=3), machine_gpus=8)
    running = [job("a", gpus=6)]
    assert admit([job("big", gpus=4), job("small", gpus=1)], running, room) == []
    assert admit([job("small", gpus=1), job("big", gpus=4)], running, room) == ["small"]
    assert admit([job("x", gpus=1), job("y", gpus=1), job("z", gpus=1)], [], room) == ["x", "y", "z"]
    assert admit([job("x"), job("y"), job("z")], [job("a")], room) == ["x", "y"]  # the running-jobs cap
    assert admit([], running, room) == []


def test_queue_order_is_the_order_jobs_joined():
    assert queue_order({"late": 3, "early": 1, "b": 2, "a": 2}) == ["early", "a", "b", "late"]


def test_estimated_starts_replay_the_queue_against_the_running_jobs_time_limits():
    room = Room(Limits(running_jobs=2))
    running = [Holder(job("a"), ends=T0 + 600), Holder(job("b"), ends=T0 + 60)]
    queued = [Waiting(job("c"), runtime=300), Waiting(job("d"), runtime=None), Waiting(job("e"), runtime=100)]
    # c takes b's slot at +60 and ends at +360, when d takes it (and never ends: no limit);
    # e takes a's slot at +600.
    assert estimated_starts(queued, running, room, T0) == {"c": T0 + 60, "d": T0 + 360, "e": T0 + 600}
    unbounded = [Holder(job("a"), ends=None), Holder(job("b"), ends=None)]
    assert estimated_starts(queued[:1], unbounded, room, T0) == {"c": "a"}


def test_queue_states_say_position_what_each_waits_for_and_the_estimate():
    room = Room(Limits(running_jobs=1), machine_gpus=8)
    running = [Holder(job("a", gpus=6), ends=T0 + 120)]
    queued = [Waiting(job("b", gpus=4), runtime=60), Waiting(job("c"), runtime=None)]
    states = queue_states(queued, running, room, T0)
    assert states["b"] == QueueState(QUEUE_NAME, 1, 0, "a free running-job slot (1 of 1 running)", iso(T0 + 120),
                                     ESTIMATE_BASIS)
    assert states["c"] == QueueState(QUEUE_NAME, 2, 1, "a free running-job slot (1 of 1 running)", iso(T0 + 180),
                                     ESTIMATE_BASIS)
    behind = queue_states([Waiting(job("b", gpus=9)), Waiting(job("c"))], [], Room(machine_gpus=16), T0)
    assert behind["c"].waiting_for == "the 1 job ahead of it to start"
    endless = queue_states(queued, [Holder(job("a", gpus=6))], room, T0)
    assert (endless["b"].estimated_start, endless["b"].estimate_basis) == (
        None, "no estimate: job a has no time limit (max runtime)")


def test_queue_line_reads_as_one_line():
    state = QueueState(QUEUE_NAME, 2, 1, "4 more GPUs (6 of 8 in use)", "2026-12-02T14:05:00Z", ESTIMATE_BASIS)
    assert queue_line(state) == ("Queued · position 2 in this machine's queue · needs 4 more GPUs (6 of 8 in use)"
                                 " · starts ~14:05 UTC (estimate)")
    no_estimate = QueueState("team vision's queue", 3, 5, "4 more GPUs", None, "no estimate: job a has no time limit")
    assert queue_detail(no_estimate) == ("position 3 in team vision's queue · 5 jobs ahead · needs 4 more GPUs · "
                                         "no estimate: job a has no time limit")
    assert queue_detail(QueueState("the queue")) == "in the queue"


def test_a_queued_job_in_the_monitor_the_launcher_and_the_cell_handle():
    from paddle_ext.jobs import Job, Phase
    from paddle_ext.magic import handle_state
    from paddle_ext.widgets.launcher import launch_message
    from paddle_ext.widgets.monitor import job_detail

    state = QueueState(QUEUE_NAME, 2, 1, "4 more GPUs (6 of 8 in use)", "2026-12-02T14:05:00Z", ESTIMATE_BASIS)
    queued = Job(name="resnet-<b>", phase=Phase.QUEUED, workers=2, spec={}, message="Waiting in line.", queue=state)
    running = Job(name="resnet", phase=Phase.RUNNING, workers=2, spec={}, message="")
    line = "position 2 in this machine's queue · needs 4 more GPUs (6 of 8 in use) · starts ~14:05 UTC (estimate)"
    assert job_detail(queued) == line and job_detail(running) == ""
    assert launch_message(queued) == f"Queued <b>resnet-&lt;b&gt;</b> &mdash; {html.escape(line)}"
    assert launch_message(running) == "Started <b>resnet</b>"
    assert handle_state(queued) == "Queued · " + line and handle_state(running) == "Running"


def test_a_queued_job_counts_no_gpu_hours_and_holds_no_quota():
    from paddle_ext.jobs import Job, Phase
    from paddle_ext.quota.model import Effective, job_record, report

    spec = {"workers": 2, "gpus_per_worker": 4}
    queued = Job(name="q", phase=Phase.QUEUED, workers=2, spec=spec, created="2026-12-01T00:00:00Z")
    assert job_record(queued) is None
    assert job_record(dataclasses.replace(queued, phase=Phase.RUNNING)).gpus == 8
    quota = report("alice", Effective(Limits(), {}), [queued, dataclasses.replace(queued, name="r", phase=Phase.RUNNING)],
                   datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc))
    assert (quota.running, quota.used["gpus"], quota.used["running_jobs"]) == (("r",), 8, 1)
