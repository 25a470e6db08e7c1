"""Micro-batch cost: what one micro-batch costs the real job (``spark-submit
jobs/stream_to_mysql.py -c … --available-now``: JSON files of 100 rows, one file per
trigger, staged into the WAL and applied to MySQL exactly once, the parse-error side
query beside it), with each of its writers (``job.writer``: ``foreach_batch``, the
committer thread in the driver; ``datasource``, ``format("wal_sink")`` and the
follower process), vs. the at-least-once job users compare with: the same files
streamed through ``foreachBatch`` + ``df.write.jdbc`` append (bench/jdbc_append_app.py,
MariaDB Connector/J). Goal >= 1.0: baseline cost / ours (higher is better).

Usage: python -m bench.micro_batch_cost [FEW MANY] [--repeat N] [--no-profile]
                                        [--breakdown] [--before DIR] [--logs DIR]
Each side runs once over FEW files and once over MANY (default 5 and 45), as a new
process with a new checkpoint, WAL, sink id and an emptied table each time; the
per-batch cost is the slope (t_many - t_few) / (MANY - FEW), so JVM start-up and
everything else done once per run cancels out. Rounds alternate the three sides
(``--repeat``, default 3); each ratio is of the medians of the per-round slopes.

Where the time goes: the job's own log lines (``batch N staged: … stage_ms=``,
``batch N applied: … commit_ms=``) of the MANY runs, and, unless ``--no-profile``,
one more run of each side over MANY files with Spark's streaming progress logged
(log4j INFO for org.apache.spark.sql.execution.streaming, not in the timed runs):
each query's per-trigger durations (addBatch is the foreachBatch function; the rest
is Spark's own per-trigger work: offsets, planning, the offset and commit logs).
``--breakdown`` (profiled runs even with ``--no-profile``) prints one table of
medians per trigger, a column per side: Spark's durations of each side's query and
of the parse-error query beside ours, then the parts of the job's ``staged`` line
(``plan``: from the offset log's batchTimestampMs to the foreachBatch call;
``lease``; ``wait``, backpressure; ``check``, ``write``, ``list``, ``delta``: the
WAL's version check, the executors' write, listing and footers, the delta-rs
commit; ``handoff``) and the committer's ``commit_ms``. The data source's
``staged`` line is logged in Spark's Python worker, so its column has Spark's
parts only. ``--before DIR`` adds a side: the foreach_batch job with wal_sink
imported from another checkout (``git archive REF | tar -x -C DIR``), so a change is
judged against the code before it in the same alternating rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from datetime import datetime
from pathlib import Path

from bench.common import Bench, load_line, ratio_line
from devtools.spark_job import REPO, SPARK_SUBMIT, JobProcess, job_env

SCHEMA = "k STRING, amount DECIMAL(12,2), label STRING, seq BIGINT"
TABLE = (
    "(k VARCHAR(24) PRIMARY KEY, amount DECIMAL(12,2), label VARCHAR(32), "
    "seq BIGINT) ENGINE=InnoDB"
)
ROWS_PER_FILE = 100
WRITERS = ("foreach_batch", "datasource")
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %p %c: %m%n
logger.streaming.name = org.apache.spark.sql.execution.streaming
logger.streaming.level = info
"""
STAGED = re.compile(
    r"^(\S+ \S+) INFO wal_sink\.job: batch (\d+) staged: .*stage_ms=(\d+)"
)
APPLIED = re.compile(r"batch (\d+) applied: .*commit_ms=(\d+)")


def landing(bench: Bench, files: int) -> Path:
    """``files`` JSON files of 100 rows each, unique keys, written one after another
    (the file source takes them in modification-time order)."""
    path = bench.dir / f"landing_{files}"
    path.mkdir()
    for f in range(files):
        lines = []
        for i in range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE):
            lines.append(
                json.dumps(
                    {"k": f"key-{i}", "amount": i % 1000, "label": f"l-{i}", "seq": i}
                )
            )
        (path / f"part-{f:05d}.json").write_text("\n".join(lines) + "\n")
        os.utime(path / f"part-{f:05d}.json", (time.time(), time.time() + f))
    return path


