"""A private Spark Connect server on loopback for tests and benchmarks.

pyspark ships the server (``jars/spark-connect_2.13-*.jar``, the class
``org.apache.spark.sql.connect.service.SparkConnectServer`` that
``sbin/start-connect-server.sh`` runs); this starts it the same way, with the
virtualenv's ``spark-submit`` in local mode, in the foreground, in a process group
of its own (so a kill takes the JVM and its Python workers together), on a free
port, with a private work directory (its log, ``spark.local.dir``, the warehouse)
and the virtualenv's Python for its Python workers, where the ``wal_sink`` data
source runs. The project's jars reach it through the virtualenv's
``spark-defaults.conf`` (``make jars``). Clients connect with
``SparkSession.builder.remote(server.url)``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from devtools.mariadb import free_port

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServer:
    """``start()`` runs the server until ``kill()``; ``env`` is its environment
    (the S3 credentials a WAL on S3 needs; no MySQL password: the data source never
    reaches MySQL)."""

    def __init__(
        self,
        base_dir: Path,
        *,
        env: dict[str, str] | None = None,
        conf: dict[str, str] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.env = env
        self.conf = conf or {}
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.base_dir / "connect-server.log"

    def start(self, timeout: float = 240.0) -> None:
        """Start on a new free port and wait until it accepts connections."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = {
            "spark.master": "local[2]",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            "spark.local.dir": str(self.base_dir / "local"),
            "spark.sql.warehouse.dir": str(self.base_dir / "warehouse"),
            **self.conf,
        }
        args = [SPARK_SUBMIT, "--class", SERVER_CLASS, "--name", "wal_sink connect"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        env = {
            **(self.env if self.env is not None else os.environ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(self.base_dir),
        }
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                args,
                cwd=self.base_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"Spark Connect did not start; see {self.log}")
            time.sleep(0.25)

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server's whole process group (JVM and Python workers)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
