"""Shared set-up for benchmarks: a private MariaDB, a local Spark, a sink config.

Benchmarks report ratios against a baseline measured in the same run: absolute
numbers drift on shared machines, ratios much less.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from devtools.mariadb import SINK_PASSWORD, MariaDB
from wal_sink.config import Config, config_from_dict


class Bench:
    def __init__(self, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"wal-sink-bench-{name}-"))
        self.mariadb = MariaDB(self.dir / "mariadb")

    def __enter__(self) -> Bench:
        self.mariadb.start()
        self.mariadb.create_database("bench")
        os.environ["WAL_SINK_MYSQL_PASSWORD"] = SINK_PASSWORD
        return self

    def __exit__(self, *exc: object) -> None:
        self.mariadb.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, *statements: str) -> list[tuple]:
        with self.mariadb.root("bench") as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return list(cur.fetchall())

    @property
    def jdbc_url(self) -> str:
        """The bench database for Spark's JDBC writer (MariaDB Connector/J)."""
        return f"jdbc:mysql://127.0.0.1:{self.mariadb.port}/bench?permitMysqlScheme"

    def jdbc_append(self, df, table: str) -> None:
        """Append ``df`` to ``table`` with Spark's JDBC writer, as the sink's user."""
        login = {"user": "sink", "password": SINK_PASSWORD}
        df.write.jdbc(
            self.jdbc_url,
            table,
            mode="append",
            properties={**login, "driver": "org.mariadb.jdbc.Driver"},
        )

    def config(
        self,
        table: str,
        *,
        sink_id: str = "bench",
        sections: dict[str, dict] | None = None,
        **mysql: object,
    ) -> Config:
        """A sink writing ``table`` (key ``k``, ``amount`` added) with its WAL under
        the bench directory; ``sections`` adds [source], [job], ..."""
        return config_from_dict(
            {
                "sink": {"id": sink_id},
                "wal": {"path": str(self.dir / f"wal_{sink_id}")},
                "mysql": {
                    "url": self.mariadb.sink_url("bench"),
                    "table": table,
                    "key": ["k"],
                    "merge": {"amount": "add"},
                    **mysql,
                },
                **(sections or {}),
            }
        )


def spark_session():
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("wal_sink bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def upsert_rows(spark, count: int, first: int = 0):
    """The upsert benchmarks' rows, ``first`` to ``first + count - 1``: 50,000 keys
    that repeat, an amount to add, a label and ``seq`` to guard it with."""
    return spark.range(first, first + count).selectExpr(
        "concat('key-', id % 50000) AS k",
        "cast(id % 1000 AS decimal(12,2)) AS amount",
        "concat('label-', id) AS label",
        "id AS seq",
    )


def load_line(when: str) -> str:
    """The machine's load averages, printed at a run's start and end: a run
    disturbed by other work (1-minute load above the core count) is void."""
    one, five, fifteen = os.getloadavg()
    return f"load average at the {when}: {one:.2f} {five:.2f} {fifteen:.2f}"


def cpu_seconds(mariadb: MariaDB) -> tuple[float, float]:
    """CPU seconds so far (user + system) of the processes this one has waited for
    (a ``spark-submit``: its JVM with the executors' threads, and the Python
    driver the JVM waited for) and of the bench's MariaDB server. On a machine of
    few cores a run that needs more CPU cannot be faster than one that needs less
    for long, whatever overlaps."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = (mariadb.base_dir / "mysqld.pid").read_text().strip()
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    server = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return children.ru_utime + children.ru_stime, server


def seconds(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def ratio_line(name: str, ours: list[float], baseline: list[float], goal: str) -> str:
    """Ratio of medians of per-run rates (ours / baseline, higher is better)."""
    return (
        f"{name}: {statistics.median(ours) / statistics.median(baseline):.2f} "
        f"(goal {goal}; {len(ours)} alternating runs)"
    )
