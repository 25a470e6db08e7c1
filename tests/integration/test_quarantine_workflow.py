"""The operator's workflow end to end: a running job sets aside poison records of
several kinds (a value too long for its column, a missing parent row, another key's
unique value, a record Spark cannot parse); `quarantine list` shows them; a retry
before the fix leaves them open with their new reason; the operator fixes the target;
a retry killed with SIGKILL mid-way and run again applies each row once (`add`
totals exact); a further retry changes nothing; what cannot be retried is exported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from decimal import Decimal
from pathlib import Path

from devtools.spark_job import JobProcess
from tests.helpers import JOB, REPO, WAL_SINK, cli, write_config
from wal_sink.config import load_config
from wal_sink.protocol.sink_instance import SinkInstance

FILES = [
    [
        {"k": "a", "org": "o1", "note": "n", "email": "a@x", "amount": "1.00"},
        {"k": "b", "org": "o1", "note": "n", "email": "b@x", "amount": "2.00"},
    ],
    [
        {"k": "a", "org": "o1", "note": "far too long", "email": "a@x", "amount": "10"},
        {"k": "c", "org": "zz", "note": "n", "email": "c@x", "amount": "5.00"},
        {"k": "b", "org": "o1", "note": "n", "email": "b@x", "amount": "3.00"},
    ],
    [
        {"k": "d", "org": "o1", "note": "n", "email": "b@x", "amount": "7.00"},
        "not json {",
    ],
]


def landing(tmp_path: Path) -> Path:
    folder = tmp_path / "landing"
    folder.mkdir()
    for i, records in enumerate(FILES):
        path = folder / f"f{i}.json"
        path.write_text(
            "".join(
                (r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records
            )
        )
        os.utime(path, (1_700_000_000 + i,) * 2)  # batch i, in this order
    return folder


def totals(db) -> dict[str, tuple]:
    return {r[0]: r[1:] for r in db.rows("SELECT k, note, email, amount FROM flow")}


def retry(config: Path, *args: str, env: dict | None = None):
    """`wal-sink quarantine retry --yes` in a session of its own: a kill fault takes
    its process group, not the test's."""
    return subprocess.run(
        [WAL_SINK, "-c", str(config), "quarantine", "retry", "--yes", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def test_poison_records_come_back_once_the_target_is_fixed(db, tmp_path):
    for t in ("flow", "flow_orgs", "wal_sink_ack", "wal_sink_lease"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in ("wal_sink_outbox", "wal_sink_retry"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE flow_orgs (org VARCHAR(8) PRIMARY KEY) ENGINE=InnoDB")
    db.execute("INSERT INTO flow_orgs VALUES ('o1')")
    db.execute(
        "CREATE TABLE flow (k VARCHAR(8) PRIMARY KEY, org VARCHAR(8) NOT NULL, "
        "note VARCHAR(4), email VARCHAR(32) UNIQUE, amount DECIMAL(14,2), "
        "FOREIGN KEY (org) REFERENCES flow_orgs (org)) ENGINE=InnoDB"
    )
    config = write_config(
        tmp_path / "flow.toml",
        db,
        job=JOB,
        source=f"""
[source]
format = "json"
path = "{landing(tmp_path)}"
schema = "k STRING, org STRING, note STRING, email STRING, amount DECIMAL(12,2)"
options = {{ maxFilesPerTrigger = 1 }}""",
        table="flow",
        mysql='merge = { amount = "add" }\nunique_conflicts = "quarantine"',
    )
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    assert totals(db) == {
        "a": ("n", "a@x", Decimal(1)),
        "b": ("n", "b@x", Decimal(5)),
    }

    entries = json.loads(cli(config, "quarantine", "list", "--json").stdout)
    by_kind = sorted((e["kind"], e["state"], e["batch_id"]) for e in entries)
    assert by_kind == [
        ("raw_text", "open", 2),  # set aside in the sink's own batch 2
        ("row", "open", 1),
        ("row", "open", 1),
        ("row", "open", 2),
    ]
    reasons = {e["record"].get("k"): e["reason"] for e in entries}
    assert "1406" in reasons["a"] and "1452" in reasons["c"]
    assert (
        "unique index email (email) already holds its value for the row with k='b'"
        in (reasons["d"])
    )

    # Retried before the fix: refused again, still open, with the new reason.
    r = retry(config)
    assert r.returncode == 1, r.stderr
    assert "not retrying 1 record(s): raw text Spark could not parse" in r.stdout
    assert "3 record(s) were refused again and stay open" in r.stderr
    states = json.loads(cli(config, "quarantine", "list", "--json").stdout)
    assert sorted(e["state"] for e in states) == ["failed", "failed", "failed", "open"]

    # The operator fixes the target.
    db.execute("ALTER TABLE flow MODIFY note VARCHAR(16)")
    db.execute("INSERT INTO flow_orgs VALUES ('zz')")
    db.execute("UPDATE flow SET email = 'b2@x' WHERE k = 'b'")

    # Killed with batch 1's entries committed and batch 2's transaction open.
    r = retry(config, env={"WAL_SINK_FAULT": "retry.before_commit:2"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert totals(db)["a"] == ("far too long", "a@x", Decimal(11))
    assert "d" not in totals(db)

    r = retry(config)
    assert r.returncode == 0, r.stderr
    assert "retrying 1 open record(s) of 1 batch(es): 2" in r.stdout
    assert "batch 2: 1 applied, 0 failed again" in r.stdout
    expected = {
        "a": ("far too long", "a@x", Decimal(11)),
        "b": ("n", "b2@x", Decimal(5)),
        "c": ("n", "c@x", Decimal(5)),
        "d": ("n", "b@x", Decimal(7)),
    }
    assert totals(db) == expected

    r = retry(config)
    assert r.returncode == 0 and "retrying 0 open record(s)" in r.stdout
    assert "3 selected record(s) were retried before" in r.stdout
    assert totals(db) == expected

    status = json.loads(cli(config, "status", "--json").stdout)
    assert (
        status["quarantine_entries"],
        status["quarantine_open"],
        status["quarantine_retried"],
        status["quarantine_failed"],
    ) == (4, 1, 3, 0)
    assert "1 open, 3 retried, of 4 entries" in cli(config, "status").stdout
    instance = SinkInstance(load_config(config))
    instance.start()
    sample = instance.metrics.registry.get_sample_value
    counts = [
        sample(f"wal_sink_quarantine_{name}", {"sink": "flow"})
        for name in ("open", "retried")
    ]
    instance.close()
    assert counts == [1, 3]

    exported = tmp_path / "unparsed.jsonl"
    r = cli(config, "quarantine", "export", "--to", str(exported))
    assert r.returncode == 0 and "exported 1 open record(s)" in r.stdout, r.stderr
    (line,) = exported.read_text().splitlines()
    assert json.loads(line)["kind"] == "raw_text"
    assert json.loads(line)["record"] == {"raw": "not json {"}
