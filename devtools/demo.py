"""`make demo`: the invoice pipeline end to end, with a hard crash in the middle.

Starts a private MariaDB and Kafka broker, produces invoice messages over time,
runs ``spark-submit jobs/stream_to_mysql.py -c conf/invoices.toml``, kills it with
SIGKILL mid-way and restarts it (recovery shows in its log), drains, then prints the
MySQL totals beside totals computed here from the produced messages, ``wal-sink
status``, and one line saying whether they match exactly.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from devtools.invoices import InvoiceFeed
from devtools.kafka import KafkaBroker
from devtools.mariadb import SINK_PASSWORD, MariaDB
from devtools.spark_job import REPO, JobProcess, job_env

VAR = REPO / "var"
CONFIG = "conf/invoices.toml"
MESSAGES, SECONDS = 1600, 40
CATCH_UP_SECONDS = 180
console = Console(highlight=False, soft_wrap=True)  # lines whole, also in a log file


def say(text: str) -> None:
    console.print(f"[bold cyan]demo[/]: {text}")


def follow(log: Path, stop: threading.Event) -> None:
    """Echo the job's output as it comes, each line whole. Spark logs at WARN by
    default, so that is the sink's own lines and Spark's warnings and errors."""
    while not log.exists():
        time.sleep(0.2)
    with open(log, errors="replace") as f:
        pending = ""
        while not stop.is_set():
            pending += f.readline()
            if not pending.endswith("\n"):  # nothing new, or half a line so far
                time.sleep(0.2)
                continue
            line, pending = pending.rstrip(), ""
            if line:
                console.print(Text.assemble(("  job ", "dim"), line))


def produce(broker: KafkaBroker, feed: InvoiceFeed, done: threading.Event) -> None:
    producer = broker.producer()
    for i in range(MESSAGES):
        producer.send("invoices", json.dumps(feed.message()).encode())
        time.sleep(SECONDS / MESSAGES)
    producer.send(
        "invoices", json.dumps(feed.closing(datetime.now(timezone.utc))).encode()
    )
    producer.flush()
    producer.close()
    done.set()


def main() -> int:
    # Everything the sink owns: WAL, quarantine, the job's and the parse-error
    # query's checkpoints (a stale one holds offsets of the previous broker).
    for path in (
        VAR / "demo",
        VAR / "wal" / "invoices",
        VAR / "wal" / "invoices_quarantine",
        VAR / "checkpoints" / "invoices",
        VAR / "checkpoints" / "invoices_parse_errors",
    ):
        shutil.rmtree(path, ignore_errors=True)
    mariadb = MariaDB(VAR / "demo" / "mariadb", port=33306)
    broker = KafkaBroker(VAR / "demo" / "kafka", port=39092)
    stop_follow = threading.Event()
    try:
        say(
            "starting a private MariaDB on 127.0.0.1:33306 and Kafka on 127.0.0.1:39092"
        )
        mariadb.start()
        mariadb.create_database("shop")
        with mariadb.root("shop") as conn, conn.cursor() as cur:
            cur.execute(
                (REPO / "sql" / "demo_kpxxb_hzb.sql").read_text().strip().rstrip(";")
            )
        broker.start()
        broker.create_topic("invoices", partitions=2)
        env = job_env(WAL_SINK_MYSQL_PASSWORD=SINK_PASSWORD)
        log = VAR / "demo" / "job.log"
        threading.Thread(target=follow, args=(log, stop_follow), daemon=True).start()

        feed, produced = InvoiceFeed(), threading.Event()
        say(
            f"producing {MESSAGES} invoice messages over {SECONDS}s "
            f"(every {feed.invalid_every}th lacks `magic` and must be ignored)"
        )
        threading.Thread(
            target=produce, args=(broker, feed, produced), daemon=True
        ).start()
        say(f"spark-submit jobs/stream_to_mysql.py -c {CONFIG}")
        job = JobProcess(CONFIG, log, env=env)
        wait_for_log(log, "batch 1 applied", timeout=180)
        time.sleep(random.uniform(0.5, 3.0))
        say("[bold red]kill -9[/] the job (driver and JVM) in the middle of the stream")
        job.kill()
        time.sleep(2)
        say(
            "restarting it: it recovers unacked batches, then resumes from its "
            "checkpoint"
        )
        job = JobProcess(CONFIG, log, env=env)
        produced.wait()
        say(
            "all messages produced, then one invoice dated an hour later: it closes "
            "every "
            "earlier 2-second window (its own stays open, so it is not counted below); "
            f"letting the job catch up (at most {CATCH_UP_SECONDS}s)"
        )
        wait_for_totals(mariadb, feed.expected, CATCH_UP_SECONDS)
        say("SIGTERM: the job stops after its current batch")
        job.terminate()
        say("one more run that drains whatever is left: spark-submit … --available-now")
        job = JobProcess(CONFIG, log, "--available-now", env=env)
        if job.wait(timeout=600) != 0:
            say(f"the drain failed; see {log}")
            return 1
        time.sleep(0.5)
        stop_follow.set()
        return report(mariadb, feed, env)
    finally:
        stop_follow.set()
        broker.stop()
        mariadb.stop()


def wait_for_log(log: Path, text: str, timeout: float) -> None:
    """Wait until the job has logged ``text`` (so the kill lands mid-stream)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.5)


def mysql_totals(mariadb: MariaDB) -> dict[tuple[str, str], tuple[Decimal, int]]:
    with mariadb.root("shop") as conn, conn.cursor() as cur:
        cur.execute("SELECT swjg_dm, fpzt, hjje, fs FROM kpxxb_hzb")
        return {(r[0], r[1]): (r[2], r[3]) for r in cur.fetchall()}


def wait_for_totals(mariadb: MariaDB, expected: dict, timeout: float) -> None:
    """Windows reach MySQL once the watermark passes them: wait for the stream to
    catch up. Whether the result is exact is judged after the job has stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and mysql_totals(mariadb) != dict(expected):
        time.sleep(1)


def report(mariadb: MariaDB, feed: InvoiceFeed, env: dict[str, str]) -> int:
    mysql = mysql_totals(mariadb)
    expected = dict(feed.expected)
    table = Table(
        title="kpxxb_hzb: MySQL vs. totals computed from the produced messages"
    )
    for col in (
        "swjg_dm",
        "fpzt",
        "hjje (MySQL)",
        "hjje (expected)",
        "fs (MySQL)",
        "fs (expected)",
        "",
    ):
        table.add_column(col, justify="right" if "(" in col else "left")
    for key in sorted(set(mysql) | set(expected)):
        got, want = mysql.get(key, (Decimal(0), 0)), expected.get(key, (Decimal(0), 0))
        table.add_row(
            *key,
            str(got[0]),
            str(want[0]),
            str(got[1]),
            str(want[1]),
            "ok" if got == want else "[red]DIFFERS[/]",
        )
    console.print(table)
    subprocess.run(
        [str(Path(sys.executable).with_name("wal-sink")), "-c", CONFIG, "status"],
        cwd=REPO,
        env=env,
    )
    exact = mysql == expected
    valid = sum(c for _, c in expected.values())
    console.print(
        f"{valid} valid invoices in {len(expected)} groups; "
        f"exact: {'yes' if exact else 'no'}"
    )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
