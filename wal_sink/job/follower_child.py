"""The job's follower in a process of its own (``job.writer = "datasource"``): the
query stages through ``format("wal_sink")`` and this child applies the staged
batches to MySQL behind it, as the foreachBatch path's committer thread does.

The job starts it with ``python -m wal_sink.job.follower_child CONFIG`` in its
own process group, so a SIGKILL of the group takes it down with the job, and drives
it through its stdin, one word a line: ``stop`` (the job got SIGTERM: apply what is
staged for up to ``job.stop_timeout``, then exit), ``drain`` (``--available-now``:
apply everything staged, then exit), ``now`` (a second SIGTERM: exit at once). The
end of stdin, as when the job dies, means ``now``. The child ignores SIGTERM and
SIGINT sent to the group: the job decides when it stops. Its exit code (exit_status.py)
tells the job what happened: 0 stopped, 1 failed and a restart may help (the outage
budget spent), 2 configuration error, 3 failed for good (fenced, target dropped,
...).
Its log lines go to the job's stderr.

No pyspark here: the child starts in a second or two.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from wal_sink.errors import RetryStopped, TerminalError, first_line
from wal_sink.exit_status import OK, TERMINAL, exit_code, exit_now

log = logging.getLogger("wal_sink.follow")

COMMANDS = ("stop", "drain", "now")


class FollowerChild:
    """The job's handle on its follower process."""

    def __init__(self, config_path: str | os.PathLike[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(Path(config_path).resolve())],
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


def _commands(stream: IO[str], follower) -> None:
    """Obey the job; the end of stdin (the job is gone) means ``now``."""
    for line in stream:
        word = line.strip()
        if word == "stop":
            follower.stop()
        elif word == "drain":
            follower.stop(drain=True)
        elif word == "now":
            break
    follower.stop_now()


def main(config_path: str) -> int:
    from wal_sink.config import load_config
    from wal_sink.protocol.follower import Follower
    from wal_sink.protocol.sink_instance import SinkInstance

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("wal_sink").setLevel(logging.INFO)
    instance = None
    try:
        config = load_config(config_path)
        instance = SinkInstance(config)
        follower = Follower(instance)
        threading.Thread(
            target=_commands, args=(sys.stdin, follower), daemon=True
        ).start()
        if config.job and config.job.metrics_port is not None:
            instance.metrics.serve(config.job.metrics_port, config.job.metrics_host)
        follower.run()
        return OK
    except RetryStopped:
        return OK
    except TerminalError as e:  # a configuration error included
        log.error("%s", e)
        return exit_code(e, terminal=TERMINAL)
    except Exception as e:  # TransientError (budget spent), lost MySQL, storage
        log.error("follower failed: %s", first_line(e))
        return exit_code(e, terminal=TERMINAL)
    finally:
        if instance is not None:
            instance.close()


if __name__ == "__main__":
    exit_now(main(sys.argv[1]))
