"""The canonical text of verify --against on the Arrow side (verify_canonical.py),
held to what MariaDB 10.11 answered for the same values (its side is tested
against it in tests/integration/test_verify_against.py), and SOURCE's forms."""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from wal_sink.errors import ConfigError
from wal_sink.ops.verify_canonical import (
    DECIMAL,
    Canonical,
    arrow_text,
    canonical,
    hashes,
)
from wal_sink.ops.verify_read import Source


@pytest.mark.parametrize(
    ("text", "normalized"),
    [  # MariaDB 10.11: SELECT JSON_NORMALIZE(text)
        (
            '{"b":1,"a":[1.50,"x",true,null,1e2, 0.1, 123456789012345678]}',
            '{"a":[1.5E0,"x",true,null,1.0E2,1.0E-1,1.23456789012345678E17],"b":1.0E0}',
        ),
        (
            '[0, -2.5, -0, 0.0, 10, 1e-7, 12345.678, "\\u00e9\\n\\"q\\u0001/", '
            '{"B":1,"a":2,"\\u00e9":3}, {}, []]',
            '[0.0E0,-2.5E0,0.0E0,0.0E0,1.0E1,1.0E-7,1.2345678E4,"é\\n\\"q\\u0001/",'
            '{"B":1.0E0,"a":2.0E0,"é":3.0E0},{},[]]',
        ),
        (" 3 ", "3.0E0"),
    ],
)
def test_json_text_spelt_as_json_normalize_matches_mariadb(text, normalized):
    c = canonical("doc", "longtext", "utf8mb4_bin", json=True)
    assert arrow_text(c, pa.array([text, None])).to_pylist() == [normalized, None]


def test_decimal_text_by_value_drops_trailing_zeros_only_of_fractions():
    c = Canonical("amount", DECIMAL)
    values = pa.array(
        [Decimal(v) for v in ("1.500", "-0.100", "100.000", "0.000", "7.250")],
        pa.decimal128(12, 3),
    )
    assert arrow_text(c, values).to_pylist() == ["1.5", "-0.1", "100", "0", "7.25"]


def test_timestamp_text_is_the_utc_instant_whatever_its_zone():
    c = canonical("at", "datetime", None, json=False)
    instant = datetime(2024, 3, 1, 12, 0, 0, 5, tzinfo=timezone.utc)
    tokyo = pa.array([instant], pa.timestamp("ms", tz="Asia/Tokyo"))
    naive = pa.array([instant.replace(tzinfo=None)], pa.timestamp("us"))
    assert arrow_text(c, naive).to_pylist() == ["2024-03-01 12:00:00.000005"]
    assert arrow_text(c, tokyo).to_pylist() == ["2024-03-01 12:00:00.000000"]
    as_date = canonical("d", "date", None, json=False)
    late = pa.array([instant + timedelta(hours=13)], pa.timestamp("us", tz="UTC"))
    assert arrow_text(as_date, late).to_pylist() == ["2024-03-02"]


def test_text_folded_as_its_collation_compares():
    values = pa.array(["Ab  ", "ab", None])
    ci = canonical("n", "varchar", "utf8mb4_general_ci", json=False)
    binary = canonical("n", "varchar", "utf8mb4_bin", json=False)
    nopad = canonical("n", "varchar", "utf8mb4_nopad_bin", json=False)
    assert arrow_text(ci, values).to_pylist() == ["ab", "ab", None]
    assert arrow_text(binary, values).to_pylist() == ["Ab", "ab", None]
    assert arrow_text(nopad, values).to_pylist() == ["Ab  ", "ab", None]


def test_hashes_are_crc32_as_mariadb_computes_them():
    # MariaDB: SELECT CRC32('abc'), CRC32('é')
    texts = pa.array(["abc", "é", "xabc", ""]).slice(1, 2)
    assert hashes(pa.array(["abc", "é"])).tolist() == [891568578, 235179326]
    assert hashes(texts).tolist() == [235179326, zlib.crc32(b"xabc")]


def test_source_forms_parse_and_mysql_without_database_refused():
    assert Source.parse("mysql://shop.totals") == Source(
        "mysql://shop.totals", "shop", "totals"
    )
    assert Source.parse("s3a://lake/t").database is None
    several = Source.parse("mysql://shop")
    assert several.of("orders", True).table == "orders"
    assert Source("/lake").of("orders", True).location == "/lake/orders"
    with pytest.raises(ConfigError, match="mysql://DATABASE.TABLE"):
        Source.parse("mysql://")
    with pytest.raises(ConfigError, match="add --table"):
        Source.parse("mysql://shop.totals").of("orders", True)
