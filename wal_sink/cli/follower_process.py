"""The job's follower process (``job.writer = "datasource"``), started by its
handle (job/follower_child.py, which says how the job drives it) as ``python -m
wal_sink.cli.follower_process CONFIG``: it applies what the query stages, as
``wal-sink follow`` does, and runs the scheduled purges of ``[housekeeping]``
beside it. It lives with the CLI because it reaches the operator actions
(housekeeping), which the job's supervisor never imports.

No pyspark here: the process starts in a second or two.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import IO

from wal_sink.config import load_config
from wal_sink.errors import RetryStopped, TerminalError, first_line
from wal_sink.exit_status import OK, TERMINAL, exit_code, exit_now
from wal_sink.ops.housekeeping import scheduled
from wal_sink.protocol.follower import Follower
from wal_sink.protocol.sink_instance import SinkInstance

log = logging.getLogger("wal_sink.follow")


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
        with scheduled(config, instance.metrics):
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
