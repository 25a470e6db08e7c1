"""Driver memory: peak RSS of the job's driver (the JVM and the Python driver it
starts) for one batch of N rows and for one of 10 N rows. Goal: the 10x batch
grows the peak by less than 20%.

Usage: python -m bench.driver_memory [ROWS]
Each run is a real ``spark-submit jobs/stream_to_mysql.py --available-now`` with
Spark's default driver settings, reading Parquet files that the whole run takes as
one micro-batch (no maxFilesPerTrigger), so the batch is staged and committed
whole. The peak of every process in the job's tree is read from /proc (VmHWM)
while it runs; small and large runs alternate. For reference, the same is measured
for Spark alone copying the same input to plain Parquet (bench/copy_parquet_app.py):
in local mode the driver JVM also runs the tasks, so part of its growth is Spark's.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import Bench, spark_session
from devtools.spark_job import REPO, SPARK_SUBMIT, JobProcess, job_env

SCHEMA = "k STRING, amount DECIMAL(12,2), label STRING, seq BIGINT"
TABLE = (
    "(k VARCHAR(24) PRIMARY KEY, amount DECIMAL(12,2), label VARCHAR(40), "
    "seq BIGINT) ENGINE=InnoDB"
)


def tree_peaks(root: int) -> dict[int, tuple[str, int]]:
    """{pid: (command name, VmHWM in bytes)} for ``root`` and its descendants."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid]
        tree.update(children)
        frontier.extend(children)
    peaks = {}
    for pid in tree:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if "VmHWM" in fields:
            peaks[pid] = (
                fields["Name"].strip(),
                int(fields["VmHWM"].split()[0]) * 1024,
            )
    return peaks


def run_job(bench: Bench, rows: int, source: str, run: int) -> dict[str, int]:
    """Run the job once over ``source``; peak RSS per kind of process, in bytes."""
    sink_id = f"memory_{rows}_{run}"
    config = bench.dir / f"{sink_id}.toml"
    config.write_text(f"""
[sink]
id = "{sink_id}"
[source]
format = "parquet"
path = "{source}"
schema = "{SCHEMA}"
[wal]
path = "{bench.dir / ("wal_" + sink_id)}"
[mysql]
url = "{bench.mariadb.sink_url("bench")}"
table = "target"
key = ["k"]
[job]
checkpoint = "{bench.dir / ("checkpoint_" + sink_id)}"
""")
    bench.sql("TRUNCATE target")
    job = JobProcess(
        config, bench.dir / f"{sink_id}.log", "--available-now", env=job_env()
    )
    peaks = peak_rss(job.proc)
    assert job.proc.returncode == 0, job.tail()
    assert bench.sql("SELECT COUNT(*) FROM target")[0][0] == rows
    return peaks


def run_plain_copy(bench: Bench, source: str) -> dict[str, int]:
    """Spark alone: the same input copied to plain Parquet by spark-submit."""
    with open(bench.dir / "copy.log", "ab") as log:
        proc = subprocess.Popen(
            [
                SPARK_SUBMIT,
                str(REPO / "bench" / "copy_parquet_app.py"),
                source,
                str(bench.dir / "copy"),
            ],
            env=job_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        peaks = peak_rss(proc)
    assert proc.returncode == 0, (bench.dir / "copy.log").read_text()[-2000:]
    return peaks


def peak_rss(proc: subprocess.Popen) -> dict[str, int]:
    """Wait for ``proc``; the peak RSS of its JVM and Python processes, in bytes."""
    peaks: dict[int, tuple[str, int]] = {}
    while proc.poll() is None:
        peaks.update(tree_peaks(proc.pid))
        time.sleep(0.1)
    by_kind = {"jvm": 0, "python": 0}
    for name, peak in peaks.values():
        kind = (
            "jvm" if name == "java" else "python" if name.startswith("python") else None
        )
        if kind:
            by_kind[kind] += peak
    return by_kind


def main(rows: int = 200_000, repeat: int = 2) -> None:
    sizes = (rows, rows * 10)
    with Bench("memory") as bench:
        spark = spark_session()
        sources = {}
        for size in sizes:
            sources[size] = str(bench.dir / f"landing_{size}")
            spark.range(size, numPartitions=4).selectExpr(
                "concat('key-', id) AS k",
                "cast(id % 1000 AS decimal(12,2)) AS amount",
                "concat('label-', id, '-', repeat('x', 16)) AS label",
                "id AS seq",
            ).write.parquet(sources[size])
        spark.stop()
        bench.sql(f"CREATE TABLE target {TABLE}")
        sink: dict[int, list[dict[str, int]]] = {size: [] for size in sizes}
        spark_alone: dict[int, list[dict[str, int]]] = {size: [] for size in sizes}
        for run in range(repeat):
            for size in sizes:
                sink[size].append(run_job(bench, size, sources[size], run))
                spark_alone[size].append(run_plain_copy(bench, sources[size]))
        job, copy = medians(sink), medians(spark_alone)
        mib = 1024 * 1024
        for size in sizes:
            m, c = job[size], copy[size]
            print(
                f"batch of {size:,} rows: job driver peak RSS "
                f"{(m['jvm'] + m['python']) / mib:,.0f} MiB (JVM "
                f"{m['jvm'] / mib:,.0f}, "
                f"Python {m['python'] / mib:,.0f}); Spark alone copying it to Parquet: "
                f"JVM {c['jvm'] / mib:,.0f} MiB (medians of {repeat})"
            )
        small, large = job[sizes[0]], job[sizes[1]]
        total = (large["jvm"] + large["python"]) / (small["jvm"] + small["python"]) - 1
        python = large["python"] / small["python"] - 1
        alone = copy[sizes[1]]["jvm"] / copy[sizes[0]]["jvm"] - 1
        print(
            "driver memory: a 10x batch grows the job's driver peak RSS by "
            f"{total:+.0%} "
            f"(goal < +20%); its Python driver {python:+.0%}; Spark alone (JVM) "
            f"{alone:+.0%}"
        )


def medians(runs: dict[int, list[dict[str, int]]]) -> dict[int, dict[str, float]]:
    return {
        size: {
            kind: statistics.median(m[kind] for m in measured)
            for kind in ("jvm", "python")
        }
        for size, measured in runs.items()
    }


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
