"""End-to-end ratio: whole ``spark-submit`` runs over the same JSON files, from the
first byte read to the process's exit, for the real job (``jobs/stream_to_mysql.py
--available-now``: JSON files -> WAL -> MySQL exactly once, PER_TRIGGER files per
micro-batch, the parse-error query beside it) against two baselines, each a
``spark-submit`` of its own over the same files into an identical empty table:

- Spark's JDBC append of the files read as one batch (bench/jdbc_batch_app.py,
  MariaDB Connector/J, at-least-once, no upsert);
- the hand-written at-least-once upsert (bench/upsert_app.py: the same files
  streamed PER_TRIGGER per micro-batch, ``foreachPartition`` + PyMySQL
  ``executemany`` of ``INSERT … ON DUPLICATE KEY UPDATE``).

Goal >= 1.0 against both (baseline seconds / ours, higher is better).

Usage: python -m bench.end_to_end_ratio [ROWS] [FILES] [PER_TRIGGER] [--repeat N]
                                        [--writer foreach_batch|datasource]
                                        [--before DIR]
Defaults: 1,000,000 rows in 20 files, 5 files per trigger, 3 rounds. Each round
runs the three sides one after another (ours first in odd rounds, last in even
ones; ``--before DIR`` adds the job with wal_sink imported from another checkout,
``git archive REF | tar -x -C DIR``, to judge a change in the same rounds), each
from an empty table and, for ours, a new sink id, WAL and checkpoint;
the tables are compared at the end. After a warm-up of each (page cache, first
tables), not counted.

Where the time goes: for each of our runs, a timeline from its log (the job's own
lines): start-up (spark-submit to the job's first line, to the lease, to the first
batch's foreachBatch call), each batch's planning, stage (with its parts) and
apply, the time Spark spends between two batches, the committer's idle time
between its first and last apply, and the drain (last stage to the end of the
query) and exit. And the CPU seconds each side used (its spark-submit and the
MariaDB server): on two cores, the side that needs more CPU cannot be faster for
long, however its parts overlap.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.common import Bench, cpu_seconds, load_line
from devtools.spark_job import REPO, SPARK_SUBMIT, JobProcess, job_env

SCHEMA = "k STRING, amount DECIMAL(12,2), label STRING, seq BIGINT"
TABLE = (
    "(k VARCHAR(24) PRIMARY KEY, amount DECIMAL(12,2), label VARCHAR(32), "
    "seq BIGINT) ENGINE=InnoDB"
)
TABLES = {"ours": "job_target", "jdbc": "jdbc_target", "upsert": "upsert_target"}
LABELS = {
    "jdbc": "Spark's JDBC append (batch read)",
    "upsert": "hand-written at-least-once upsert",
}
STAMP = "%Y-%m-%d %H:%M:%S,%f"


def landing(bench: Bench, rows: int, files: int) -> Path:
    """``rows`` JSON records with unique keys in ``files`` files, written one after
    another (the file source takes them in modification-time order)."""
    path = bench.dir / "landing"
    path.mkdir()
    per_file = -(-rows // files)
    for f in range(files):
        ids = range(f * per_file, min(rows, (f + 1) * per_file))
        text = "".join(
            json.dumps(
                {"k": f"key-{i}", "amount": i % 1000, "label": f"l-{i}", "seq": i}
            )
            + "\n"
            for i in ids
        )
        (path / f"part-{f:05d}.json").write_text(text)
    return path


@dataclass
class Batch:
    batch_id: int
    called: float = 0.0
    """When foreachBatch was called (s since spark-submit started)."""
    planned: float = 0.0
    staged: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    apply_start: float | None = None
    applied: float | None = None


@dataclass
class Timeline:
    """One run of ours, read from its log; times in s since spark-submit started."""

    total: float
    first_line: float | None = None
    lease: float | None = None
    finished: float | None = None
    batches: dict[int, Batch] = field(default_factory=dict)

    @classmethod
    def read(cls, log: Path, launched: float, total: float) -> Timeline:
        staged = re.compile(r"batch (\d+) staged: rows=\S+ stage_ms=(\d+) (.*)$")
        applied = re.compile(r"batch (\d+) applied: .*commit_ms=(\d+)")
        line_time = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO wal_sink")
        timeline = cls(total)
        for line in log.read_text(errors="replace").splitlines():
            m = line_time.match(line)
            if not m:
                continue
            at = datetime.strptime(m.group(1), STAMP).timestamp() - launched
            if timeline.first_line is None:
                timeline.first_line = at
            if "took lease" in line and timeline.lease is None:
                timeline.lease = at
            elif s := staged.search(line):
                parts = {
                    k: float(v) / 1000 for k, v in re.findall(r"(\w+)_ms=(\d+)", s[3])
                }
                batch = timeline.batches.setdefault(int(s[1]), Batch(int(s[1])))
                batch.staged, batch.parts = at, parts
                batch.called = at - sum(v for k, v in parts.items() if k != "plan")
                batch.planned = batch.called - parts.get("plan", 0.0)
            elif a := applied.search(line):
                batch = timeline.batches.setdefault(int(a[1]), Batch(int(a[1])))
                batch.applied = at
                batch.apply_start = at - int(a[2]) / 1000
            elif "query finished" in line:
                timeline.finished = at
        return timeline

    def lines(self) -> list[str]:
        def t(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        batches = [self.batches[b] for b in sorted(self.batches)]
        out = [
            f"  start-up: job's first line at {t(self.first_line)} s, lease "
            f"{t(self.lease)} s, first batch planned "
            f"{t(batches[0].planned if batches else None)} s, called "
            f"{t(batches[0].called if batches else None)} s"
        ]
        for b in batches:
            parts = " ".join(
                f"{k} {v:.2f}" for k, v in b.parts.items() if k not in ("plan",)
            )
            out.append(
                f"  batch {b.batch_id}: planned {t(b.planned)}, stage "
                f"{t(b.called)}-{t(b.staged)} ({parts}), apply "
                f"{t(b.apply_start)}-{t(b.applied)}"
            )
        if batches:
            spark_between = sum(
                n.called - b.staged for b, n in zip(batches, batches[1:])
            )
            applies = [b for b in batches if b.applied is not None]
            span = applies[-1].applied - applies[0].apply_start if applies else 0.0
            busy = sum(
                b.applied - b.apply_start
                for b in {b.applied: b for b in applies}.values()
            )  # batches of one transaction share its commit time
            out.append(
                f"  Spark between batches (commit log, next planning) "
                f"{spark_between:.1f} s; Spark waiting for the first batch after "
                f"the lease {batches[0].called - (self.lease or 0):.1f} s; "
                f"committer idle between its first and last apply "
                f"{span - busy:.1f} s of {span:.1f} s"
            )
            out.append(
                f"  drain: last staged {t(batches[-1].staged)} s, last applied "
                f"{t(applies[-1].applied if applies else None)} s, query finished "
                f"{t(self.finished)} s, process exit {t(self.total)} s"
            )
        return out


class Sides:
    def __init__(self, bench: Bench, source: Path, per_trigger: int, writer: str):
        self.bench = bench
        self.source = source
        self.per_trigger = per_trigger
        self.writer = writer
        self.count = 0

    def _timed(self, args: list[str], log: Path) -> float:
        started = time.perf_counter()
        with open(log, "ab") as out:
            proc = subprocess.run(
                args, cwd=REPO, env=job_env(), stdout=out, stderr=subprocess.STDOUT
            )
        elapsed = time.perf_counter() - started
        assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
        return elapsed

    def ours(self, code: Path | None = None) -> tuple[float, Timeline]:
        """The job, with wal_sink imported from ``code`` when given."""
        self.count += 1
        sink_id = f"e2e_{self.count}"
        config = self.bench.dir / f"{sink_id}.toml"
        config.write_text(f"""