class Runs:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.count = 0
        self.log4j = bench.dir / "log4j2-progress.properties"
        self.log4j.write_text(LOG4J)

    def _profile_args(self, profile: bool) -> tuple[str, ...]:
        if not profile:
            return ()
        option = f"-Dlog4j2.configurationFile=file:{self.log4j}"
        return ("--conf", f"spark.driver.extraJavaOptions={option}")

    def ours(
        self,
        source: Path,
        files: int,
        writer: str,
        profile: bool = False,
        code: Path | None = None,
    ) -> tuple[float, Path]:
        """The real job over ``source`` with ``job.writer = writer``, with wal_sink
        imported from ``code`` when given: (seconds, its log)."""
        self.count += 1
        sink_id = f"job_{files}_{self.count}"
        config = self.bench.dir / f"{sink_id}.toml"
        config.write_text(f"""
[sink]
id = "{sink_id}"
[source]
format = "json"
path = "{source}"
schema = "{SCHEMA}"
options = {{ maxFilesPerTrigger = 1 }}
[wal]
path = "{self.bench.dir / ("wal_" + sink_id)}"
[mysql]
url = "{self.bench.mariadb.sink_url("bench")}"
table = "job_target"
key = ["k"]
[job]
checkpoint = "{self.bench.dir / ("checkpoint_" + sink_id)}"
writer = "{writer}"
""")
        self.bench.sql("TRUNCATE job_target")
        log = self.bench.dir / f"{sink_id}.log"
        started = time.perf_counter()
        job = JobProcess(
            config,
            log,
            "--available-now",
            env=job_env(**({"PYTHONPATH": str(code)} if code else {})),
            submit_args=self._profile_args(profile),
            code=code,
        )
        status = job.wait()
        elapsed = time.perf_counter() - started
        assert status == 0, job.tail()
        self._check("job_target", files)
        return elapsed, log

    def baseline(
        self, source: Path, files: int, profile: bool = False
    ) -> tuple[float, Path]:
        """bench/jdbc_append_app.py over ``source``: (seconds, its log)."""
        self.count += 1
        name = f"jdbc_{files}_{self.count}"
        self.bench.sql("TRUNCATE jdbc_target")
        log = self.bench.dir / f"{name}.log"
        started = time.perf_counter()
        with open(log, "ab") as out:
            proc = subprocess.run(
                [
                    SPARK_SUBMIT,
                    *self._profile_args(profile),
                    str(REPO / "bench" / "jdbc_append_app.py"),
                    str(source),
                    SCHEMA,
                    str(self.bench.dir / f"checkpoint_{name}"),
                    self.bench.jdbc_url,
                    "jdbc_target",
                ],
                cwd=REPO,
                env=job_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        elapsed = time.perf_counter() - started
        assert proc.returncode == 0, log.read_text()[-3000:]
        self._check("jdbc_target", files)
        return elapsed, log

    def _check(self, table: str, files: int) -> None:
        rows = self.bench.sql(f"SELECT COUNT(*) FROM {table}")[0][0]
        assert rows == files * ROWS_PER_FILE, f"{table}: {rows} rows"


PARTS = re.compile(r" (\w+)_ms=(\d+)")


def staged_parts(logs: list[Path]) -> dict[str, list[float]]:
    """Each part of the job's ``staged`` lines (plan_ms, write_ms, …), its
    ``commit_ms`` (the committer, behind Spark) and the time between two ``staged``
    lines, over ``logs``."""
    parts: dict[str, list[float]] = {}
    for log in logs:
        stamps = []
        for line in log.read_text(errors="replace").splitlines():
            if m := STAGED.search(line):
                stamps.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f"))
                for name, ms in PARTS.findall(line[m.end(2) :]):
                    parts.setdefault(name, []).append(float(ms))
            elif m := APPLIED.search(line):
                parts.setdefault("committer commit", []).append(float(m.group(2)))
        parts.setdefault("between two staged lines", []).extend(
            (b - a).total_seconds() * 1000 for a, b in zip(stamps, stamps[1:])
        )
    return parts


def job_log_summary(logs: list[Path]) -> str:
    """Medians over the job's own per-batch log lines."""
    parts = staged_parts(logs)
    return (
        f"job log, MANY runs: stage_ms median {_med(parts.get('stage', []))}, "
        f"commit_ms median {_med(parts.get('committer commit', []))} (behind Spark), "
        "time between two 'staged' lines median "
        f"{_med(parts['between two staged lines'])} ms"
    )


def progress_by_query(log: Path, skip: int = 3) -> dict[str, dict[str, list[float]]]:
    """Per query, Spark's per-trigger durations (``durationMs``) and the time between
    trigger starts, over triggers that read rows (the first ``skip`` left out)."""
    text = log.read_text(errors="replace")
    decoder = json.JSONDecoder()
    by_query: dict[str, list[dict]] = {}
    marker = "Streaming query made progress: "
    for m in re.finditer(re.escape(marker), text):
        progress, _ = decoder.raw_decode(text, m.end())
        by_query.setdefault(progress.get("name") or "?", []).append(progress)
    result = {}
    for name, progresses in by_query.items():
        counted = [
            p for p in progresses if p["batchId"] >= skip and p.get("numInputRows")
        ]
        keys = sorted({k for p in counted for k in p["durationMs"]})
        durations = {k: [p["durationMs"].get(k, 0) for p in counted] for k in keys}
        starts = [
            datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            for p in counted
        ]
        durations["between trigger starts"] = [
            (b - a).total_seconds() * 1000 for a, b in zip(starts, starts[1:])
        ]
        durations["triggers"] = [len(counted)]
        result[name] = durations
    return result


def progress_summary(log: Path, skip: int = 3) -> list[str]:
    """Per query: medians of Spark's per-trigger durations and of the time between
    trigger starts."""
    lines = []
    for name, durations in progress_by_query(log, skip).items():
        triggers = durations.pop("triggers")[0]
        between = durations.pop("between trigger starts")
        medians = ", ".join(f"{k} {_med(v)}" for k, v in durations.items())
        lines.append(
            f"  {name}: {triggers} triggers; median ms: {medians}; "
            f"between trigger starts {_med(between)}"
        )
    return lines


SPARK_PARTS = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
    "triggerExecution",
    "between trigger starts",
)
SINK_PARTS = (
    "plan",
    "fold",
    "lease",
    "wait",
    "check",
    "collect",
    "write",
    "list",
    "delta",
    "handoff",
    "errors",
    "stage",
    "between two staged lines",
    "committer commit",
)


