"""One stream, several tables, through the real job (``spark-submit
jobs/stream_to_mysql.py``): a batch's rows for every table and its ack row commit
together, under SIGKILLs, while a reader checks in one snapshot a fact that holds
only then; and Debezium's topic-per-table CDC from a real broker."""

from __future__ import annotations

import json
import os
import threading
import time
from decimal import Decimal
from pathlib import Path

import pymysql

from tests.helpers import JOB, SEED, rng, survive_kills_then_drain

SHOP = """
[sink]
id = "{sink}"

{source}

[wal]
path = "{home}/wal"

[mysql]
url = "{url}"
route_column = "{route}"
{tables}

[job]
checkpoint = "{home}/checkpoint"
{job}
"""
TOTALS_OFF = (
    "SELECT COUNT(*) FROM customers c LEFT JOIN (SELECT customer_id, "
    "SUM(amount) AS s FROM orders GROUP BY customer_id) o ON o.customer_id = c.id "
    "WHERE c.total <> COALESCE(o.s, 0)"
)


def fresh_shop(db) -> None:
    """customers(id, total) <- orders(id, customer_id, amount)."""
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET FOREIGN_KEY_CHECKS = 0")
        for t in ("orders", "customers", "wal_sink_ack", "wal_sink_ack_tables"):
            cur.execute(f"DROP TABLE IF EXISTS {t}")
        for t in ("orders_tombstones", "customers_tombstones"):
            cur.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR(16), "
        "total DECIMAL(14,2), seq BIGINT) ENGINE=InnoDB"
    )
    db.execute(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        "amount DECIMAL(12,2), seq BIGINT, FOREIGN KEY (customer_id) REFERENCES "
        "customers (id)) ENGINE=InnoDB"
    )


def shop_config(path: Path, db, *, source: str, route: str, tables: str) -> Path:
    path.write_text(
        SHOP.format(
            sink=path.stem,
            source=source,
            home=path.parent,
            url=db.url,
            route=route,
            tables=tables,
            job=JOB,
        )
    )
    return path


class SnapshotReader(threading.Thread):
    """Checks, in one consistent snapshot at a time, that each customer's total is
    the sum of its orders: true only if a batch's rows of both tables commit
    together."""

    def __init__(self, db) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.checks = 0
        self.violations = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        conn = self.db.connect()
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            while not self.stopping.is_set():
                try:
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                    cur.execute(TOTALS_OFF)
                    self.violations += cur.fetchone()[0]
                    cur.execute("COMMIT")
                    self.checks += 1
                except pymysql.err.ProgrammingError:
                    pass  # the tables are being made
                time.sleep(0.02)
        conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


