"""Whether a target column holds every value of the stream's type as sent, and
which values it would change (docs/merge.md, "Values MySQL would change").

MySQL changes some values on their way into a column narrower than the stream's
type, without an error even in strict mode, and mostly without a note either (seen
on MariaDB 10.11): a DECIMAL rounds extra decimals, DATETIME / TIMESTAMP / TIME(n)
drop fractions of a second, an integer column rounds a fraction, FLOAT keeps about
seven digits of a DOUBLE, a DOUBLE cannot hold every BIGINT, DATE drops the time of
a timestamp, CHAR drops trailing spaces, BINARY(n) pads with zero bytes and ENUM
takes a member of another case. A value that does not fit at all (an integer out of
range, a text too long, a character the character set lacks) is an error in strict
mode instead: its row is set aside like any row MySQL refuses, so none of those is
a narrowing here.

``column_fit`` compares one stream field with its column and returns ``None`` where
every value lands as sent, or a ``Narrowing``: what changes, and a test of which
values would. ``Fit`` holds a stream's narrowings for one table:

- a key, version, order or route column that narrows is refused at start
  (``Fit.refuse``): two keys would become one row, an older version would win;
  a cast in ``transform.sql`` makes the stream fit, so rounding is always the
  user's explicit choice;
- any other column: one warning at start (``Fit.warnings``), and at run time each
  value the column would change is set aside with its reason (``Fit.changed``).
  Where nothing narrows, no row is looked at.

Stream text into a number or time column is held to the column's own form (``1.5``
for a DECIMAL(4,1), ``2001-01-01 00:00:00`` for a DATETIME): MySQL reads other text
as it can, ``'1.5'`` into an INT as 2.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc

from wal_sink.config import Config, Target
from wal_sink.errors import ConfigError
from wal_sink.mysql.target_profile import ColumnFacts

log = logging.getLogger(__name__)

INTEGERS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
TEXTS = frozenset(
    {"varchar", "tinytext", "text", "mediumtext", "longtext", "json", "char", "enum"}
)
BLOBS = frozenset({"varbinary", "tinyblob", "blob", "mediumblob", "longblob", "binary"})
TIMES = frozenset({"datetime", "timestamp", "time"})
DOUBLE_DIGITS = 15
"""Significant decimal digits every DOUBLE holds exactly."""
FLOAT_DIGITS = 6
VALUE_TEXT = 60
"""Longest text of a value quoted in a reason."""
Check = Callable[[pa.Array], pa.Array]
"""A column's values -> True where the target column would change the value (NULL
where the value is NULL)."""


@dataclass(frozen=True)
class Narrowing:
    """A column that may change some values of the stream's type."""

    column: str
    """The target column's name."""
    column_type: str
    """As the server shows it, e.g. ``decimal(12,2)``."""
    stream_type: str
    what: str
    """What the column does to such values, e.g. "rounds to 2 decimals"."""
    fix: str
    """A column type that holds them, or the cast that makes the stream fit."""
    check: Check | None
    """Which values change; None where the sink cannot tell (the column is then
    refused as a key and said at start, and its values are left to MySQL)."""
    key_safe: bool = False
    """Keys that become equal here were equal keys already (CHAR's trailing spaces
    under a PAD SPACE collation, as in a VARCHAR): no refusal as a key."""


ROLES = {
    "key": "a key column: two stream keys could become one row",
    "version": "the version column: an older record could win over a newer one",
    "order": "the cdc.order_by column: rows could land in another order",
    "route": "the route column: a row could land in another table",
}


