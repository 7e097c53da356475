"""A real Dask cluster on this machine, every socket on 127.0.0.1: for tests, benchmarks
and trying the dask backend (`python -m bnmem.train.scaleout cluster` starts one)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from bnmem.core.io import ClusterError


# --no-dashboard alone still serves /health and /metrics on 0.0.0.0 (8787 for a scheduler)
LOOPBACK_HTTP = ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackCluster:
    """A real Dask cluster on this machine for tests, benchmarks and trying the backend:
    `dask scheduler` and `dask worker` processes (one thread each, no nanny), every socket
    on 127.0.0.1, started in the environment of this process (bnmem's CPU pin included once
    bnmem is imported) and stopped by their process ids. `tls`: {ca_file, cert, key}."""

    def __init__(self, logs: Path, workers: int = 2, tls: dict | None = None,
                 timeout: float = 60, worker_args: list[list[str]] | None = None):
        import subprocess
        import sys

        self.d, self.tls, self.timeout = Path(logs), tls, timeout
        self.d.mkdir(parents=True, exist_ok=True)
        dask_cli = str(Path(sys.executable).with_name("dask"))
        proto = "tls" if tls else "tcp"
        self.address = f"{proto}://127.0.0.1:{free_port()}"
        flags = ([f"--tls-ca-file={tls['ca_file']}", f"--tls-cert={tls['cert']}",
                  f"--tls-key={tls['key']}"] if tls else [])
        self.logs: list = []
        self._popen = subprocess.Popen
        self.scheduler = self._start("scheduler", [
            dask_cli, "scheduler", "--host", "127.0.0.1", "--port",
            self.address.rsplit(":", 1)[1], "--protocol", proto, *LOOPBACK_HTTP, *flags])
        self.workers = []
        try:
            self.wait(lambda: self._listening(self.scheduler), "scheduler")
            self.workers = [self._start(f"worker{i}", [
                dask_cli, "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1",
                "--no-nanny", *LOOPBACK_HTTP, "--name", f"w{i}", *flags,
                *(worker_args[i] if worker_args else [])])
                for i in range(workers)]
            self.wait(lambda: self.n_workers() == workers, f"{workers} workers")
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> LoopbackCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, name: str, cmd: list[str]):
        import subprocess

        log = open(self.d / f"{name}-{len(self.logs)}.log", "w")  # noqa: SIM115 (closed in stop)
        self.logs.append(log)
        return self._popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.d,
                           start_new_session=True)

    @staticmethod
    def _listening(proc) -> bool:
        import psutil

        try:
            return any(c.status == psutil.CONN_LISTEN
                       for c in psutil.Process(proc.pid).net_connections("inet"))
        except psutil.Error:
            return False

    def wait(self, ok: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        deadline = time.time() + (timeout or self.timeout)
        while time.time() < deadline:
            if ok():
                return
            time.sleep(0.2)
        raise ClusterError(f"loopback cluster: no {what} after {timeout or self.timeout} s; "
                           f"logs in {self.d}")

    def tail(self) -> str:
        return "\n".join(Path(log.name).read_text()[-1500:] for log in self.logs)

    def security(self):
        from distributed import Security

        t = self.tls
        return Security(tls_ca_file=t["ca_file"], tls_client_cert=t["cert"],
                        tls_client_key=t["key"], require_encryption=True) if t else None

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=10, security=self.security(),
                      set_as_default=False)

    def n_workers(self) -> int:
        try:
            with self.client() as c:
                return len(c.scheduler_info()["workers"])
        except OSError:
            return 0

    def addresses(self) -> list[str]:
        """Worker addresses in start order (w0, w1, ...)."""
        with self.client() as c:
            by_name = {w["name"]: a for a, w in c.scheduler_info()["workers"].items()}
        return [by_name[f"w{i}"] for i in range(len(self.workers))]

    def process(self, address: str):
        return self.workers[self.addresses().index(address)]

    def cpu_seconds(self, address: str) -> float:
        import psutil

        t = psutil.Process(self.process(address).pid).cpu_times()
        return t.user + t.system

    def sockets(self) -> set[str]:
        """Every local address a running cluster process has a socket on."""
        import psutil

        out = set()
        for proc in [self.scheduler, *self.workers]:
            if proc.poll() is None:
                out |= {c.laddr.ip for c in psutil.Process(proc.pid).net_connections("inet")}
        return out

    def stop(self) -> None:
        import signal

        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for log in self.logs:
            log.close()
