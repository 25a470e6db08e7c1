"""Which stream type / column type pairs narrow, which values each would change
(wal_sink/mysql/narrowing.py), and the refusal of a narrowing key, version, order or
route column (value_fit.py). What MariaDB really stores for each verdict is held
in tests/integration/test_value_fit.py."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from wal_sink.errors import ConfigError
from wal_sink.mysql.narrowing import column_fit
from wal_sink.mysql.target_profile import ColumnFacts
from wal_sink.mysql.value_fit import table_fit

UTC = timezone.utc
US = pa.timestamp("us", tz="UTC")


def facts(column_type: str, name: str = "c", collation: str | None = None):
    data_type = column_type.split("(")[0].split(" ")[0]
    return ColumnFacts(name, data_type, column_type, True, None, "", False, collation)


@pytest.mark.parametrize(
    "kind, column_type",
    [
        (pa.int64(), "bigint(20)"),
        (pa.int64(), "int(11)"),  # out of range: an error, not a change
        (pa.int32(), "double"),
        (pa.int16(), "float"),
        (pa.int64(), "decimal(20,0)"),
        (pa.int64(), "varchar(10)"),
        (pa.int64(), "char(10)"),
        (pa.bool_(), "tinyint(1)"),
        (pa.float32(), "float"),
        (pa.float32(), "double"),
        (pa.float64(), "double"),
        (pa.decimal128(12, 2), "decimal(12,2)"),
        (pa.decimal128(12, 2), "decimal(14,4)"),
        (pa.decimal128(12, 2), "decimal(10,2)"),  # fewer digits: out of range
        (pa.decimal128(10, 0), "bigint(20)"),
        (pa.decimal128(15, 3), "double"),
        (pa.decimal128(6, 2), "float"),
        (US, "datetime(6)"),
        (US, "timestamp(6)"),
        (pa.timestamp("ms"), "datetime(3)"),
        (pa.date32(), "date"),
        (pa.date32(), "datetime"),
        (pa.timestamp("ns"), "datetime(6)"),  # INT96: Spark's microseconds
        (pa.string(), "varchar(8)"),  # too long: an error
        (pa.string(), "longtext"),
        (pa.binary(), "varbinary(16)"),
        (pa.binary(), "longblob"),
        (pa.list_(pa.int64()), "longtext"),
    ],
)
def test_a_column_holding_every_value_does_not_narrow(kind, column_type):
    assert column_fit(kind, facts(column_type)) is None


CASES = [
    # (stream type, column type, values that land as sent, values that change)
    (pa.decimal128(12, 4), "decimal(12,2)", [Decimal("1.2300"), Decimal("-5")],
     [Decimal("1.2345"), Decimal("9.9999"), Decimal("-0.0050"),
      Decimal("-99999999.9999")]),  # rounds past the stream type's precision
    (pa.decimal128(38, 4), "decimal(38,2)", [Decimal("1.25")],
     [Decimal("9" * 34 + ".9999")]),
    (pa.decimal128(12, 2), "int(11)", [Decimal("7.00")], [Decimal("1.50")]),
    (pa.decimal128(20, 8), "double", [Decimal("0.1"), Decimal("123456.5")],
     [Decimal("1234567890.12345678"), Decimal("9999999999.99999999")]),
    (pa.decimal128(9, 3), "float", [Decimal("0.5"), Decimal("0.1")],
     [Decimal("123456.789")]),
    (pa.float64(), "float", [0.5, 0.1, 16777216.0], [0.123456789, 16777217.0]),
    (pa.float64(), "decimal(10,2)", [0.1, 12.25, 1e-2], [0.125, 1 / 3]),
    (pa.float64(), "bigint(20)", [3.0, -2.0], [1.5, -0.5]),
    (pa.float64(), "float(7,3)", [1.5], [1.2345]),
    (pa.int64(), "double", [2**53, -(2**53)], [2**53 + 1, 2**63 - 1]),
    (pa.int64(), "float", [2**24, 3], [2**24 + 1]),
    (pa.int32(), "float", [2**24], [2**24 + 1]),
    (US, "datetime", [datetime(2001, 1, 1, 0, 0, 1, tzinfo=UTC)],
     [datetime(2001, 1, 1, 0, 0, 0, 999999, tzinfo=UTC)]),
    (US, "timestamp(3)", [datetime(2001, 1, 1, 0, 0, 1, 5000, tzinfo=UTC)],
     [datetime(2001, 1, 1, 0, 0, 1, 5001, tzinfo=UTC),
      datetime(1969, 12, 31, 23, 59, 59, 500, tzinfo=UTC)]),
    (US, "date", [datetime(2001, 1, 1, tzinfo=UTC)],
     [datetime(2001, 1, 1, 10, tzinfo=UTC)]),
    (US, "time", [], [datetime(2001, 1, 1, tzinfo=UTC)]),
    (pa.string(), "char(5)", ["ab", " ab"], ["ab ", " "]),
    (pa.string(), "enum('a','B')", ["a", "B", "c"], ["A", "b", "a "]),  # c: fails
    (pa.string(), "int(11)", ["0", "-12", "7"], ["1.5", " 1", "+1", "01", "1e2", ""]),
    (pa.string(), "decimal(6,2)", ["1", "1.5", "-0.25"], ["1.255", ".5", "1."]),
    (pa.string(), "datetime", ["2001-01-01 10:00:00"],
     ["2001-01-01 10:00:00.5", "2001-01-01T10:00:00", "2001-1-1 10:00:00"]),
    (pa.string(), "datetime(3)", ["2001-01-01 10:00:00.125"],
     ["2001-01-01 10:00:00.1255"]),
    (pa.string(), "date", ["2001-01-01"], ["2001-01-01 10:00:00"]),
    (pa.binary(), "binary(4)", [b"abcd"], [b"ab", b""]),
]  # fmt: skip


@pytest.mark.parametrize("kind, column_type, fits, changes", CASES)
def test_a_narrow_column_finds_exactly_the_values_it_would_change(
    kind, column_type, fits, changes
):
    narrowing = column_fit(kind, facts(column_type))
    assert narrowing is not None and narrowing.check is not None
    values = pa.array([*fits, *changes, None], kind)
    found = narrowing.check(values).to_pylist()
    assert found == [False] * len(fits) + [True] * len(changes) + [None]


@pytest.mark.parametrize(
    "kind, column_type",
    [
        (pa.int64(), "year(4)"),
        (pa.int64(), "enum('a','b')"),
        (pa.string(), "double"),
        (pa.string(), "set('a','b')"),
        (pa.date32(), "time"),
    ],
)
def test_a_conversion_the_sink_cannot_check_narrows_unchecked(kind, column_type):
    narrowing = column_fit(kind, facts(column_type))
    assert narrowing is not None and narrowing.check is None


def test_a_key_version_or_order_column_that_narrows_is_refused_in_one_line():
    columns = {
        "k": facts("datetime", "k"),
        "v": facts("decimal(10,0)", "v"),
        "seq": facts("float", "seq"),
        "n": facts("decimal(12,2)", "n"),
    }
    schema = pa.schema(
        [("k", US), ("v", pa.decimal128(10, 2)), ("seq", pa.int64()),
         ("n", pa.decimal128(12, 4))]
    )  # fmt: skip
    roles = [("K", "key"), ("v", "version"), ("Seq", "order")]  # in any case
    for role in roles:
        fit = table_fit("t", schema, columns, [role])
        with pytest.raises(ConfigError) as info:
            fit.refuse()
        said = str(info.value)
        assert "\n" not in said
        assert f"column {role[0].lower()} of table t is" in said
        assert "transform.sql" in said
    plain = table_fit("t", schema, columns, [])
    plain.refuse()  # nothing refused: set aside per row instead
    assert len(plain.warnings()) == 4
    assert "column n of table t is decimal(12,2)" in plain.warnings()[3]
    assert "set aside" in plain.warnings()[3]


def test_a_char_key_is_refused_only_under_a_no_pad_collation():
    schema = pa.schema([("k", pa.string())])
    padded = {"k": facts("char(8)", "k", "utf8mb4_general_ci")}
    table_fit("t", schema, padded, [("k", "key")]).refuse()
    no_pad = {"k": facts("char(8)", "k", "utf8mb4_nopad_bin")}
    with pytest.raises(ConfigError, match="column k of table t is char"):
        table_fit("t", schema, no_pad, [("k", "key")]).refuse()


def test_changed_rows_name_the_value_and_skip_deletes():
    schema = pa.schema([("k", pa.int64()), ("d", pa.date32()), ("n", US)])
    columns = {"k": facts("bigint(20)", "k"), "n": facts("date", "n")}
    fit = table_fit("t", schema, columns)
    at = datetime(2001, 1, 1, 10, tzinfo=UTC)
    chunk = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2, 3]),
            pa.array([date(2001, 1, 1)] * 3),
            pa.array([at, None, at], US),
        ],
        schema=schema,
    )
    found = fit.changed(chunk, pa.array([False, False, True]))
    assert list(found) == [0]
    assert "in column n (date), which drops the time of day" in found[0]


def test_where_nothing_narrows_no_row_is_looked_at():
    schema = pa.schema([("k", pa.int64()), ("n", pa.decimal128(12, 2))])
    columns = {"k": facts("bigint(20)", "k"), "n": facts("decimal(12,2)", "n")}
    fit = table_fit("t", schema, columns, [("k", "key")])
    assert fit.narrowings == ()
    assert fit.warnings() == []


def test_an_enum_under_a_binary_collation_sets_aside_only_trailing_spaces():
    """Case counts there: 'A' for 'a' fails (an error), 'a ' is stored as 'a'."""
    narrowing = column_fit(pa.string(), facts("enum('a','b')", "e", "utf8mb4_bin"))
    found = narrowing.check(pa.array(["a", "A", "a ", "c"])).to_pylist()
    assert found == [False, False, True, False]
