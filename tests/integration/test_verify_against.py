"""``wal-sink verify --against SOURCE``: the target against a Delta table (written
with deltalake), a Parquet directory (pyarrow) and a MySQL table, by key in
checksummed chunks. A row another writer changed, one deleted and one added are
each found; values equal in value but spelt otherwise — 1.50 and 1.500, a DATETIME
and the same instant in Tokyo's zone, 'ALICE' and 'alice' under a _ci collation,
JSON with its keys in another order — are not differences."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from tests.helpers import apply_staged, cli, routed_config, write_config
from wal_sink.cli.commands import main
from wal_sink.config import load_config
from wal_sink.exit_status import FINDINGS, OK, USAGE

ROWS = 50
START = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
TOKYO = timezone(timedelta(hours=9))
WAL = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("at", pa.timestamp("us", tz="UTC")),
        ("doc", pa.string()),
    ]
)
SOURCE = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.decimal128(14, 3)),
        ("at", pa.timestamp("us", tz="Asia/Tokyo")),
        ("doc", pa.string()),
    ]
)


def applied_rows() -> list[dict]:
    return [
        {
            "id": i,
            "name": f"name{i}",
            "amount": Decimal(i) + Decimal("0.5"),
            "at": START + timedelta(minutes=i, microseconds=i),
            "doc": json.dumps({"n": i, "v": [Decimal("1.50")]}, default=str).replace(
                '"1.50"', "1.50"
            ),
        }
        for i in range(ROWS)
    ]


def source_rows() -> list[dict]:
    """The same values spelt otherwise."""
    return [
        {
            "id": r["id"],
            "name": r["name"].upper(),
            "amount": r["amount"].quantize(Decimal("0.001")),
            "at": r["at"].astimezone(TOKYO),
            "doc": '{ "v": [1.5], "n": %d }' % r["id"],
        }
        for r in applied_rows()
    ]


def write_source(kind: str, where: Path, rows: list[dict], db, name: str) -> str:
    """``rows`` written as a Delta table, a Parquet directory or a MySQL table;
    returns the SOURCE that names it."""
    table = pa.Table.from_pylist(rows, schema=SOURCE)
    if kind == "delta":
        write_deltalake(str(where), table)
        return str(where)
    if kind == "parquet":
        where.mkdir(parents=True)
        half = len(rows) // 2
        pq.write_table(table.slice(0, half), where / "part-0.parquet")
        pq.write_table(table.slice(half), where / "part-1.parquet")
        return str(where)
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(
        f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, name VARCHAR(16), "
        "amount DECIMAL(14,3), at DATETIME(6), doc LONGTEXT)"
    )
    with db.connect() as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {name} VALUES (%s, %s, %s, %s, %s)",
            [
                (
                    r["id"],
                    r["name"],
                    r["amount"],
                    r["at"].astimezone(timezone.utc).replace(tzinfo=None),
                    r["doc"],
                )
                for r in rows
            ],
        )
        conn.commit()
    return f"mysql://{db.name}.{name}"


@pytest.fixture
def target(db, tmp_path):
    """va(id, name _ci, amount DECIMAL(12,2), at DATETIME(6), doc JSON) filled by
    the sink from a staged batch; returns the config's path."""
    for t in ("va", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE va (id BIGINT PRIMARY KEY, name VARCHAR(16) CHARACTER SET "
        "utf8mb4 COLLATE utf8mb4_general_ci, amount DECIMAL(12,2), at DATETIME(6), "
        "doc JSON) ENGINE=InnoDB"
    )
    path = write_config(tmp_path / "va.toml", db, table="va", sink_id="va", mysql="")
    path.write_text(path.read_text().replace('key = ["k"]', 'key = ["id"]'))
    apply_staged(load_config(path), WAL, applied_rows())
    return path


def verify(path: Path, *args: str):
    return CliRunner().invoke(main, ["-c", str(path), "verify", *args])


@pytest.mark.parametrize("kind", ["delta", "parquet", "mysql"])
def test_verify_against_source_equal_in_value_finds_nothing(target, db, tmp_path, kind):
    source = write_source(kind, tmp_path / "src", source_rows(), db, "va_src")
    db.execute("UPDATE va SET name = 'nàme5 ' WHERE id = 5")  # the collation's =
    r = verify(target, "--against", source, "--chunk-rows", "7")
    assert r.exit_code == OK, r.output
    assert (
        "50 row(s) in the source, 50 in MySQL, 8 chunk(s) of which 1 differ: 0 "
        "missing in MySQL, 0 extra in MySQL, 0 different"
    ) in r.output


@pytest.mark.parametrize("kind", ["delta", "parquet", "mysql"])
def test_verify_against_source_finds_changed_deleted_and_added_rows(
    target, db, tmp_path, kind
):
    source = write_source(kind, tmp_path / "src", source_rows(), db, "va_src")
    db.execute("UPDATE va SET amount = 99 WHERE id = 3")  # another writer
    db.execute("UPDATE va SET name = 'other' WHERE id = 40")
    db.execute("DELETE FROM va WHERE id = 17")
    db.execute("INSERT INTO va (id, name) VALUES (1000, 'new')")
    r = verify(target, "--against", source, "--chunk-rows", "7", "--json")
    assert r.exit_code == FINDINGS, r.output
    (report,) = json.loads(r.output)
    assert report["differences"] == [
        {"kind": "missing", "key": {"id": 17}, "columns": []},
        {"kind": "extra", "key": {"id": 1000}, "columns": []},
        {"kind": "different", "key": {"id": 3}, "columns": ["amount"]},
        {"kind": "different", "key": {"id": 40}, "columns": ["name"]},
    ]
    assert (report["source_rows"], report["target_rows"]) == (50, 50)
    assert report["chunks_differing"] == 4


def test_verify_against_for_people_one_line_per_difference(target, db, tmp_path):
    source = write_source("delta", tmp_path / "src", source_rows(), db, "va_src")
    db.execute("UPDATE va SET at = at + INTERVAL 1 SECOND, doc = '[]' WHERE id = 9")
    r = verify(target, "--against", source)
    assert r.exit_code == FINDINGS, r.output
    assert "va: different: id=9 (at, doc)" in r.output
    assert "1 chunk(s) of which 1 differ: 0 missing in MySQL, 0 extra" in r.output


def test_verify_against_where_and_columns_narrow_the_comparison(target, db, tmp_path):
    source = write_source("delta", tmp_path / "src", source_rows(), db, "va_src")
    db.execute("UPDATE va SET amount = 99 WHERE id IN (3, 30)")
    r = verify(target, "--against", source, "--where", "id >= 10", "--json")
    assert r.exit_code == FINDINGS, r.output
    (report,) = json.loads(r.output)
    assert [d["key"] for d in report["differences"]] == [{"id": 30}]
    assert report["source_rows"] == 40
    r = verify(target, "--against", source, "--columns", "name,doc")
    assert r.exit_code == OK, r.output


def test_verify_against_as_a_process_exits_with_its_status(target, db, tmp_path):
    source = write_source("delta", tmp_path / "src", source_rows(), db, "va_src")
    db.execute("DELETE FROM va WHERE id = 0")
    for _ in range(3):
        r = cli(target, "verify", "--against", source)
        assert r.returncode == FINDINGS, r.stderr
        assert "missing in MySQL: id=0" in r.stdout


def test_verify_against_bad_source_or_column_is_one_line(target, db, tmp_path):
    r = cli(target, "verify", "--against", str(tmp_path / "nothing"))
    assert r.returncode == USAGE
    assert r.stderr.startswith("error: --against ") and r.stderr.count("\n") == 1
    source = write_source("delta", tmp_path / "src", source_rows(), db, "va_src")
    r = verify(target, "--against", source, "--columns", "nope")
    assert r.exit_code == USAGE
    assert "--columns nope: not a column of both va and the source" in r.output
    r = verify(target, "--where", "id > 1")
    assert r.exit_code == USAGE
    assert "--where goes with --against" in r.output


def test_verify_against_add_column_refused_unless_left_out(db, tmp_path):
    for t in ("vadd", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE vadd (k VARCHAR(8) PRIMARY KEY, amount DECIMAL(12,2), "
        "label VARCHAR(8))"
    )
    db.execute("INSERT INTO vadd VALUES ('a', 1, 'x')")
    path = write_config(tmp_path / "vadd.toml", db, table="vadd")
    src = tmp_path / "src"
    write_deltalake(
        str(src),
        pa.table({"k": ["a"], "amount": pa.array([Decimal(1)]), "label": ["x"]}),
    )
    r = verify(path, "--against", str(src))
    assert r.exit_code == USAGE
    assert "vadd.amount is an `add` column" in r.output
    r = verify(path, "--against", str(src), "--columns", "label")
    assert r.exit_code == OK, r.output


def test_verify_against_routed_sink_every_table(db, tmp_path):
    for t in ("rta", "rtb", "wal_sink_ack", "wal_sink_ack_tables"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in ("rta", "rtb"):
        db.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(8))")
    path = routed_config(tmp_path / "routed.toml", db, "routedv", ["rta", "rtb"])
    schema = pa.schema(
        [("tbl", pa.string()), ("id", pa.int64()), ("name", pa.string())]
    )
    rows = [
        {"tbl": t, "id": i, "name": f"{t}{i}"} for t in ("rta", "rtb") for i in range(5)
    ]
    apply_staged(load_config(path), schema, rows)
    for t in ("rta", "rtb"):
        mine = [{"id": r["id"], "name": r["name"]} for r in rows if r["tbl"] == t]
        write_deltalake(str(tmp_path / "lake" / t), pa.Table.from_pylist(mine))
    r = verify(path, "--against", str(tmp_path / "lake"))
    assert r.exit_code == OK, r.output
    assert "table rta against" in r.output and "table rtb against" in r.output
    db.execute("DELETE FROM rtb WHERE id = 2")
    r = verify(path, "--against", str(tmp_path / "lake"), "--json")
    assert r.exit_code == FINDINGS, r.output
    found = {t["table"]: t["differences"] for t in json.loads(r.output)}
    assert found == {
        "rta": [],
        "rtb": [{"kind": "missing", "key": {"id": 2}, "columns": []}],
    }
    r = verify(path, "--against", str(tmp_path / "lake" / "rta"), "--table", "rta")
    assert r.exit_code == OK, r.output


def test_verify_against_timestamp_key_in_another_zone_chunks_alike(db, tmp_path):
    for t in ("vts", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE vts (at DATETIME(6) PRIMARY KEY, n INT)")
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC")), ("n", pa.int32())])
    rows = [{"at": START + timedelta(seconds=i), "n": i} for i in range(10)]
    path = write_config(tmp_path / "vts.toml", db, table="vts", sink_id="vts", mysql="")
    path.write_text(path.read_text().replace('key = ["k"]', 'key = ["at"]'))
    apply_staged(load_config(path), schema, rows)
    tokyo = pa.schema([("at", pa.timestamp("us", tz="Asia/Tokyo")), ("n", pa.int32())])
    (tmp_path / "src").mkdir()  # Parquet keeps the zone (Delta's are all UTC)
    pq.write_table(pa.Table.from_pylist(rows, schema=tokyo), tmp_path / "src" / "p")
    r = verify(path, "--against", str(tmp_path / "src"), "--chunk-rows", "3")
    assert r.exit_code == OK, r.output
    assert "4 chunk(s) of which 0 differ" in r.output


def test_verify_against_history_table_refused_in_one_line(db, tmp_path):
    path = write_config(
        tmp_path / "vh.toml",
        db,
        table="vh",
        mysql='version_column = "seq"\nstored_as_scd_type = 2',
        sections='[cdc]\nop_column = "op"\norder_by = "seq"\n',
    )
    r = verify(path, "--against", str(tmp_path))
    assert r.exit_code == USAGE
    assert "vh is a history (stored_as_scd_type = 2)" in r.output
    assert r.output.count("\n") == 1


@pytest.mark.parametrize("kind", ["delta", "mysql"])
def test_verify_against_large_chunks_narrowed_to_the_rows_that_differ(
    db, tmp_path, kind
):
    for t in ("vn", "vn_src", "wal_sink_ack"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute("CREATE TABLE vn (id BIGINT PRIMARY KEY, v INT) ENGINE=InnoDB")
    db.execute("INSERT INTO vn SELECT seq, seq FROM seq_0_to_4999")
    if kind == "delta":
        source = str(tmp_path / "src")
        ids = list(range(5000))
        write_deltalake(source, pa.table({"id": ids, "v": pa.array(ids, pa.int32())}))
    else:
        db.execute("CREATE TABLE vn_src AS SELECT * FROM vn")
        db.execute("ALTER TABLE vn_src ADD PRIMARY KEY (id)")
        source = f"mysql://{db.name}.vn_src"
    changed, deleted, added = [5, 1234, 1299, 3001, 4999], [0, 2500, 4321], [-5, 7000]
    db.execute(f"UPDATE vn SET v = -1 WHERE id IN {tuple(changed)}")
    db.execute(f"DELETE FROM vn WHERE id IN {tuple(deleted)}")
    db.execute("INSERT INTO vn VALUES (-5, 0), (7000, 0)")
    path = write_config(tmp_path / "vn.toml", db, table="vn", sink_id="vn", mysql="")
    path.write_text(path.read_text().replace('key = ["k"]', 'key = ["id"]'))
    r = verify(path, "--against", source, "--chunk-rows", "2000", "--json")
    assert r.exit_code == FINDINGS, r.output
    (report,) = json.loads(r.output)
    found = {(d["kind"], d["key"]["id"]) for d in report["differences"]}
    assert found == (
        {("different", i) for i in changed}
        | {("missing", i) for i in deleted}
        | {("extra", i) for i in added}
    )
    assert (report["chunks"], report["chunks_differing"]) == (3, 3)


def test_verify_against_source_with_a_key_twice_refused_in_one_line(target, tmp_path):
    rows = source_rows()
    write_deltalake(
        str(tmp_path / "src"), pa.Table.from_pylist([*rows, rows[7]], schema=SOURCE)
    )
    r = verify(target, "--against", str(tmp_path / "src"))
    assert r.exit_code == USAGE
    assert "the source holds the key (7,) more than once" in r.output
