from paddle_ext.launch import launch_argv
from paddle_ext.spec import JobSpec


def test_launch_command_line_is_the_design_one():
    spec = JobSpec(name="resnet", command=["python", "train.py", "--lr", "0.1"], workers=4, gpus_per_worker=2)
    assert launch_argv(spec, "resnet-0.resnet:36000", "$(JOB_COMPLETION_INDEX)") == [
        "python", "-m", "paddle.distributed.launch",
        "--master", "resnet-0.resnet:36000", "--nnodes", "4", "--rank", "$(JOB_COMPLETION_INDEX)",
        "--nproc_per_node", "2", "--job_id", "resnet",
        "python", "train.py", "--lr", "0.1",
    ]


def test_cpu_workers_run_one_trainer_and_local_pins_host():
    spec = JobSpec(name="j", command=["python", "t.py"], workers=2)
    argv = launch_argv(spec, "127.0.0.1:1234", "1", python="/venv/bin/python", log_dir="/tmp/l", host="127.0.0.1")
    assert argv[:3] == ["/venv/bin/python", "-m", "paddle.distributed.launch"]
    assert argv[argv.index("--nproc_per_node") + 1] == "1"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--log_dir") + 1] == "/tmp/l"
    assert argv[-2:] == ["python", "t.py"]
