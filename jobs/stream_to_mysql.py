"""spark-submit entry point: stream [source] -> [transform] -> MySQL, exactly once.

    spark-submit jobs/stream_to_mysql.py -c conf/NAME.toml [--available-now |
        --print-ddl] [--spark-log-level LEVEL]

--available-now drains what is there and exits 0. --print-ddl prints the DDL the
sink would run on its targets for this stream (creating or evolving them, whatever
mysql.auto_create and auto_evolve say), changes nothing and exits 0. SIGTERM stops
after the current batch. Exit codes: 0 done, 1 failed, 2 usage or configuration
error.

Output: the sink's own lines (start, lease, recovery, one line per batch staged and
applied, stop) and Spark's warnings and errors. Spark's INFO comes back with
--spark-log-level INFO or ``[job] spark_log_level = "INFO"`` (see
wal_sink/spark/log_level.py).
"""

import argparse
import logging
import sys

from wal_sink.config import SPARK_LOG_LEVELS, load_config, spark_log_level
from wal_sink.errors import ConfigError
from wal_sink.exit_status import exit_code, exit_now


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="stream_to_mysql.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-c", "--config", required=True, help="sink config (TOML)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--available-now", action="store_true", help="drain what is there, then exit"
    )
    when.add_argument(
        "--print-ddl",
        action="store_true",
        help="print the DDL the sink would run on its targets, change nothing",
    )
    parser.add_argument(
        "--spark-log-level",
        metavar="LEVEL",
        help="Spark's own log level, overriding job.spark_log_level (default WARN): "
        + ", ".join(SPARK_LOG_LEVELS),
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("wal_sink").setLevel(logging.INFO)
    log = logging.getLogger("wal_sink.job")
    try:
        config = load_config(args.config)
        if args.spark_log_level:
            try:
                level = spark_log_level(args.spark_log_level)
            except ValueError as e:
                raise ConfigError(f"--spark-log-level {e}") from None
        else:
            level = config.job.spark_log_level if config.job else "WARN"
        from wal_sink.spark.job import print_ddl, run_job
        from wal_sink.spark.session import job_session

        log.info(
            "sink %s starting from %s%s; Spark logs at %s",
            config.sink.id,
            args.config,
            " (--available-now)" if args.available_now else "",
            level,
        )
        spark = job_session(
            f"wal_sink {config.sink.id}",
            level,
            config.job.spark_conf if config.job else None,
        )
        if args.print_ddl:
            return print_ddl(config, spark)
        return run_job(
            config,
            available_now=args.available_now,
            spark=spark,
            config_path=args.config,
        )
    except ConfigError as e:
        log.error("%s", e)
        return exit_code(e)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    try:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    finally:
        exit_now(code)