def breakdown(logs: dict[str, Path]) -> list[str]:
    """A table of medians (ms) per part, one column per side: Spark's per-trigger
    durations of each side's main query (and of the parse-error query beside ours),
    then the parts of the sink's own ``staged`` lines."""
    columns: dict[str, dict[str, list[float]]] = {}
    for side, log in logs.items():
        queries = progress_by_query(log)
        main = {k: v for k, v in queries.items() if not k.endswith("_parse_errors")}
        columns[side] = next(iter(main.values()), {})
        for name, durations in queries.items():
            if name.endswith("_parse_errors"):
                columns[side].update(
                    {f"parse-error query: {k}": v for k, v in durations.items()}
                )
        columns[side].update({f"sink: {k}": v for k, v in staged_parts([log]).items()})
    rows = [f"Spark: {k}" for k in SPARK_PARTS]
    rows += [
        f"parse-error query: {k}"
        for k in ("triggers", "triggerExecution", "between trigger starts")
    ]
    rows += [f"sink: {k}" for k in SINK_PARTS]
    width = max(len(r) for r in rows) + 2
    out = [f"{'median ms per trigger':<{width}}" + "".join(f"{s:>15}" for s in logs)]
    for row in rows:
        key = row.removeprefix("Spark: ")
        cells = [_med(columns[side].get(key, [])) for side in logs]
        if any(c != "-" for c in cells):
            out.append(f"{row:<{width}}" + "".join(f"{c:>15}" for c in cells))
    return out