def test_two_tables_commit_together_through_killed_jobs_and_end_exact(db, tmp_path):
    """Each file holds orders and, in the same batch, their customers' running
    totals (added). Killed twice mid-stream, then drained: the totals are exact,
    and no snapshot ever saw a total without its orders or orders without it."""
    print(f"seed {SEED}")
    fresh_shop(db)
    landing = tmp_path / "landing"
    landing.mkdir()
    config = shop_config(
        tmp_path / "shop.toml",
        db,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "tbl STRING, id BIGINT, customer_id BIGINT, amount DECIMAL(12,2)"
options = {{ maxFilesPerTrigger = 2 }}

[transform]
sql = "SELECT tbl, id, customer_id, amount, amount AS total FROM source"
""",
        route="tbl",
        tables="""
[mysql.tables.customers]
key = ["id"]
columns = ["id", "total"]
merge = { total = "add" }

[mysql.tables.orders]
key = ["id"]
columns = ["id", "customer_id", "amount"]
""",
    )
    expected: dict[int, Decimal] = {}

    def arrive(killed: threading.Event) -> None:
        order = 0
        i = -1
        while (i := i + 1) < 45 or not killed.is_set():
            lines = []
            for _ in range(rng.randrange(1, 12)):
                order += 1
                customer = rng.randrange(1, 7)
                amount = Decimal(rng.randrange(1, 10_000)) / 100
                # the order first: the sink must still write its parent first
                lines.append(
                    {
                        "tbl": "orders",
                        "id": order,
                        "customer_id": customer,
                        "amount": str(amount),
                    }
                )
                lines.append(
                    {"tbl": "customers", "id": customer, "amount": str(amount)}
                )
                expected[customer] = expected.get(customer, Decimal(0)) + amount
            tmp = landing / f".f{i:03d}.tmp"
            tmp.write_text("".join(json.dumps(x) + "\n" for x in lines))
            tmp.rename(landing / f"f{i:03d}.json")
            time.sleep(0.45)

    reader = SnapshotReader(db)
    reader.start()
    try:
        survive_kills_then_drain(config, tmp_path / "job.log", arrive)
    finally:
        reader.stop()
    assert dict(db.rows("SELECT id, total FROM customers")) == expected
    assert db.rows(TOTALS_OFF) == [(0,)]
    assert reader.violations == 0
    assert reader.checks >= 200, reader.checks
    log = (tmp_path / "job.log").read_text()
    assert "tables=" in log and "customers:" in log


def test_debezium_topics_land_in_their_tables_through_a_killed_job(db, kafka, tmp_path):
    """One topic per table, as Debezium writes them (dots in the names): the
    records' topic routes them; creates, updates and deletes of both tables end as
    their newest event says, a child deleted before its parent."""
    fresh_shop(db)
    topics = {"customers": "dbz.shop.customers", "orders": "dbz.shop.orders"}
    for topic in topics.values():
        kafka.create_topic(topic, partitions=1)
    row = "STRUCT<id: BIGINT, name: STRING, customer_id: BIGINT, amount: DECIMAL(12,2)>"
    config = shop_config(
        tmp_path / "dbz.toml",
        db,
        source=f"""
[source]
format = "kafka"
schema = "before {row}, after {row}, op STRING, ts_ms BIGINT"
options = {{ "kafka.bootstrap.servers" = "{kafka.bootstrap}", \
subscribePattern = "dbz[.]shop[.].*", startingOffsets = "earliest" }}

[transform]
sql = \"\"\"SELECT topic, op, ts_ms AS seq,
  COALESCE(after.id, before.id) AS id, after.name AS name,
  after.customer_id AS customer_id, after.amount AS amount FROM source\"\"\"

[cdc]
op_column = "op"
delete_values = ["d"]
order_by = "seq"
""",
        route="topic",
        tables=f"""
[mysql.tables.customers]
route = "{topics["customers"]}"
key = ["id"]
columns = ["id", "name", "seq"]
version_column = "seq"

[mysql.tables.orders]
route = "{topics["orders"]}"
key = ["id"]
columns = ["id", "customer_id", "amount", "seq"]
version_column = "seq"
""",
    )
    customers: dict[int, str | None] = {}
    orders: dict[int, tuple[int, Decimal] | None] = {}

    def produce(killed: threading.Event) -> None:
        producer = kafka.producer()
        seq = 0

        def send(table: str, op: str, before, after) -> None:
            nonlocal seq
            seq += 1
            event = {"before": before, "after": after, "op": op, "ts_ms": seq}
            producer.send(topics[table], json.dumps(event).encode())
            producer.flush()  # a parent is readable before its child is sent

        i = 0
        while (i := i + 1) <= 60 or not killed.is_set():
            c = rng.randrange(1, 6)
            if c not in customers or customers[c] is None:
                after = {"id": c, "name": f"c{c}-{i}"}
                send("customers", "c", None, after)
                customers[c] = after["name"]
            amount = Decimal(rng.randrange(1, 10_000)) / 100
            send(
                "orders",
                "c",
                None,
                {"id": i, "customer_id": c, "amount": str(amount)},
            )
            orders[i] = (c, amount)
            if i % 7 == 0:  # a customer leaves: its orders first, then itself
                for o, kept in list(orders.items()):
                    if kept is not None and kept[0] == c:
                        send("orders", "d", {"id": o}, None)
                        orders[o] = None
                send("customers", "d", {"id": c}, None)
                customers[c] = None
            time.sleep(0.15)
        producer.close()

    survive_kills_then_drain(config, tmp_path / "job.log", produce, rounds=1)
    assert dict(db.rows("SELECT id, name FROM customers")) == {
        c: n for c, n in customers.items() if n is not None
    }
    assert {
        r[0]: (r[1], r[2])
        for r in db.rows("SELECT id, customer_id, amount FROM orders")
    } == {o: v for o, v in orders.items() if v is not None}
    assert db.rows(
        "SELECT COUNT(*) FROM wal_sink_ack_tables WHERE table_name = ''"
    ) == [(0,)], "no event's topic names no table"
    assert not os.path.exists(tmp_path / "wal_quarantine")
