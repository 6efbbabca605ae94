"""A Spark standalone cluster on this machine for the tests: one master and N workers, started
with the pip pyspark's ``spark-class`` exactly as ``scripts/cluster.sh`` starts them, but on a
free port, with web UIs on port 0 and everything (logs, work dirs, the drivers' Spark
configuration) in a directory of its own, so that it never meets a cluster someone else runs
on the default port 7077. ``stop`` kills the process groups it started, and only those.

A driver of this cluster runs with ``driver_env()``: ``PYTHONPATH`` is this checkout (for the
executors' Python workers too: the workers' JVMs were started with it). Nothing else: the
driver waits for the cluster's executors itself (``spark/session_check.py``) and lays the
replicas out over them (``dataflow/placement.py``), as it must for any user.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home(python: str = sys.executable) -> str:
    out = subprocess.run([python, "-c", "import os, pyspark; "
                          "print(os.path.dirname(pyspark.__file__))"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


class StandaloneCluster:
    """``workers`` workers of ``cores`` cores each, under ``root``."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 3, memory: str = "2g",
                 python: str = sys.executable) -> None:
        self.root, self.workers, self.cores, self.memory = root, workers, cores, memory
        self.python = python
        self.port = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ, SPARK_HOME=spark_home(python),
                        PYTHONPATH=os.pathsep.join(
                            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
        self.env.pop("SPARK_CONF_DIR", None)  # Spark's defaults, as a user's would be

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def driver_env(self) -> dict[str, str]:
        return dict(self.env)

    # -- starting -------------------------------------------------------------------------
    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the daemon keeps it
        cls = str(Path(self.env["SPARK_HOME"]) / "bin" / "spark-class")
        proc = subprocess.Popen([cls, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env, cwd=self.root,
                                start_new_session=True)  # its own process group
        log.close()
        self.procs[name] = proc
        return proc

    def _wait_for(self, name: str, text: str, since: int = 0, timeout: float = 60.0) -> None:
        path = self.root / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and text in path.read_text(errors="replace")[since:]:
                return
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.1)
        tail = path.read_text(errors="replace")[-3000:] if path.exists() else ""
        raise RuntimeError(f"cluster: {name} did not start ({text!r} not in its log):\n{tail}")

    def _log_size(self, name: str) -> int:
        path = self.root / f"{name}.log"
        return len(path.read_text(errors="replace")) if path.exists() else 0

    def start(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a free port may be taken before the master binds it
            self.port = free_port()
            self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port",
                        str(self.port), "--webui-port", "0")
            try:
                self._wait_for("master", "I have been elected leader",
                               since=0 if attempt == 0 else self._log_size("master") - 1)
                break
            except RuntimeError:
                self._kill("master")
                if attempt == 2:
                    raise
        for i in range(1, self.workers + 1):
            self.start_worker(i, wait=False)
        for i in range(1, self.workers + 1):
            self._wait_for(f"worker-{i}", "Successfully registered with master")
        return self

    def start_worker(self, i: int, wait: bool = True) -> None:
        name = f"worker-{i}"
        work = self.root / f"work-{i}"
        work.mkdir(exist_ok=True)
        since = self._log_size(name)
        self._spawn(name, WORKER_CLASS, self.master_url, "--host", "127.0.0.1", "--cores",
                    str(self.cores), "--memory", self.memory, "--webui-port", "0",
                    "--work-dir", str(work))
        if wait:
            self._wait_for(name, "Successfully registered with master", since=since)

    def worker_pids(self) -> dict[int, int]:
        """``{worker number: pid}`` of the live workers."""
        return {int(n.split("-")[1]): p.pid for n, p in self.procs.items()
                if n.startswith("worker-") and p.poll() is None}

    def ensure_workers(self) -> list[int]:
        """Restart the workers that died (a test killed one); returns their numbers. The
        processes they left (executors, Python workers) went with them."""
        dead = [i for i in range(1, self.workers + 1) if i not in self.worker_pids()]
        for i in dead:
            self._kill(f"worker-{i}")
            self.start_worker(i)
        return dead

    # -- stopping -------------------------------------------------------------------------
    def _kill(self, name: str, grace: float = 5.0) -> None:
        """SIGTERM the daemon's process group (its executors are in it), then SIGKILL what
        is left of it."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(proc.pid):
                proc.poll()
                time.sleep(0.1)
            if not _group_alive(proc.pid):
                break
        proc.poll()

    def stop(self) -> None:
        for name in sorted(self.procs, key=lambda n: n == "master"):  # the master last
            self._kill(name)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
