"""The job's handle on its follower, a process of its own (``job.writer =
"datasource"``): the query stages through ``format("wal_sink")`` and the follower
applies the staged batches to MySQL behind it, as the foreachBatch path's committer
thread does, and runs the scheduled purges of ``[housekeeping]``, as ``wal-sink
follow`` does.

The job starts it with ``python -m wal_sink.cli.follower_process CONFIG`` (the
process is the CLI's: it reaches the operator actions, which the job's supervisor
never imports) in its own process group, so a SIGKILL of the group takes it down
with the job, and drives it through its stdin, one word a line: ``stop`` (the job
got SIGTERM: apply what is staged for up to ``job.stop_timeout``, then exit),
``drain`` (``--available-now``: apply everything staged, then exit), ``now`` (a
second SIGTERM: exit at once). The end of stdin, as when the job dies, means
``now``. The child ignores SIGTERM and SIGINT sent to the group: the job decides
when it stops. Its exit code (exit_status.py) tells the job what happened: 0
stopped, 1 failed and a restart may help (the outage budget spent), 2 configuration
error, 3 failed for good (fenced, target dropped, ...). Its log lines go to the
job's stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

COMMANDS = ("stop", "drain", "now")
PROCESS = "wal_sink.cli.follower_process"


class FollowerChild:
    """The job's handle on its follower process."""

    def __init__(self, config_path: str | os.PathLike[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", PROCESS, str(Path(config_path).resolve())],
            stdin=subprocess.PIPE,
        )
        self.sent: list[str] = []

    def command(self, word: str) -> None:
        """Send ``stop``, ``drain`` or ``now``; a child that is gone is fine."""
        if word not in COMMANDS:
            raise ValueError(word)
        self.sent.append(word)
        try:
            self.process.stdin.write(f"{word}\n".encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
