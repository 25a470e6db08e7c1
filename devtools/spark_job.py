"""The spark-submit job as a child process, the way tests, the demo and benchmarks
launch it: the virtualenv's Python on both sides, its own process group so a kill
reaches the JVM and the Python driver together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

REPO = Path(__file__).resolve().parent.parent
SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
JOB = "jobs/stream_to_mysql.py"


def job_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        **extra,
    }


class JobProcess:
    """``spark-submit jobs/stream_to_mysql.py -c CONFIG ARGS``, its output appended
    to ``log``; with ``code``, that checkout's job script (a benchmark judging the
    code before a change puts its wal_sink on PYTHONPATH too). ``JobProcess.reap()``
    kills every job still running (tests call it after each test, so a failed one
    leaves no job behind)."""

    running: ClassVar[list[JobProcess]] = []

    def __init__(
        self,
        config: Path | str,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        submit_args: tuple[str, ...] = (),
        code: Path | None = None,
    ) -> None:
        self._start(
            [SPARK_SUBMIT, *submit_args, str((code or REPO) / JOB)]
            + ["-c", str(config), *args],
            log,
            env or job_env(),
            REPO,
        )

    def _start(
        self, argv: list[str], log: Path, env: dict[str, str], cwd: Path
    ) -> None:
        """Run ``argv`` in a process group of its own, reaped with the jobs."""
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        JobProcess.running.append(self)

    @classmethod
    def reap(cls) -> None:
        for job in cls.running:
            if job.proc.poll() is None:
                job.kill()
        cls.running.clear()

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout: float = 300) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def wait(self, timeout: float = 600) -> int:
        return self.proc.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return self.text()[-4000:]
