"""How the tombstone read declares the target's key and version types to JSON_TABLE,
and writes values into its JSON document."""

from datetime import date, datetime
from decimal import Decimal

import pytest

from wal_sink.errors import ConfigError
from wal_sink.mysql.tombstone_probe import _declare, _hex, _json_value


@pytest.mark.parametrize(
    "column, declared, expr",
    [
        (
            ("bigint", "bigint(20) unsigned", None, None, None),
            "bigint(20) unsigned",
            "{}",
        ),
        (("decimal", "decimal(12,2)", None, None, None), "decimal(12,2)", "{}"),
        (("timestamp", "timestamp(6)", None, None, None), "datetime(6)", "{}"),
        (
            ("varchar", "varchar(16)", "utf8mb4", "utf8mb4_general_ci", 16),
            "varchar(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
            "{}",
        ),
        (
            ("binary", "binary(16)", None, None, 16),
            "VARCHAR(34) CHARACTER SET ascii",
            "CAST(UNHEX({}) AS BINARY(16))",
        ),
        (
            ("varbinary", "varbinary(8)", None, None, 8),
            "VARCHAR(18) CHARACTER SET ascii",
            "UNHEX({})",
        ),
    ],
)
def test_key_and_version_types_are_declared_as_the_target_has_them(
    column, declared, expr
):
    got = _declare("k", *column)
    assert got[:2] == (declared, expr)


@pytest.mark.parametrize(
    "column",
    [
        ("enum", "enum('a','b')", "utf8mb4", "utf8mb4_general_ci", 1),
        ("text", "text", "utf8mb4", "utf8mb4_general_ci", 65535),
        ("int", "int(11)) AS x, (SELECT 1", None, None, None),
        ("varchar", "varchar(8)", "utf8mb4", "utf8mb4_bin PATH '$' --", 8),
    ],
)
def test_types_a_tombstone_cannot_match_exactly_are_refused_by_name(column):
    with pytest.raises(ConfigError, match="column k is .* a tombstone cannot match"):
        _declare("k", *column)


def test_values_are_written_as_mysql_converts_them_on_insert():
    assert _json_value(Decimal("1.50")) == "1.50"
    assert _json_value(datetime(2026, 1, 2, 3, 4, 5, 600000)) == (
        "2026-01-02 03:04:05.600000"
    )
    assert _json_value(date(2026, 1, 2)) == "2026-01-02"
    assert _json_value(True) == 1 and _json_value(7) == 7
    assert _json_value(float("nan")) is None and _json_value(Decimal("NaN")) is None
    assert _hex(b"\x00\xff") == "00ff" and _hex("é") == "c3a9" and _hex(None) is None