@dataclass(frozen=True)
class Fit:
    """What one table's columns do to a stream's values."""

    table: str
    schema: pa.Schema
    """The stream's (or a chunk's), whose fields were compared."""
    narrowings: tuple[tuple[str, Narrowing], ...]
    """(stream column, its narrowing), in stream order."""
    roles: tuple[tuple[str, str], ...] = ()
    """(stream column, role) of the columns a narrowing refuses (ROLES)."""
    _checked: tuple[tuple[str, Narrowing], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        checked = tuple((c, n) for c, n in self.narrowings if n.check is not None)
        object.__setattr__(self, "_checked", checked)

    def refuse(self) -> None:
        """Raise ConfigError (one line) for a narrowing key, version, order or
        route column."""
        roles = dict(self.roles)
        for name, narrowing in self.narrowings:
            role = roles.get(name)
            if role is None or (role == "key" and narrowing.key_safe):
                continue
            raise ConfigError(
                f"column {narrowing.column} of table {self.table} is "
                f"{narrowing.column_type}, which {narrowing.what} of the stream's "
                f"{narrowing.stream_type}; it is {ROLES[role]}. Make it "
                f"{narrowing.fix}, or cast the stream's column in transform.sql to "
                "the column's type"
            )

    def warnings(self) -> list[str]:
        """One line per column whose values may change (said at start)."""
        return [
            f"column {n.column} of table {self.table} is {n.column_type}, which "
            f"{n.what} of the stream's {n.stream_type}: "
            + (
                "a value it would change is set aside, not written"
                if n.check is not None
                else "MySQL converts the values as it does, unchecked"
            )
            + f" (make it {n.fix} to take every value)"
            for _, n in self.narrowings
        ]

    def changed(
        self, chunk: pa.RecordBatch, skip: pa.Array | None = None
    ) -> dict[int, str]:
        """Rows of ``chunk`` holding a value its column would change, with the
        reason; ``skip`` marks rows not to look at (CDC deletes, which send their
        key and version only)."""
        found: dict[int, list[str]] = {}
        for name, narrowing in self._checked:
            if name not in chunk.schema.names:
                continue
            values = chunk.column(name)
            hit = pc.fill_null(narrowing.check(values), False)
            if skip is not None:
                hit = pc.and_(hit, pc.invert(pc.fill_null(skip, False)))
            for i in pc.indices_nonzero(hit).to_pylist():
                found.setdefault(i, []).append(
                    f"{_shown(values[i].as_py())} in column {narrowing.column} "
                    f"({narrowing.column_type}), which {narrowing.what}"
                )
        return {
            i: "; ".join(parts) + ": set aside rather than written changed"
            for i, parts in found.items()
        }


def table_fit(
    table: str,
    schema: pa.Schema,
    columns: dict[str, ColumnFacts],
    roles: Iterable[tuple[str, str]] = (),
) -> Fit:
    """The fit of ``schema``'s fields into the table's ``columns`` (by lower-case
    name; fields the table lacks are left out). ``roles``: (stream column, role)."""
    narrowings = []
    for f in schema:
        facts = columns.get(f.name.lower())
        found = column_fit(f.type, facts) if facts is not None else None
        if found is not None:
            narrowings.append((f.name, found))
    names = {n for n, _ in narrowings}
    lower = {n.lower(): n for n in names}  # names ignore case, as MySQL's do
    roles = tuple((lower[c.lower()], r) for c, r in roles if c.lower() in lower)
    return Fit(table, schema, tuple(narrowings), roles)


def column_fit(kind: pa.DataType, facts: ColumnFacts) -> Narrowing | None:
    """What ``facts``' column does to values of stream type ``kind``; None where
    every value lands as sent (or fails with an error)."""
    column = _Column(facts)
    for rule in RULES:
        found = rule(kind, column)
        if found is not _NEXT:
            return found
    return column.narrowing(
        kind,
        "may convert values",
        f"a column of the stream's type ({stream_type_name(kind)})",
        None,
    )


SPARK_NAMES = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.string(): "STRING",
    pa.large_string(): "STRING",
    pa.binary(): "BINARY",
    pa.large_binary(): "BINARY",
    pa.date32(): "DATE",
}


def stream_type_name(kind: pa.DataType) -> str:
    """The stream's type as Spark names it (the WAL holds it as Arrow)."""
    if kind in SPARK_NAMES:
        return SPARK_NAMES[kind]
    if pa.types.is_decimal(kind):
        return f"DECIMAL({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP" if kind.tz else "TIMESTAMP_NTZ"
    return str(kind)


class _Column:
    """A column's type, parsed from information_schema's COLUMN_TYPE."""

    def __init__(self, facts: ColumnFacts) -> None:
        self.facts = facts
        self.type = facts.data_type
        found = re.match(r"^[a-z ]+\((.*)\)", facts.column_type, re.IGNORECASE)
        self.args = found.group(1) if found else ""

    def number(self, default: int, position: int = 0) -> int:
        parts = [p for p in self.args.split(",") if p.strip().isdigit()]
        return int(parts[position]) if len(parts) > position else default

    @property
    def members(self) -> tuple[str, ...]:
        """An ENUM's members, as written."""
        return tuple(
            m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", self.args)
        )

    @property
    def pads(self) -> bool:
        """Its collation ignores trailing spaces (PAD SPACE)."""
        name = self.facts.collation or ""
        return "nopad" not in name and "_0900_" not in name

    def narrowing(
        self, kind: pa.DataType, what: str, fix: str, check: Check | None, **kw
    ) -> Narrowing:
        return Narrowing(
            self.facts.name,
            self.facts.column_type,
            stream_type_name(kind),
            what,
            fix,
            check,
            **kw,
        )


_NEXT = object()
"""A rule that does not decide the pair."""