[sink]
id = "{sink_id}"
[source]
format = "json"
path = "{self.source}"
schema = "{SCHEMA}"
options = {{ maxFilesPerTrigger = {self.per_trigger} }}
[wal]
path = "{self.bench.dir / ("wal_" + sink_id)}"
[mysql]
url = "{self.bench.mariadb.sink_url("bench")}"
table = "{TABLES["ours"]}"
key = ["k"]
[job]
checkpoint = "{self.bench.dir / ("checkpoint_" + sink_id)}"
writer = "{self.writer}"
""")
        self.bench.sql(f"TRUNCATE {TABLES['ours']}")
        log = self.bench.dir / f"{sink_id}.log"
        launched = time.time()
        started = time.perf_counter()
        env = job_env(**({"PYTHONPATH": str(code)} if code else {}))
        job = JobProcess(config, log, "--available-now", env=env, code=code)
        status = job.wait(timeout=1800)
        elapsed = time.perf_counter() - started
        assert status == 0, job.tail()
        return elapsed, Timeline.read(log, launched, elapsed)

    def jdbc(self) -> float:
        self.count += 1
        self.bench.sql(f"TRUNCATE {TABLES['jdbc']}")
        return self._timed(
            [
                SPARK_SUBMIT,
                str(REPO / "bench" / "jdbc_batch_app.py"),
                str(self.source),
                SCHEMA,
                self.bench.jdbc_url,
                TABLES["jdbc"],
            ],
            self.bench.dir / f"jdbc_{self.count}.log",
        )

    def upsert(self) -> float:
        self.count += 1
        self.bench.sql(f"TRUNCATE {TABLES['upsert']}")
        return self._timed(
            [
                SPARK_SUBMIT,
                str(REPO / "bench" / "upsert_app.py"),
                str(self.source),
                SCHEMA,
                str(self.bench.dir / f"checkpoint_upsert_{self.count}"),
                str(self.bench.mariadb.port),
                TABLES["upsert"],
                str(self.per_trigger),
            ],
            self.bench.dir / f"upsert_{self.count}.log",
        )


def main(
    rows: int = 1_000_000,
    files: int = 20,
    per_trigger: int = 5,
    repeat: int = 3,
    writer: str = "foreach_batch",
    before: Path | None = None,
) -> None:
    print(load_line("start"))
    with Bench("e2e") as bench:
        bench.sql(*(f"CREATE TABLE {t} {TABLE}" for t in TABLES.values()))
        sides = Sides(bench, landing(bench, rows, files), per_trigger, writer)
        timelines: dict[str, list[Timeline]] = {"ours": [], "before": []}

        def ours(code: Path | None, side: str) -> float:
            elapsed, timeline = sides.ours(code)
            timelines[side].append(timeline)
            return elapsed

        run = {
            "ours": lambda: ours(None, "ours"),
            "jdbc": sides.jdbc,
            "upsert": sides.upsert,
        }
        if before is not None:
            run["before"] = lambda: ours(before, "before")
        for side in run.values():  # warm-up, not counted
            side()
        timelines = {side: [] for side in timelines}
        times: dict[str, list[float]] = {side: [] for side in run}
        cpu: dict[str, list[tuple[float, float]]] = {side: [] for side in run}
        for r in range(repeat):
            order = list(run)
            for side in order if r % 2 == 0 else order[::-1]:
                job_before, server_before = cpu_seconds(bench.mariadb)
                times[side].append(run[side]())
                job_after, server_after = cpu_seconds(bench.mariadb)
                cpu[side].append((job_after - job_before, server_after - server_before))
            print(
                f"round {r + 1}: "
                + ", ".join(f"{side} {times[side][-1]:.1f} s" for side in run)
                + "; "
                + load_line("end of the round")
            )
        checksums = {t: bench.sql(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES.values()}
        assert len(set(checksums.values())) == 1, f"results differ: {checksums}"
        print(
            f"{rows:,} rows in {files} JSON files, {per_trigger} files per trigger, "
            f"job.writer = {writer}, {repeat} alternating rounds"
        )
        for side in ("ours", "before") if before is not None else ("ours",):
            mine = statistics.median(times[side])
            name = "this code" if side == "ours" else f"the code in {before}"
            for base_side, label in LABELS.items():
                base = statistics.median(times[base_side])
                per_round = [b / o for b, o in zip(times[base_side], times[side])]
                print(
                    f"end-to-end ratio, {name}, vs {label}: {base / mine:.2f} (goal "
                    f">= 1.0; median {mine:.1f} s vs {base:.1f} s; per round "
                    f"{', '.join(f'{p:.2f}' for p in per_round)})"
                )
        for side, used in cpu.items():
            job = statistics.median(j for j, _ in used)
            server = statistics.median(m for _, m in used)
            print(
                f"CPU seconds, {side} (median): spark-submit {job:.1f} + MariaDB "
                f"{server:.1f} = {job + server:.1f}"
            )
        for side, runs in timelines.items():
            for i, timeline in enumerate(runs, 1):
                print(f"timeline of {side} run {i} ({timeline.total:.1f} s):")
                print("\n".join(timeline.lines()))
    print(load_line("end"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1_000_000, 20, 5])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--writer", choices=("foreach_batch", "datasource"), default="foreach_batch"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also run the job with wal_sink imported from this checkout, e.g. "
        "the code before a change, alternating with the others",
    )
    args = parser.parse_args()
    main(*args.counts[:3], repeat=args.repeat, writer=args.writer, before=args.before)
