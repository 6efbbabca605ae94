"""``--kill LEVEL:SITE@SECONDS``: the options, and finding a site's executor JVM and Worker
daemon in a fake ``/proc`` (the real one is used by tests/cluster/test_cluster_spark.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkflux.model.errors import PlanError
from sparkflux.options import parse_kills
from sparkflux.runtime import proctree
from sparkflux.runtime.fault_specs import KillAt, KillProcess

MASTER = "spark://127.0.0.1:7077"
WORKER = ["java", "-cp", "x", proctree.WORKER_CLASS, MASTER, "--work-dir"]
EXECUTOR = ["java", "-cp", "x", proctree.EXECUTOR_CLASS, "--executor-id"]
DAEMON = ["python", "-m", "pyspark.daemon", "pyspark.worker"]


def fake_proc(root: Path, procs: dict[int, tuple[int, str, list[str], str]]) -> None:
    """``{pid: (ppid, comm, argv, cwd)}`` as /proc files."""
    for pid, (ppid, comm, argv, cwd) in procs.items():
        d = root / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm} x) S {ppid} {pid} 0 0\n")
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (d / "cwd").symlink_to(cwd)


@pytest.fixture
def cluster_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two Workers (10, 20) with one executor each (11, 21); sites 0 and 2 under executor 11,
    1 and 3 under 21; executor 31 was re-parented to init; 40/41 a local-mode site under the
    driver's JVM."""
    proc = tmp_path / "proc"
    proc.mkdir()
    w1, w2 = tmp_path / "work-1", tmp_path / "work-2"
    for d in (w1 / "app" / "0", w2 / "app" / "1", w1 / "app" / "2"):
        d.mkdir(parents=True)
    fake_proc(proc, {
        10: (1, "java", WORKER + [str(w1)], "/"),
        20: (1, "java", WORKER + [str(w2)], "/"),
        11: (10, "java", EXECUTOR + ["0"], str(w1 / "app" / "0")),
        21: (20, "java", EXECUTOR + ["1"], str(w2 / "app" / "1")),
        31: (1, "java", EXECUTOR + ["2"], str(w1 / "app" / "2")),
        12: (11, "python", DAEMON, "/"), 22: (21, "python", DAEMON, "/"),
        32: (31, "python", DAEMON, "/"),
        100: (12, "pyt", DAEMON, "/"), 102: (12, "pyt", DAEMON, "/"),
        101: (22, "pyt", DAEMON, "/"), 103: (22, "pyt", DAEMON, "/"),
        104: (32, "pyt", DAEMON, "/"),
        40: (1, "java", ["java", "org.apache.spark.deploy.SparkSubmit"], "/"),
        41: (40, "python", DAEMON, "/"), 42: (41, "python", DAEMON, "/"),
        50: (1, "python", ["python", "-c", "pass"], "/"),
    })
    monkeypatch.setattr(proctree, "PROC", proc)
    return proc


def test_a_sites_executor_and_worker_are_found(cluster_proc: Path) -> None:
    assert proctree.ancestors(100) == [12, 11, 10]
    assert [proctree.holder(100, lv) for lv in proctree.LEVELS] == [100, 11, 10]
    assert [proctree.holder(103, lv) for lv in proctree.LEVELS] == [103, 21, 20]


def test_an_orphaned_executor_finds_its_worker_by_its_work_dir(cluster_proc: Path) -> None:
    assert proctree.holder(104, "executor") == 31
    assert proctree.holder(104, "worker") == 10


def test_nothing_is_found_in_local_mode_or_for_other_processes(cluster_proc: Path) -> None:
    # the JVM above a local-mode site is the driver's: never an executor to kill
    assert [proctree.holder(42, lv) for lv in ("executor", "worker")] == [None, None]
    assert [proctree.holder(50, lv) for lv in proctree.LEVELS] == [None] * 3  # no site
    assert proctree.holder(999, "worker") is None  # gone (or on another machine)


def test_the_holder_of_the_most_sites(cluster_proc: Path) -> None:
    groups = proctree.group_by_holder({0: 100, 1: 101, 2: 102, 3: 103}, "worker")
    assert groups == {10: [0, 2], 20: [1, 3]}
    assert proctree.most_sites(groups) == 10  # a tie: the one holding site 0
    groups = proctree.group_by_holder({1: 101, 2: 102, 3: 103, 4: 104}, "worker")
    assert groups == {20: [1, 3], 10: [2, 4]} and proctree.most_sites(groups) == 20
    assert proctree.most_sites(proctree.group_by_holder({0: 100, 1: 101, 3: 103}, "worker")) == 20
    assert proctree.most_sites({}) is None


def test_kill_options() -> None:
    specs = ["1@3", "worker:most@20", "executor:2@1.5", "python:0@0"]
    assert parse_kills(specs, 4, MASTER) == (
        KillAt(1, 3.0), KillProcess("worker", None, 20.0), KillProcess("executor", 2, 1.5),
        KillProcess("python", 0, 0.0))
    for bad, match in [("jvm:1@2", "not one of python, executor, worker"),
                       ("worker:4@2", r"site must be in 0..3 or 'most'"),
                       ("worker:1", "write LEVEL:SITE@WHEN"),
                       ("worker:x@1", "write LEVEL:SITE@WHEN")]:
        with pytest.raises(PlanError, match=match):
            parse_kills([bad], 4, MASTER)
    with pytest.raises(PlanError, match="needs a Spark standalone cluster here"):
        parse_kills(["worker:most@20"], 4, "local[4]")
    # no --master: the session's, checked when the run starts (job.launch)
    assert parse_kills(["worker:most@20"], 4, None) == (KillProcess("worker", None, 20.0),)
