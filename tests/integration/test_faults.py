"""Faults and bad input against the real MariaDB (docs/failures.md): each test ends with
MySQL exact and the quarantine holding exactly the bad rows."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from tests.helpers import amounts, documented_user, staged
from tests.integration.lost_reply import LostCommitReply
from wal_sink import TerminalError, TransientError, faults
from wal_sink.metrics import SinkMetrics
from wal_sink.mysql.engine import make_engine
from wal_sink.mysql.preflight import preflight
from wal_sink.mysql.target import reflect_target
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine
from wal_sink.wal.writer import WalWriter


@pytest.fixture
def target(db):
    for t in ("acct", "wal_sink_ack", "wal_sink_lease", "parent", "bulk"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE parent (k VARCHAR(16) PRIMARY KEY) ENGINE=InnoDB")
    db.execute(
        "CREATE TABLE acct (k VARCHAR(16) PRIMARY KEY, amount DECIMAL(8,2) NOT NULL,"
        " note VARCHAR(8), CONSTRAINT fk FOREIGN KEY (k) REFERENCES parent (k))"
        " ENGINE=InnoDB"
    )
    db.execute("INSERT INTO parent VALUES " + ",".join(f"('k{i}')" for i in range(50)))
    return lambda: dict(db.rows("SELECT k, amount FROM acct"))


def test_poison_rows_are_quarantined_and_the_rest_commits(
    spark, db, target, make_config
):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=7)
    good = amounts(20)
    poison = [
        (None, Decimal(1), "nullkey"),  # null key column
        ("k30", Decimal(1), "much-too-long"),  # 1406 data too long
        ("k31", Decimal("123456789.00"), "range"),  # 1264 out of range
        ("k32", None, "nullamt"),  # 1048 null into NOT NULL
        ("nope", Decimal(1), "fk"),  # 1452 foreign key
    ]
    rows = good[:7] + poison[:2] + good[7:14] + poison[2:] + good[14:]
    instance, committer = staged(spark, config, rows)
    result = committer.apply(0)
    assert (result.rows, result.quarantined) == (20, 5)
    assert target() == {k: a for k, a, _ in good}
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(20, 5)]
    entries = Quarantine(config.quarantine_path, "s1").read(100)
    reasons = {json.loads(e["record"])["note"]: e["reason"] for e in entries}
    assert len(entries) == 5 and all(e["batch_id"] == 0 for e in entries)
    assert reasons["nullkey"].startswith("null key column(s): k")
    assert {note: reason.split(":")[0] for note, reason in reasons.items()} == {
        "nullkey": "null key column(s)",
        "much-too-long": "MySQL error 1406",
        "range": "MySQL error 1264",
        "nullamt": "MySQL error 1048",
        "fk": "MySQL error 1452",
    }
    # Entries belong to the apply that set them aside: the one the ack row names.
    ((apply_id,),) = db.rows("SELECT apply_id FROM wal_sink_ack")
    assert {e["apply_id"] for e in entries} == {apply_id}
    # A forced replay is a second committed apply: its entries are its own, once.
    committer.apply(0, force=True)
    entries = Quarantine(config.quarantine_path, "s1").read(100)
    ((replayed,),) = db.rows("SELECT apply_id FROM wal_sink_ack")
    assert replayed != apply_id
    assert Counter(e["apply_id"] for e in entries) == {apply_id: 5, replayed: 5}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_outbox") == [(0,)]


def test_deadlock_victim_batch_is_retried_whole(spark, db, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=1)
    instance, committer = staged(spark, config, amounts(2))
    db.execute("INSERT INTO acct VALUES ('k0', 100, 'x'), ('k1', 100, 'x')")
    db.execute("CREATE TABLE bulk (i INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    db.execute("INSERT INTO bulk SELECT seq, 0 FROM seq_1_to_2000")
    other = db.connect()
    blocked = threading.Event()
    first_attempt = [True]

    def lock_in_opposite_order(done: int, total: int) -> None:
        if not first_attempt[0] or done != 1:
            return
        first_attempt[0] = False  # the sink now holds k0; the other session takes k1
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("UPDATE bulk SET v = v + 1")  # heavier: the sink is the victim
            cur.execute("UPDATE acct SET note = 'other' WHERE k = 'k1'")

        def then_k0() -> None:
            blocked.set()
            with other.cursor() as cur:
                cur.execute("UPDATE acct SET note = 'other' WHERE k = 'k0'")
                cur.execute("COMMIT")

        threading.Thread(target=then_k0, daemon=True).start()
        blocked.wait()
        time.sleep(0.3)

    result = committer.apply(0, on_chunk=lock_in_opposite_order)
    assert result.applied and result.rows == 2
    assert target() == {"k0": Decimal(101), "k1": Decimal(102)}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(1,)]
    other.close()


def test_lock_held_past_wait_timeout_is_retried(
    spark, db, mariadb, target, make_config
):
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL innodb_lock_wait_timeout = 1")
    try:
        config = make_config(table="acct", merge={"amount": "add"})
        instance, committer = staged(spark, config, amounts(3))
        holder = db.connect()
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO acct VALUES ('k2', 5, 'held')")
        threading.Timer(2.5, lambda: holder.commit()).start()
        started = time.monotonic()
        assert committer.apply(0).rows == 3
        assert time.monotonic() - started > 2
        assert target() == {"k0": Decimal(1), "k1": Decimal(2), "k2": Decimal(8)}
        holder.close()
    finally:
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL innodb_lock_wait_timeout = 50")


def _kill_sink_transaction(db) -> None:
    ((thread,),) = db.rows(
        "SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
        " WHERE p.USER = 'sink'"
    )
    db.execute(f"KILL CONNECTION {int(thread)}")


def test_connection_killed_mid_transaction_is_retried(spark, db, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=2)
    instance, committer = staged(spark, config, amounts(6))
    killed = []

    def kill_once(done: int, total: int) -> None:
        if not killed:
            killed.append(done)
            _kill_sink_transaction(db)

    assert committer.apply(0, on_chunk=kill_once).rows == 6
    assert killed and target() == {f"k{i}": Decimal(i + 1) for i in range(6)}


def test_lost_commit_reply_reads_the_ack_instead_of_reapplying(
    spark, db, target, make_config, monkeypatch
):
    """The reply to COMMIT is lost once (whatever faults this process saw before):
    the retry finds its own ack row and applies nothing again."""
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(4))

    def retries() -> float:
        sample = instance.metrics.registry.get_sample_value
        return sample("wal_sink_transient_retries_total", {"sink": "s1"})

    monkeypatch.setattr(faults, "_raised", set())  # "once" starts now
    monkeypatch.setenv("WAL_SINK_FAULT", "commit.after_commit:0:lost-once")
    result = committer.apply(0)
    assert retries() == 1, "the reply was lost once, and the batch retried"
    assert (result.applied, result.rows) == (True, 4), "its own commit, found again"
    assert target() == {f"k{i}": Decimal(i + 1) for i in range(4)}
    # The same for a forced replay: it adds once, not twice.
    faults._raised.clear()
    result = committer.apply(0, force=True)
    assert retries() == 2
    assert target() == {f"k{i}": 2 * Decimal(i + 1) for i in range(4)}


def test_forced_replay_whose_commit_is_slow_and_reply_lost_adds_once(
    spark, db, mariadb, target, make_config
):
    """The server is still committing when the client gives up on the reply: the
    retry must wait for that commit's outcome (locking read after the lease lock),
    not decide from what a snapshot shows before it lands."""
    config = make_config(table="acct", merge={"amount": "add"})
    instance, committer = staged(spark, config, amounts(4))
    committer.apply(0)
    proxy = LostCommitReply(mariadb.port)
    impatient = replace(
        config,
        mysql=replace(
            config.mysql,
            url=config.mysql.url.replace(f":{mariadb.port}/", f":{proxy.port}/"),
            read_timeout=2.0,
        ),
    )
    forced = SinkInstance(impatient).committer_at(committer.epoch)
    blocker = mariadb.root()
    with blocker.cursor() as cur:  # COMMITs wait until BACKUP STAGE END
        cur.execute("BACKUP STAGE START")
        cur.execute("BACKUP STAGE BLOCK_COMMIT")
    released = threading.Timer(6, lambda: blocker.cursor().execute("BACKUP STAGE END"))
    released.start()
    result = forced.apply(0, force=True)
    released.join()
    blocker.close()
    proxy.close()
    assert proxy.reply_lost.is_set(), "the first COMMIT landed, its reply did not"
    assert result.applied and result.rows == 4
    assert target() == {f"k{i}": 2 * Decimal(i + 1) for i in range(4)}
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(1,)]


def test_server_down_for_seconds_mid_batch(spark, db, mariadb, target, make_config):
    config = make_config(table="acct", merge={"amount": "add"}, chunk_rows=2)
    instance, committer = staged(spark, config, amounts(6))
    crashed, restarted = threading.Event(), threading.Event()

    def crash_server_once(done: int, total: int) -> None:
        # Once: the committer may reach chunk 2 again on the restarted server
        # before start() has seen it up.
        if crashed.is_set() or done != 2:
            return
        crashed.set()
        mariadb.stop()  # SIGKILL: InnoDB rolls the open transaction back on restart

        def start_again() -> None:
            time.sleep(3)
            mariadb.start()
            restarted.set()

        threading.Thread(target=start_again, daemon=True).start()
        time.sleep(0.2)

    result = committer.apply(0, on_chunk=crash_server_once)
    # the committer may reconnect before start() has returned: wait for it
    assert restarted.wait(timeout=60) and result.rows == 6
    assert target() == {f"k{i}": Decimal(i + 1) for i in range(6)}
    assert db.rows("SELECT batch_id, row_count FROM wal_sink_ack") == [(0, 6)]


def test_transient_errors_beyond_the_limit_fail_the_batch(
    spark, db, target, make_config, mariadb, caplog
):
    config = make_config(table="acct")
    staged(spark, config, amounts(2))
    unreachable = replace(
        config,
        mysql=replace(
            config.mysql,
            url=f"mysql+pymysql://sink@127.0.0.1:{mariadb.port + 1}/x",
            outage_budget=0.5,
            retry_backoff=0.05,
        ),
    )
    metrics = SinkMetrics("s1")
    committer = SinkInstance(unreachable, metrics=metrics).committer_at(epoch=1)
    started = time.monotonic()
    with pytest.raises(TransientError, match="MySQL error 2003"):
        committer.apply(0)
    # The transaction was retried, each retry counted and logged, until the budget
    # was spent.
    logged = [r.getMessage() for r in caplog.records]
    retries = [m for m in logged if "of the transaction of batch 0 in" in m]
    assert len(retries) >= 2 and metrics.retries._value.get() == len(retries)
    assert "retry 2 of the transaction of batch 0" in retries[1]
    assert time.monotonic() - started >= unreachable.mysql.outage_budget


@pytest.mark.parametrize(
    "ddl, config_kw, message",
    [
        (
            "CREATE TABLE pf (k VARCHAR(8), amount INT) ENGINE=InnoDB",
            {},
            "mysql.key \\(k\\) is not the PRIMARY KEY or a UNIQUE key of table 'pf'",
        ),
        (
            "CREATE TABLE pf (id INT PRIMARY KEY, k VARCHAR(8), amount INT, UNIQUE "
            "KEY u (k, amount))"
            " ENGINE=InnoDB",
            {},
            "its keys: PRIMARY\\(id\\); u\\(k, amount\\)",
        ),
        (
            "CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY, amount VARCHAR(8)) "
            "ENGINE=InnoDB",
            {"merge": {"amount": "add"}},
            "'add' but column 'amount'.*not numeric",
        ),
        (
            "CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY) ENGINE=InnoDB",
            {"merge": {"amount": "add"}},
            "mysql.merge: column 'amount' does not exist",
        ),
        (
            "CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY, v VARCHAR(8)) ENGINE=InnoDB",
            {"version_column": "v"},
            "use a number or a date/time",
        ),
        (
            "CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY) ENGINE=MyISAM",
            {},
            "must be InnoDB",
        ),
        (None, {}, "target table does not exist"),
    ],
)
def test_preflight_refuses_a_wrong_target_with_one_line(
    db, make_config, ddl, config_kw, message
):
    db.execute("DROP TABLE IF EXISTS pf")
    if ddl:
        db.execute(ddl)
    with pytest.raises(TerminalError, match=message) as info:
        SinkInstance(make_config(table="pf", **config_kw)).start()
    assert "\n" not in str(info.value)


def test_preflight_warns_when_commits_are_not_durable(db, mariadb, make_config, caplog):
    db.execute("DROP TABLE IF EXISTS pf")
    db.execute("CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY) ENGINE=InnoDB")
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 2")
    try:
        SinkInstance(make_config(table="pf")).start()
    finally:
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 1")
    assert "innodb_flush_log_at_trx_commit is 2" in caplog.text


def test_sink_works_with_least_privilege_grants(spark, db, mariadb, make_config):
    """sql/grants.sql, applied to this database: a whole batch goes through."""
    from wal_sink.mysql.tables import init_db

    for t in ("kpxxb_hzb", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.run_sql_file("demo_kpxxb_hzb.sql")
    db.run_sql_file("wal_sink_tables.sql")
    url = documented_user(db, "minimal")
    config = make_config(
        table="kpxxb_hzb", key=["swjg_dm", "fpzt"], merge={"hjje": "add", "fs": "add"}
    )
    config = replace(config, mysql=replace(config.mysql, url=url))
    instance = SinkInstance(config)
    committer = instance.start()
    stage(
        spark.createDataFrame(
            [("11101", "0", Decimal("9.50"), 2)],
            "swjg_dm STRING, fpzt STRING, hjje DECIMAL(20,2), fs BIGINT",
        ),
        WalWriter(config.wal_path, "s1"),
        0,
    )
    assert committer.apply(0).rows == 1
    assert committer.apply(0, force=True).rows == 1
    assert db.rows("SELECT hjje, fs FROM kpxxb_hzb") == [(Decimal("19.00"), 4)]
    init_db(instance.engine, config.mysql)  # finds the tables, needs no CREATE grant


def test_password_never_in_logs_errors_or_status(
    spark, db, target, make_config, caplog, tmp_path
):
    import logging
    import os
    import subprocess
    import sys

    from devtools.mariadb import SINK_PASSWORD

    config = make_config(table="acct")
    caplog.set_level(logging.DEBUG)
    staged(spark, config, amounts(2))[1].apply(0)
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'[sink]\nid = "s1"\n[wal]\npath = "{config.wal_path}"\n'
        f'[mysql]\nurl = "{db.url}"\ntable = "acct"\nkey = ["k"]\n'
    )
    wal_sink = str(Path(sys.executable).with_name("wal-sink"))
    outputs = [
        subprocess.run(
            [wal_sink, "-v", "-c", str(toml), *args],
            capture_output=True,
            text=True,
            env=os.environ,
        )
        for args in (["status", "--json"], ["status"], ["recover"], ["inspect", "0"])
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    bad = replace(config, mysql=replace(config.mysql, table="no_such_table"))
    with pytest.raises(TerminalError) as info:
        SinkInstance(bad).start()
    seen = caplog.text + str(info.value) + "".join(o.stdout + o.stderr for o in outputs)
    assert SINK_PASSWORD not in seen
    assert repr(SinkInstance(config).engine.url).count("***") == 1


def test_tls_options_reach_the_driver(db, target, make_config, tmp_path):
    from wal_sink.errors import ConfigError
    from wal_sink.mysql.engine import make_engine

    config = make_config(table="acct")
    missing_ca = tmp_path / "no-such-ca.pem"
    engine = make_engine(replace(config.mysql, tls={"ssl_ca": str(missing_ca)}))
    with pytest.raises(ConfigError, match="cannot load the TLS files"):
        engine.connect()  # PyMySQL loads the CA before connecting
    with make_engine(config.mysql).connect():  # the same URL connects without it
        pass


def test_preflight_accepts_every_numeric_type_for_add(db, make_config):
    db.execute("DROP TABLE IF EXISTS pf")
    db.execute(
        "CREATE TABLE pf (k VARCHAR(8) PRIMARY KEY, a DOUBLE, b FLOAT, c DECIMAL(9,2),"
        " d TINYINT, v DATETIME(6)) ENGINE=InnoDB"
    )
    merge = {c: "add" for c in "abcd"}
    config = make_config(table="pf", merge=merge, version_column="v")
    engine = make_engine(config.mysql)
    try:
        table = reflect_target(engine, "pf")
        assert preflight(engine, config, config.mysql.target, table) == []
    finally:
        engine.dispose()
    instance = SinkInstance(config)
    try:
        epoch = instance.start().epoch  # the lease is taken: nothing refused
    finally:
        instance.close()
    assert db.rows("SELECT sink_id, epoch FROM wal_sink_lease") == [("s1", epoch)]
