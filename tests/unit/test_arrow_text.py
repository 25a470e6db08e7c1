"""Text rendered in Arrow must be exactly what MySQL reads back as the same values."""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pyarrow as pa

from wal_sink.mysql.arrow_text import finite, renderable, sql_rows, tsv


def batch(**columns) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_sql_literals_escape_quotes_backslashes_and_control_characters():
    b = batch(
        s=[
            "it's",
            'say "hi"',
            "back\\slash",
            "nul\0",
            "a\nb\rc\x1a",
            "50% %s",
            "",
            None,
            "ü€😀",
        ]
    )
    (values,) = sql_rows(b, ["s"], 10_000)
    assert values == (
        "('it\\'s'),('say \\\"hi\\\"'),('back\\\\slash'),('nul\\0'),"
        "('a\\nb\\rc\\Z'),('50% %s'),(''),(NULL),('ü€😀')"
    )


def test_sql_literals_of_numbers_dates_and_times():
    b = batch(
        i=[1, None],
        d=pa.array([Decimal("-1.50"), Decimal("2.00")], pa.decimal128(6, 2)),
        f=[0.1, 1e20],
        flag=[True, False],
        day=[date(2026, 1, 2), None],
        at=pa.array(
            [datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc), None],
            pa.timestamp("us", tz="UTC"),
        ),
    )
    assert sql_rows(b, ["i", "d", "f", "flag", "day", "at"], 10_000) == [
        "(1,-1.50,0.1,1,'2026-01-02','2026-01-02 03:04:05.000006'),"
        "(NULL,2.00,1e+20,0,NULL,NULL)"
    ]


def test_sql_rows_split_by_size_in_order_and_never_split_a_row():
    b = batch(k=[f"key-{i}" for i in range(10)])
    lists = sql_rows(b, ["k"], 30)
    assert len(lists) > 1
    assert ",".join(lists) == ",".join(f"('key-{i}')" for i in range(10))
    assert sql_rows(batch(k=["x" * 100, "y"]), ["k"], 30) == [
        f"('{'x' * 100}')",
        "('y')",
    ]


def test_sql_rows_of_a_slice_start_at_the_slice():
    b = batch(k=["a", "b", "c"]).slice(1)
    assert sql_rows(b, ["k"], 1000) == ["('b'),('c')"]


def test_tsv_escapes_and_marks_nulls():
    b = batch(s=["t\tab", "new\nline\r", "back\\", None], n=[1, 2, None, 4])
    assert tsv(b, ["s", "n"]).to_pybytes() == (
        b"t\\tab\t1\t0\nnew\\nline\\r\t2\t1\nback\\\\\t\\N\t2\n\\N\t4\t3\n"
    )


def test_nan_and_infinity_are_not_rendered_and_binary_has_no_text_form():
    assert finite(batch(f=[1.0, None]), ["f"])
    assert not finite(batch(f=[1.0, float("nan")]), ["f"])
    assert not finite(batch(f=[float("inf")]), ["f"])
    assert renderable(batch(s=["a"], i=[1]).schema)
    assert not renderable(batch(b=[b"\x00"]).schema)


def test_small_decimals_are_plain_digits_as_the_driver_writes_them():
    # Arrow's own text is "0E-18", "1.5E-7": MySQL reads those as DOUBLEs.
    values = [
        Decimal("0E-18"),
        Decimal("0.000000000000000001"),
        Decimal("-0.000000150000000000"),
        Decimal("-0.000000999999999999"),
        Decimal("12.500000000000000000"),
        None,
    ]
    b = batch(d=pa.array(values, pa.decimal128(38, 18)))
    plain = [None if d is None else format(d, "f") for d in values]
    assert sql_rows(b, ["d"], 10_000) == [
        ",".join(f"({'NULL' if p is None else p})" for p in plain)
    ]
    null = "\\N"
    assert tsv(b, ["d"]).to_pybytes().decode().split("\n")[:-1] == [
        f"{null if p is None else p}\t{i}" for i, p in enumerate(plain)
    ]


def test_floats_are_rendered_as_the_double_they_are():
    # A FLOAT's shortest text is another DOUBLE (0.1) or beyond a FLOAT column's
    # range (3.4028235e+38).
    b = batch(f=pa.array([0.1, 3.4028234663852886e38, None], pa.float32()))
    assert sql_rows(b, ["f"], 10_000) == [
        "(0.10000000149011612),(3.4028234663852886e+38),(NULL)"
    ]
