"""The MySQL type of each stream column the sink creates, on MariaDB and MySQL 8
(where they differ: the binary NO PAD collation's name)."""

import pyarrow as pa
import pytest

from wal_sink.errors import ConfigError
from wal_sink.mysql.column_types import Dialect, mysql_type, text_key_bytes

MARIADB, MYSQL8 = Dialect(mariadb=True), Dialect(mariadb=False)


@pytest.mark.parametrize(
    "kind, mapped",
    [
        (pa.int8(), "TINYINT"),
        (pa.int16(), "SMALLINT"),
        (pa.int32(), "INT"),
        (pa.int64(), "BIGINT"),
        (pa.float32(), "FLOAT"),
        (pa.float64(), "DOUBLE"),
        (pa.decimal128(38, 10), "DECIMAL(38,10)"),
        (pa.bool_(), "BOOLEAN"),
        (pa.binary(), "LONGBLOB"),
        (pa.date32(), "DATE"),
        (pa.timestamp("us", tz="UTC"), "DATETIME(6)"),
        (pa.timestamp("us"), "DATETIME(6)"),
    ],
)
def test_a_scalar_maps_to_the_type_that_holds_every_value(kind, mapped):
    field = pa.field("c", kind)
    assert mysql_type(field, MARIADB) == mysql_type(field, MYSQL8) == mapped


@pytest.mark.parametrize(
    "dialect, collation", [(MARIADB, "utf8mb4_nopad_bin"), (MYSQL8, "utf8mb4_0900_bin")]
)
def test_text_is_utf8mb4_with_a_binary_no_pad_collation_on_each_server(
    dialect, collation
):
    text = pa.field("c", pa.string())
    assert (
        mysql_type(text, dialect)
        == f"LONGTEXT CHARACTER SET utf8mb4 COLLATE {collation}"
    )
    nested = pa.field("c", pa.list_(pa.decimal128(10, 2)))
    assert mysql_type(nested, dialect) == mysql_type(text, dialect), "JSON text"


@pytest.mark.parametrize(
    "others, room",
    [
        ([], 3072),
        ([pa.string()], 1536),
        ([pa.int64()], 3064),
        ([pa.int32(), pa.bool_(), pa.date32(), pa.float32()], 3060),
        ([pa.string(), pa.decimal128(38, 0), pa.timestamp("us")], 1523),
        ([pa.decimal128(10, 2)], 3067),
        ([pa.decimal256(65, 30)], 3042),
    ],
)
def test_a_text_key_shares_what_the_other_key_columns_leave_of_innodbs_key(
    others, room
):
    """Widths as MariaDB 10.11 indexes them: the longest VARCHAR each key took
    beside the others was found by creating tables."""
    key = [pa.field("k", pa.string())] + [
        pa.field(f"c{i}", kind) for i, kind in enumerate(others)
    ]
    assert text_key_bytes(key) == room
    text = mysql_type(key[0], MARIADB, key=True, key_bytes=room)
    assert text.startswith(f"VARCHAR({room // 4}) ")
    binary = pa.field("b", pa.binary())
    assert mysql_type(binary, MARIADB, key=True, key_bytes=room) == (
        f"VARBINARY({room})"
    )


@pytest.mark.parametrize(
    "kind, says",
    [
        (pa.duration("us"), "no MySQL type holds every interval"),
        (pa.null(), "a column of NULLs has no type"),
        (pa.time64("us"), "the WAL and MySQL have no type for it"),
    ],
)
def test_a_type_no_column_holds_is_refused_naming_the_column(kind, says):
    with pytest.raises(ConfigError) as info:
        mysql_type(pa.field("when", kind), MARIADB)
    assert says in str(info.value) and "stream column 'when'" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_nested_key_is_refused():
    with pytest.raises(ConfigError, match="cannot hold JSON text"):
        mysql_type(pa.field("k", pa.list_(pa.int64())), MARIADB, key=True)
