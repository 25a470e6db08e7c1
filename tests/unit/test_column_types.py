"""The MySQL type of each stream column the sink creates, on MariaDB and MySQL 8
(where they differ: the binary NO PAD collation's name)."""

import pyarrow as pa
import pytest

from wal_sink.errors import ConfigError
from wal_sink.mysql.column_types import Dialect, mysql_type

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


def test_a_text_key_is_as_long_as_innodb_indexes_shared_by_the_keys_texts():
    one = mysql_type(pa.field("k", pa.string()), MARIADB, key=True, key_texts=1)
    two = mysql_type(pa.field("k", pa.string()), MARIADB, key=True, key_texts=2)
    assert one.startswith("VARCHAR(768) ") and two.startswith("VARCHAR(384) ")
    assert mysql_type(pa.field("k", pa.binary()), MARIADB, key=True) == (
        "VARBINARY(3072)"
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