def _med(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def main(
    few: int = 5,
    many: int = 45,
    repeat: int = 3,
    profile: bool = True,
    logs: Path | None = None,
    show_breakdown: bool = False,
    before: Path | None = None,
) -> None:
    print(load_line("start"))
    with Bench("microbatch") as bench:
        bench.sql(
            f"CREATE TABLE job_target {TABLE}", f"CREATE TABLE jdbc_target {TABLE}"
        )
        sources = {few: landing(bench, few), many: landing(bench, many)}
        runs = Runs(bench)
        # Our sides: (writer, the code's checkout or None for this one).
        ours = {writer: (writer, None) for writer in WRITERS}
        if before is not None:
            ours["before"] = ("foreach_batch", before)
        # warm-up of each (page cache, first MariaDB tables), not counted
        for writer, code in ours.values():
            runs.ours(sources[few], few, writer, code=code)
        runs.baseline(sources[few], few)
        sides = (*ours, "baseline")
        times = {side: {few: [], many: []} for side in sides}
        many_logs: dict[str, list[Path]] = {side: [] for side in ours}
        for _ in range(repeat):
            for files in (many, few):
                for side, (writer, code) in ours.items():
                    elapsed, log = runs.ours(sources[files], files, writer, code=code)
                    times[side][files].append(elapsed)
                    if files == many:
                        many_logs[side].append(log)
                times["baseline"][files].append(runs.baseline(sources[files], files)[0])
        slope = {
            side: [
                (m - f) / (many - few)
                for m, f in zip(times[side][many], times[side][few])
            ]
            for side in times
        }
        for side in sides:
            label = "JDBC append" if side == "baseline" else f"job ({side})"
            if side == "before":
                label = f"job (foreach_batch, the code in {before})"
            print(
                f"{label}: {few} files {_s(times[side][few])}, {many} files "
                f"{_s(times[side][many])}; per batch {_s(slope[side], 3)}"
            )
        for writer in ours:
            print(
                ratio_line(
                    f"micro-batch cost ratio, {writer} (baseline cost / ours)",
                    [1 / s for s in slope[writer]],
                    [1 / s for s in slope["baseline"]],
                    ">= 1.0",
                )
                + f"; median per batch {statistics.median(slope[writer]) * 1000:.0f}"
                f" ms vs {statistics.median(slope['baseline']) * 1000:.0f} ms"
            )
            print(f"{writer}: {job_log_summary(many_logs[writer])}")
        if profile or show_breakdown:
            print("Spark's streaming progress (one more run each, logged):")
            profiled: dict[str, Path] = {}
            for side, (writer, code) in ours.items():
                _, profiled[side] = runs.ours(
                    sources[many], many, writer, profile=True, code=code
                )
            _, profiled["JDBC append"] = runs.baseline(
                sources[many], many, profile=True
            )
            for side, log in profiled.items():
                print(f" {side}:")
                print("\n".join(progress_summary(log)))
            if show_breakdown:
                print(
                    "Where a micro-batch's time goes (profiled runs over MANY files; "
                    "Spark's durationMs per trigger, and the sink's staged-line parts):"
                )
                print("\n".join(breakdown(profiled)))
        if logs is not None:  # the runs' logs, for a closer look
            logs.mkdir(parents=True, exist_ok=True)
            for log in bench.dir.glob("*.log"):
                shutil.copy(log, logs / log.name)
    print(load_line("end"))


def _s(values: list[float], digits: int = 1) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "] s"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[5, 45])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--logs", type=Path, help="copy the runs' logs here")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="print the median of each part of a micro-batch for each side",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also run the job (foreach_batch) with wal_sink imported from this "
        "checkout, e.g. the code before a change, alternating with the others",
    )
    args = parser.parse_args()
    main(
        *args.counts[:2],
        repeat=args.repeat,
        profile=not args.no_profile,
        logs=args.logs,
        show_breakdown=args.breakdown,
        before=args.before,
    )
