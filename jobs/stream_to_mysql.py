"""spark-submit entry point: stream [source] -> [transform] -> MySQL, exactly once.

    spark-submit jobs/stream_to_mysql.py -c conf/NAME.toml [--available-now]

--available-now drains what is there and exits 0. SIGTERM stops after the current
batch. Exit codes: 0 done, 1 failed, 2 usage or configuration error.
"""

import argparse
import logging
import sys

from wal_sink.config import load_config
from wal_sink.errors import ConfigError
from wal_sink.exit import exit_now


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="stream_to_mysql.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-c", "--config", required=True, help="sink config (TOML)")
    parser.add_argument(
        "--available-now", action="store_true", help="drain what is there, then exit"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("wal_sink").setLevel(logging.INFO)
    try:
        config = load_config(args.config)
        from wal_sink.job import run_job

        return run_job(config, available_now=args.available_now)
    except ConfigError as e:
        logging.getLogger("wal_sink.job").error("%s", e)
        return 2


if __name__ == "__main__":
    code = main(sys.argv[1:])
    try:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    finally:
        exit_now(code)
