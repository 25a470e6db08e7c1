"""End-to-end ratio: the streaming job (Parquet file source -> WAL -> MySQL, exactly
once) vs. Spark's own JDBC append (MariaDB Connector/J, at-least-once) of the same
rows into an identical empty table. Goal >= 1.0 (higher is better).

Usage: python -m bench.end_to_end_ratio [ROWS] [FILES]
Both run in one SparkSession (local[2]) on the same input files, alternating: the
job drains them with ``--available-now`` semantics, one file per micro-batch
(``maxFilesPerTrigger = 1``), once on the row path and once with
``mysql.local_infile``; the baseline is ``spark.read.parquet(...).write.jdbc(...)``
with the writer's defaults. Each run starts from an empty table and a new sink id,
WAL and checkpoint; the tables are compared at the end. The job's own per-batch log
lines (``stage_ms``, ``commit_ms``) of the row path are summed up at the end.
"""

from __future__ import annotations

import logging
import re
import statistics
import sys

from bench.common import Bench, ratio_line, seconds, spark_session
from wal_sink.spark.job import run_job

SCHEMA = "k STRING, amount DECIMAL(12,2), label STRING, seq BIGINT"
TABLE = (
    "(k VARCHAR(24) PRIMARY KEY, amount DECIMAL(12,2), label VARCHAR(32), "
    "seq BIGINT) ENGINE=InnoDB"
)


class JobLines(logging.Handler):
    """Collects the job's ``stage_ms`` and ``commit_ms`` while ``active``."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.active = False
        self.stage: list[int] = []
        self.commit: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not self.active:
            return
        message = record.getMessage()
        if m := re.search(r"staged: .*stage_ms=(\d+)", message):
            self.stage.append(int(m.group(1)))
        elif m := re.search(r"applied: .*commit_ms=(\d+)", message):
            self.commit.append(int(m.group(1)))

    def summary(self) -> str:
        def med(values: list[int]) -> str:
            return f"{statistics.median(values):.0f}" if values else "-"

        return (
            f"row path, per batch: stage_ms median {med(self.stage)} "
            f"({min(self.stage, default=0)}-{max(self.stage, default=0)}), "
            f"commit_ms median {med(self.commit)} "
            f"({min(self.commit, default=0)}-{max(self.commit, default=0)})"
        )


def main(rows: int = 400_000, files: int = 4, repeat: int = 3) -> None:
    lines = JobLines()
    job_log = logging.getLogger("wal_sink.job")
    job_log.addHandler(lines)
    job_log.setLevel(logging.INFO)
    with Bench("e2e") as bench:
        spark = spark_session()
        source = str(bench.dir / "landing")
        spark.range(rows, numPartitions=files).selectExpr(
            "concat('key-', id) AS k",
            "cast(id % 1000 AS decimal(12,2)) AS amount",
            "concat('label-', id) AS label",
            "id AS seq",
        ).write.parquet(source)
        bench.sql(
            *(
                f"CREATE TABLE {t} {TABLE}"
                for t in ("job_rows", "job_load", "jdbc_target")
            )
        )

        def job(table: str, run: int, **mysql: object) -> None:
            sink_id = f"{table}_{run}"
            config = bench.config(
                table,
                sink_id=sink_id,
                merge={},
                **mysql,
                sections={
                    "source": {
                        "format": "parquet",
                        "path": source,
                        "schema": SCHEMA,
                        "options": {"maxFilesPerTrigger": 1},
                    },
                    "job": {"checkpoint": str(bench.dir / f"checkpoint_{sink_id}")},
                },
            )
            assert run_job(config, available_now=True, spark=spark) == 0

        def jdbc() -> None:
            bench.jdbc_append(spark.read.schema(SCHEMA).parquet(source), "jdbc_target")

        # warm-up of both (JIT, class loading, Delta's first snapshot), not counted
        job("job_rows", 0)
        jdbc()
        row_path, load_path, baseline = [], [], []
        for run in range(1, repeat + 1):
            bench.sql("TRUNCATE job_rows", "TRUNCATE job_load", "TRUNCATE jdbc_target")
            lines.active = True
            row_path.append(rows / seconds(lambda: job("job_rows", run)))
            lines.active = False
            load_path.append(
                rows / seconds(lambda: job("job_load", run, local_infile=True))
            )
            baseline.append(rows / seconds(jdbc))
        checksums = {
            t: bench.sql(f"CHECKSUM TABLE {t}")[0][1]
            for t in ("job_rows", "job_load", "jdbc_target")
        }
        assert len(set(checksums.values())) == 1, f"results differ: {checksums}"
        print(
            f"rows: {rows} in {files} files; job, row path "
            f"{[f'{r:,.0f}' for r in row_path]} rows/s; job, LOAD DATA path "
            f"{[f'{r:,.0f}' for r in load_path]} rows/s; Spark JDBC append "
            f"{[f'{r:,.0f}' for r in baseline]} rows/s"
        )
        print(ratio_line("end-to-end ratio, row path", row_path, baseline, ">= 1.0"))
        print(lines.summary())
        print(
            ratio_line(
                "end-to-end ratio, LOAD DATA path", load_path, baseline, ">= 1.0"
            )
        )
        spark.stop()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
