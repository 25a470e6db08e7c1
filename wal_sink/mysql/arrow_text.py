"""Arrow chunks rendered as the text MySQL reads, column by column in pyarrow's C++
kernels rather than value by value in Python: the tab-separated lines of LOAD DATA,
and the rows of a multi-row INSERT's VALUES list.

Rendering every value through PyMySQL was most of the committer's time. Only types
with an unambiguous text form are rendered here (``renderable``); for anything else
the callers go row by row, and PyMySQL renders values one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

TEXT_TYPES = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
    pa.types.is_timestamp,
    pa.types.is_date,
)
UNQUOTED = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    pa.types.is_boolean,
)
# MySQL string literal escapes (as PyMySQL's), backslash first: exact only on a
# session without NO_BACKSLASH_ESCAPES and with utf8mb4 client text, which the
# callers check on each batch's connection (escaping.renders_exactly).
SQL_ESCAPES = (
    ("\\", "\\\\"),
    ("\0", "\\0"),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\x1a", "\\Z"),
    ("'", "\\'"),
    ('"', '\\"'),
)
TSV_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))


def renderable(schema: pa.Schema) -> bool:
    return all(any(check(f.type) for check in TEXT_TYPES) for f in schema)


def finite(chunk: pa.RecordBatch, columns: Sequence[str]) -> bool:
    """False when a float column holds NaN or infinity, which MySQL cannot store."""
    for name in columns:
        column = chunk.column(name)
        if (
            pa.types.is_floating(column.type)
            and not pc.all(
                pc.or_kleene(pc.is_finite(column), pc.is_null(column))
            ).as_py()
        ):
            return False
    return True


def tsv(chunk: pa.RecordBatch, columns: Sequence[str]) -> pa.Buffer:
    """LOAD DATA's default format (NULL as \\N, escapes for \\ tab newline CR), one
    line per row, ending with the row's number in the chunk."""
    fields = [
        pc.fill_null(_escaped(_as_text(chunk.column(c)), TSV_ESCAPES), "\\N")
        for c in columns
    ]
    numbers = pa.array(range(chunk.num_rows), pa.int64()).cast(pa.string())
    fields.append(pc.binary_join_element_wise(numbers, "", "\n"))
    return _concatenated(pc.binary_join_element_wise(*fields, "\t"))


def sql_rows(
    chunk: pa.RecordBatch,
    columns: Sequence[str],
    max_bytes: int,
    constants: Mapping[str, str] | None = None,
) -> list[str]:
    """``(v1,v2,…),(…)`` lists of literals for ``VALUES``, each at most ``max_bytes``
    long unless a single row is longer; a column of ``constants`` is that SQL text
    in every row."""
    fields: list[pa.Array | str] = []
    for name in columns:
        if constants and name in constants:
            fields.append(constants[name])
            continue
        column = chunk.column(name)
        text = _as_text(column)
        if not any(check(column.type) for check in UNQUOTED):
            text = pc.binary_join_element_wise(
                "'", _escaped(text, SQL_ESCAPES), "'", ""
            )
        fields.append(pc.fill_null(text, "NULL"))
    rows = pc.binary_join_element_wise(
        "(", pc.binary_join_element_wise(*fields, ","), "),", ""
    )
    ends = pc.cumulative_sum(pc.binary_length(rows)).to_pylist()
    lists, first, base = [], 0, 0
    for i, end in enumerate(ends):
        if end - base > max_bytes and i > first:
            lists.append(_concatenated(rows.slice(first, i - first)))
            first, base = i, ends[i - 1]
    lists.append(_concatenated(rows.slice(first)))
    return [buf.to_pybytes()[:-1].decode("utf-8") for buf in lists]  # last comma


def _as_text(column: pa.Array) -> pa.Array:
    if pa.types.is_boolean(column.type):
        column = column.cast(pa.int8())
    if pa.types.is_floating(column.type):
        # A FLOAT's shortest text ("0.1", "3.4028235e+38") is another number as a
        # DOUBLE, or out of a FLOAT column's range; the double's text is exact.
        text = column.cast(pa.float64()).cast(pa.string())
        # "-0" is the integer 0 to MySQL; "-0e0" is the double -0.0, as the driver
        # writes it: the server gets the stream's value (MariaDB 10.11 then stores
        # every zero of a DOUBLE column as 0).
        return pc.if_else(pc.equal(text, "-0"), "-0e0", text)
    if pa.types.is_timestamp(column.type) and column.type.tz is not None:
        column = column.cast(pa.timestamp(column.type.unit))  # naive UTC (session TZ)
    if pa.types.is_decimal(column.type):
        return _plain_decimal(column)
    return column.cast(pa.string())


# Arrow writes decimals below 1e-6 in scientific notation ("1.5E-7", "0E-18"), which
# MySQL reads as an approximate DOUBLE literal: rewritten as plain digits.
SCIENTIFIC = r"^(?P<sign>-?)(?P<digit>\d)(?:\.(?P<digits>\d*))?E-(?P<exponent>\d+)$"


def _plain_decimal(column: pa.Array) -> pa.Array:
    """Decimal text as PyMySQL writes it (``format(d, "f")``): every digit of the
    scale, never an exponent."""
    text = column.cast(pa.string())
    scientific = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(scientific).as_py():
        return text
    parts = pc.extract_regex(pc.if_else(scientific, text, None), SCIENTIFIC)
    # the exponent form holds every digit of the unscaled value: left-padded to the
    # scale they are the fraction
    digits = pc.binary_join_element_wise(
        parts.field("digit"), parts.field("digits"), ""
    )
    plain = pc.binary_join_element_wise(
        parts.field("sign"),
        "0.",
        pc.utf8_lpad(digits, width=column.type.scale, padding="0"),
        "",
    )
    return pc.if_else(scientific, plain, text)


def _escaped(column: pa.Array, escapes: tuple[tuple[str, str], ...]) -> pa.Array:
    for raw, escaped in escapes:
        column = pc.replace_substring(column, raw, escaped)
    return column


def _concatenated(lines: pa.Array) -> pa.Buffer:
    """The values of a string array without nulls, back to back: its value buffer
    between the first and the last offset, without a Python string per value."""
    offset_type = pa.int64() if pa.types.is_large_string(lines.type) else pa.int32()
    offsets = pa.Array.from_buffers(
        offset_type, len(lines) + 1, [None, lines.buffers()[1]], offset=lines.offset
    )
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    return lines.buffers()[2].slice(first, last - first)
