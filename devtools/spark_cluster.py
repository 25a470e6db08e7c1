"""A Spark standalone cluster on loopback for tests: a master and one worker from
pyspark's own classes, so executors run in JVMs of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.mariadb import free_port


@contextmanager
def standalone_cluster(work: Path, env: dict[str, str]) -> Iterator[str]:
    """Yield the master URL; executors' directories land under ``work/work``.

    The worker hands its environment (``env``) down to the executors it starts.
    """
    spark_class = str(Path(sys.executable).with_name("spark-class"))
    port = free_port()
    env = {**env, "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "work")}
    common = dict(
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    master = subprocess.Popen(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        **common,
    )
    worker = subprocess.Popen(
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--webui-port",
            "0",
            "--cores",
            "2",
            "--memory",
            "1g",
            f"spark://127.0.0.1:{port}",
        ],
        **common,
    )
    try:
        time.sleep(8)  # the worker registers with the master
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in (worker, master):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
