"""PaddleCloud Hub side by side with the tools a user would otherwise run (issue 15).

Runs every section (or those named with --only), checks correctness in the same runs,
and writes benchmarks/results.md: the date, machine, load, versions, every goal's row
with its ratio, and each section's figures and commands. `make bench` runs it all;
`make bench-quick` runs smaller sizes (`--quick`). Every cluster it starts is stopped.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import REPO, LoadSampler, Row, Section, cpu_model, loadavg, log, tool, verdict, versions  # noqa: E402

if REPO not in sys.path:
    sys.path.insert(1, REPO)

SECTIONS = ("cli", "logs", "follow", "submit", "list", "spawn", "queue", "hub-scale", "follow-node", "local",
            "live")
KWOK_SECTIONS = ("cli", "logs", "follow", "submit", "list", "spawn")

FULL = {"lines": [10_000, 100_000], "read_runs": 7, "cli_runs": 15, "list_jobs": 1000, "list_runs": 7,
        "submit_workers": 64, "submit_runs": 3, "spawns": 100, "spawn_runs": 1, "local_runs": 5,
        "follow_workers": 16, "follow_rate": 200, "follow_seconds": 60,
        "live_lines": 200, "live_runs": 3, "queue_jobs": 1000, "queue_runs": 20, "queue_list_runs": 7,
        "hub": {"users": 1000, "nodes": 500, "jobs": 200, "window": 60.0, "page_requests": 20, "cli_runs": 15}}
QUICK = {"lines": [10_000, 50_000], "read_runs": 3, "cli_runs": 7, "list_jobs": 200, "list_runs": 3,
         "submit_workers": 64, "submit_runs": 1, "spawns": 20, "spawn_runs": 1, "local_runs": 2,
         "follow_workers": 16, "follow_rate": 200, "follow_seconds": 15,
         "live_lines": 100, "live_runs": 2, "queue_jobs": 200, "queue_runs": 10, "queue_list_runs": 3,
         "hub": {"users": 200, "nodes": 100, "jobs": 40, "window": 30.0, "page_requests": 10, "cli_runs": 7}}
# Smoke: every section's code path and correctness checks at the smallest size that still
# exercises them (seconds each; tests/local and tests/cluster run it in `make test`, so a
# rename breaks a test, not the next measurement). Its figures mean nothing.
SMOKE = {"lines": [20], "read_runs": 1, "cli_runs": 1, "list_jobs": 3, "list_runs": 1,
         "submit_workers": 4, "submit_runs": 1, "spawns": 2, "spawn_runs": 1, "local_runs": 1,
         "follow_workers": 2, "follow_rate": 20, "follow_seconds": 2,
         "live_lines": 5, "live_runs": 1, "queue_jobs": 5, "queue_runs": 1, "queue_list_runs": 1,
         "hub": {"users": 5, "nodes": 2, "jobs": 2, "window": 2.0, "page_requests": 2, "cli_runs": 1}}


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer runs")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, of {', '.join(SECTIONS)}")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest sizes, checks only (the tests' run); writes no results.md unless --out")
    parser.add_argument("--out", default=None, help="where to write the results (default benchmarks/results.md)")
    parser.add_argument("--cluster-state", default=None, metavar="DIR",
                        help="run follow-node on this running cluster with the real node (its state dir, as "
                             "`tools/k8s/cluster.py up` makes it) instead of starting one of its own")
    args = parser.parse_args(argv)
    if args.quick and args.smoke:
        parser.error("--quick and --smoke are two different sizes; give one")
    size = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.out is None and not args.smoke:
        args.out = os.path.join(HERE, "results.md")
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    # SIGTERM and SIGHUP unwind like Ctrl-C, so every cluster and process is stopped.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGHUP, _interrupted)
    # Every process started here (our CLI, the notebook server, the spawn driver, a local
    # job's supervisor) imports paddle_ext from this checkout, whatever the venv points at.
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and p != REPO])
    # As in an activated venv (`make bench` does the same): `python` in a job's command is
    # this interpreter, not whatever else is first on PATH (e.g. a pyenv shim, ~0.3 s a start).
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    # A user's installed package has its bytecode compiled (pip does it); this machine's
    # PYTHONDONTWRITEBYTECODE=1 would make every fresh process compile paddle_ext again.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    import paddle_ext

    if os.path.dirname(os.path.dirname(os.path.abspath(paddle_ext.__file__))) != REPO:
        raise SystemExit(f"paddle_ext comes from {paddle_ext.__file__}, not from {REPO}")

    from tools.k8s.cluster import default_bin_dir

    bin_dir = os.environ.get("PADDLECLOUD_K8S_BIN_DIR") or default_bin_dir()  # as the cluster tier reads it
    kubectl = tool("kubectl", bin_dir)
    ours = tool("paddlecloud")
    info = versions(kubectl)
    info["paddlecloud"] = f"{ours} (paddle_ext from {os.path.dirname(paddle_ext.__file__)})"
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = loadavg()
    sections: list[Section] = []

    def run_section(name, make):
        if name not in wanted:
            return
        log(f"=== {name}")
        t0 = time.monotonic()
        with LoadSampler() as load:
            try:
                section = make()
            except Exception as exc:  # noqa: BLE001 (a failed section is reported, the others still run)
                traceback.print_exc()
                section = Section(name, [Row(name, "—", "—", "—", "", None, f"failed: {exc}")],
                                  f"The section failed: `{type(exc).__name__}: {exc}`", correct=False)
        section.load = load.describe()
        section.seconds = time.monotonic() - t0
        log(f"=== {name} took {section.seconds:.0f}s")
        sections.append(section)

    try:
        if any(s in wanted for s in KWOK_SECTIONS):
            from kwok import KwokBench, cli_section, list_section, logs_section, submit_section

            nodes = max(2, -(-size["submit_workers"] // 8))
            with KwokBench(bin_dir, kubectl, [ours], nodes=nodes) as bench:
                run_section("cli", lambda: cli_section(bench, size["cli_runs"]))
                run_section("logs", lambda: logs_section(bench, size["lines"], size["read_runs"]))
                if "follow" in wanted:
                    from follow import follow_section

                    run_section("follow", lambda: follow_section(bench, [ours], size["follow_workers"],
                                                                 size["follow_rate"], size["follow_seconds"]))
                run_section("submit", lambda: submit_section(bench, size["submit_workers"], size["submit_runs"]))
                run_section("list", lambda: list_section(bench, size["list_jobs"], size["list_runs"]))
                if "spawn" in wanted:
                    from spawn import spawn_section

                    run_section("spawn", lambda: spawn_section(bench, size["spawns"], size["spawn_runs"]))
        if "queue" in wanted:
            from queueing import queue_cluster_section

            run_section("queue", lambda: queue_cluster_section(bin_dir, kubectl, [ours], size["queue_jobs"],
                                                               size["queue_runs"], size["queue_list_runs"]))
        if "hub-scale" in wanted:  # a cluster of its own: its nodes, and a hub against it
            from hub_scale import Size, hub_scale_section

            run_section("hub-scale", lambda: hub_scale_section(bin_dir, kubectl, [ours], Size(**size["hub"]),
                                                               smoke=args.smoke))
        if "follow-node" in wanted:
            from follow import follow_node_section

            run_section("follow-node", lambda: follow_node_section(bin_dir, kubectl, [ours], size["follow_workers"],
                                                                   size["follow_rate"], size["follow_seconds"],
                                                                   cluster_state=args.cluster_state))
        if "local" in wanted:
            from local_job import local_section

            run_section("local", lambda: local_section([ours], size["local_runs"]))
        if "live" in wanted:
            from live_lines import live_section

            run_section("live", lambda: live_section([ours], size["live_lines"], size["live_runs"]))
    except KeyboardInterrupt:
        log("interrupted: clusters and processes stopped; results.md left as it was")
        return 130

    text = report(sections, info, started, load_before, args)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    if args.out:
        log(f"wrote {args.out}")
    return 0 if all(s.correct for s in sections) else 1


def report(sections: list[Section], info: dict, started, load_before: float, args) -> str:
    elapsed = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    versions_line = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("os", "commit"))
    out = [
        "# Benchmarks: PaddleCloud Hub side by side with kubectl, KubeSpawner and Paddle's launcher",
        "",
        f"Written by `make bench{'-quick' if args.quick else ''}` (`benchmarks/run.py"
        f"{' --quick' if args.quick else ' --smoke' if args.smoke else ''}`); see benchmarks/README.md for the "
        "method of each row." + (" **Smoke size: checks only, the figures mean nothing.**" if args.smoke else ""),
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}, {elapsed / 60:.1f} minutes in all",
        f"- Machine: {os.cpu_count()} CPUs ({cpu_model()}), {mem_gib():.0f} GiB, {info['os']}",
        f"- Load (1-minute average; other sessions share this machine): {load_before:.1f} at the start; "
        "per section below",
        f"- Versions: {versions_line}",
        f"- Code: commit {info['commit']}",
        "",
        "## Goals of issue 15",
        "",
        "| what | ours | baseline | ratio | goal | result |",
        "|---|---|---|---|---|---|",
    ]
    for section in sections:
        for row in section.rows:
            note = f" {row.note}" if row.note else ""
            out.append(f"| {row.what} | {row.ours} | {row.baseline} | {row.ratio} | {row.goal} | "
                       f"{verdict(row.met)}{note} |")
    out += ["", "Every row's correctness was checked in the same runs: " +
            ("all checks passed." if all(s.correct for s in sections) else
             "**some checks failed** (see the sections marked below)."), ""]
    for section in sections:
        out += [f"## {section.title}", "",
                f"{section.seconds:.0f} s; load {section.load}" + ("" if section.correct else
                                                                     "; **a correctness check failed**"), "",
                section.details, ""]
    return "\n".join(out)


def mem_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
