"""A real dask cluster for the tests: ``dask scheduler`` and ``dask worker`` as subprocesses on
127.0.0.1, on free ports, always torn down (and, should the test process die, ending on their
own: the scheduler after ``--idle-timeout``, the workers after ``--death-timeout``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from distributed import Client

#: seconds a test waits for the scheduler's file or for its workers
START_TIMEOUT_S = 60


class DaskCluster:
    """``with DaskCluster(tmp_path, workers=2) as c:`` -> ``c.address``, ``c.workers`` (name ->
    process); ``c.client()`` a client of the test's own."""

    def __init__(self, directory: Path, workers: int = 1):
        self.directory = Path(directory)
        self.n = workers
        self.scheduler: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.address = ""
        self._logs: list = []

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = (self.directory / f"{name}.log").open("w")
        self._logs.append(log)
        return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def __enter__(self) -> DaskCluster:
        try:
            info = self.directory / "scheduler.json"
            self.scheduler = self._start("scheduler", [
                "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(info), "--idle-timeout", "600"])
            deadline = time.monotonic() + START_TIMEOUT_S
            while not info.is_file() or not info.read_text().strip():
                assert self.scheduler.poll() is None, self.log("scheduler")
                assert time.monotonic() < deadline, "no scheduler file: " + self.log("scheduler")
                time.sleep(0.1)
            self.address = json.loads(info.read_text())["address"]
            for i in range(self.n):
                self.add_worker(f"w{i}")
            self.wait_for_workers(self.n)
        except BaseException:
            self.close()
            raise
        return self

    def add_worker(self, name: str) -> subprocess.Popen:
        p = self._start(name, ["distributed.cli.dask_worker", self.address, "--nthreads", "1", "--no-nanny",
                               "--host", "127.0.0.1", "--no-dashboard", "--name", name, "--death-timeout", "60"])
        self.workers[name] = p
        return p

    def client(self) -> Client:
        return Client(self.address, timeout=START_TIMEOUT_S, set_as_default=False)

    def wait_for_workers(self, n: int) -> None:
        with self.client() as c:
            c.wait_for_workers(n, timeout=START_TIMEOUT_S)
            # import codesign on every worker now, so the tests time solves, not imports
            c.run(lambda: __import__("codesign.sweep.job").__name__)

    def log(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text() if path.is_file() else ""

    def close(self) -> None:
        procs = [*self.workers.values(), *([self.scheduler] if self.scheduler else [])]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for log in self._logs:
            log.close()

    def __exit__(self, *exc) -> None:
        self.close()