def _integers_and_booleans(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
        return _NEXT
    if col.type in INTEGERS | {"decimal", "bit"} | TEXTS - {"enum"}:
        return None  # exact, or out of range: an error
    if col.type in ("float", "double") and not pa.types.is_boolean(kind):
        bits = 24 if col.type == "float" else 53
        if kind.bit_width < bits:
            return None
        return col.narrowing(
            kind,
            f"rounds integers beyond 2^{bits}",
            "BIGINT" if kind.bit_width == 64 else "DOUBLE",
            _python_check(lambda v: _float_of(v, col.type) != v),
        )
    return _NEXT


def _floats(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_floating(kind):
        return _NEXT
    if col.type == "double" and not col.args:
        return None
    if col.type == "float" and not col.args and kind.bit_width <= 32:
        return None
    if col.type in ("float", "double"):
        scale = col.number(-1, 1)
        return col.narrowing(
            kind,
            f"keeps {'about seven digits' if col.type == 'float' else 'its digits'}"
            + (f" and {scale} decimals" if scale >= 0 else ""),
            "DOUBLE",
            _python_check(lambda v: not _same(Decimal(_text(v)), col)),
        )
    if col.type == "decimal":
        scale = col.number(0, 1)
        return col.narrowing(
            kind,
            f"rounds to {scale} decimals",
            "DOUBLE",
            _python_check(lambda v: not _same(Decimal(_text(v)), col)),
        )
    if col.type in INTEGERS:
        return col.narrowing(
            kind,
            "rounds fractions",
            "DOUBLE",
            _python_check(lambda v: v != int(v)),
        )
    return _NEXT


def _decimals(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_decimal(kind):
        return _NEXT
    fix = f"DECIMAL({max(kind.precision, 1)},{kind.scale})"
    if col.type == "decimal":
        scale = col.number(0, 1)
        if scale >= kind.scale:
            return None
        return col.narrowing(
            kind, f"rounds to {scale} decimals", fix, _rounds_to(scale)
        )
    if col.type in INTEGERS:
        if kind.scale == 0:
            return None
        return col.narrowing(kind, "rounds fractions", fix, _rounds_to(0))
    if col.type in ("float", "double"):
        digits = FLOAT_DIGITS if col.type == "float" else DOUBLE_DIGITS
        if kind.precision <= digits and not col.args:
            return None
        return col.narrowing(
            kind,
            f"keeps about {digits + 1} digits",
            fix,
            _python_check(lambda v: not _same(v, col)),
        )
    if col.type in TEXTS - {"enum", "char"}:
        return None
    return _NEXT


def _timestamps(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_timestamp(kind):
        return _NEXT
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[kind.unit]
    if col.type in ("datetime", "timestamp"):
        fsp = col.number(0)
        step = per_second // 10 ** min(fsp, 6) if 10**fsp < per_second else 1
        if step == 1:
            return None
        return col.narrowing(
            kind,
            "drops fractions of a second" + (f" beyond {fsp} digits" if fsp else ""),
            f"{col.type.upper()}(6)",
            _multiple_of(step),
        )
    if col.type == "date":
        return col.narrowing(
            kind,
            "drops the time of day",
            "DATETIME(6)",
            _multiple_of(86_400 * per_second),
        )
    if col.type == "time":
        return col.narrowing(kind, "drops the date", "DATETIME(6)", _every_value)
    return _NEXT


def _dates(kind: pa.DataType, col: _Column) -> object:
    if not pa.types.is_date(kind):
        return _NEXT
    if col.type in ("date", "datetime", "timestamp"):
        return None
    return _NEXT


def _texts(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return _NEXT
    if col.type in TEXTS - {"enum", "char"}:
        return None
    if col.type == "char":
        return col.narrowing(
            kind,
            "drops trailing spaces",
            f"VARCHAR({col.number(1)})",
            lambda values: pc.ends_with(values, " "),
            key_safe=col.pads,
        )
    if col.type == "enum":
        members = pa.array(col.members, pa.string())
        return col.narrowing(
            kind,
            "takes a member that differs in case or trailing spaces",
            "the stream's values as members, exactly",
            lambda values: _kept_null(
                values, pc.invert(pc.is_in(values.cast(pa.string()), members))
            ),
        )
    form = _text_form(col)
    if form is None:
        return _NEXT
    pattern, what = form
    return col.narrowing(
        kind,
        f"reads other text than {what} as it can",
        "the stream's type (cast the text in transform.sql)",
        lambda values: pc.invert(pc.match_substring_regex(values, pattern)),
    )


def _binaries(kind: pa.DataType, col: _Column) -> object:
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return _NEXT
    if col.type in BLOBS - {"binary"}:
        return None
    if col.type == "binary":
        length = col.number(1)
        return col.narrowing(
            kind,
            f"pads shorter values with zero bytes to {length}",
            f"VARBINARY({length})",
            lambda values: pc.less(pc.binary_length(values), length),
        )
    return _NEXT


def _nested(kind: pa.DataType, col: _Column) -> object:
    """Written as JSON text: check_json_targets (row_screen.py) refuses other
    columns than JSON and text."""
    return None if pa.types.is_nested(kind) else _NEXT


RULES = (
    _integers_and_booleans,
    _floats,
    _decimals,
    _timestamps,
    _dates,
    _texts,
    _binaries,
    _nested,
)


def _text_form(col: _Column) -> tuple[str, str] | None:
    """The regular expression of the text a number or time column holds as it is,
    and its name; None for other columns."""
    sign_digits = r"-?(0|[1-9][0-9]*)"
    if col.type in INTEGERS:
        return f"^{sign_digits}$", "an integer"
    if col.type == "decimal":
        scale = col.number(0, 1)
        fraction = rf"(\.[0-9]{{1,{scale}}})?" if scale else ""
        return f"^{sign_digits}{fraction}$", f"a number of at most {scale} decimals"
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    if col.type == "date":
        return f"^{date}$", "a date"
    if col.type in ("datetime", "timestamp"):
        fsp = col.number(0)
        fraction = rf"(\.[0-9]{{1,{fsp}}})?" if fsp else ""
        return f"^{date} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}{fraction}$", "a date and time"
    return None


def _rounds_to(scale: int) -> Check:
    def check(values: pa.Array) -> pa.Array:
        # One digit more: 999.99 rounds to 1000.0, past the stream type's precision.
        digits = values.type.precision + 1
        wider = (
            pa.decimal128(digits, values.type.scale)
            if digits <= 38
            else (pa.decimal256(digits, values.type.scale))
        )
        values = values.cast(wider)
        rounded = pc.round(values, ndigits=scale, round_mode="half_towards_infinity")
        return pc.not_equal(rounded, values)

    return check


def _multiple_of(step: int) -> Check:
    def check(values: pa.Array) -> pa.Array:
        ticks = values.cast(pa.int64())
        return pc.not_equal(pc.multiply(pc.divide(ticks, step), step), ticks)

    return check


def _every_value(values: pa.Array) -> pa.Array:
    return _kept_null(values, pa.array([True] * len(values)))


def _kept_null(values: pa.Array, found: pa.Array) -> pa.Array:
    """``found``, NULL where the value is NULL."""
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), found)


def _python_check(changes: Callable[[object], bool]) -> Check:
    """A check written per value (for pairs that narrow: rare, and never on the
    path of a stream that fits)."""

    def check(values: pa.Array) -> pa.Array:
        return pa.array(
            [None if v is None else changes(v) for v in values.to_pylist()],
            pa.bool_(),
        )

    return check


def _float_of(value: object, kind: str) -> float:
    """``value`` as a FLOAT (single precision) or DOUBLE column stores it."""
    double = float(value)
    if kind == "float":
        return struct.unpack("f", struct.pack("f", double))[0]
    return double


def _text(value: float) -> str:
    """A double's shortest text, as the sink sends it."""
    return repr(float(value))


def _same(value: Decimal, col: _Column) -> bool:
    """Whether the number ``value`` reads back as itself from a DECIMAL, FLOAT or
    DOUBLE column (a FLOAT's or DOUBLE's value read as its shortest text)."""
    if not value.is_finite():
        return True  # NaN and infinities are refused by MySQL: an error
    if col.type == "decimal" or col.args:
        scale = col.number(0 if col.type == "decimal" else -1, 1)
        if scale >= 0 and value != round(value, scale):
            return False
        if col.type == "decimal":
            return True
    try:
        if col.type == "float":
            return _shortest_single(_float_of(value, "float")) == value
        return Decimal(repr(float(value))) == value
    except (InvalidOperation, OverflowError):
        return True  # out of the column's range: an error


def _shortest_single(single: float) -> Decimal:
    """The shortest decimal that is the single-precision value ``single``."""
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if _float_of(float(text), "float") == single:
            return Decimal(text)
    return Decimal(repr(single))


def _shown(value: object) -> str:
    """A value in a reason: text and bytes quoted, other values as they read."""
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    return text if len(text) <= VALUE_TEXT else text[: VALUE_TEXT - 1] + "…"


def roles_of(config: Config, target: Target) -> list[tuple[str, str]]:
    """(column, role) of ``target``'s key, version, order and route columns."""
    named = [
        (target.version_column, "version"),
        (config.cdc.order_by if config.cdc else None, "order"),
        (config.mysql.route_column, "route"),
    ]
    return [(k, "key") for k in target.key] + [(c, r) for c, r in named if c]


_said: set[tuple[str, str]] = set()
"""Warnings said in this process: the job's start and its committer's first batch
(or a follower's every schema) find the same narrowings."""


def say_warnings(sink_id: str, fit: Fit) -> None:
    """Log each of ``fit``'s warnings, once per process."""
    for warning in fit.warnings():
        if (sink_id, warning) not in _said:
            _said.add((sink_id, warning))
            log.warning("sink %s: %s", sink_id, warning)
