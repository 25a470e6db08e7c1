"""The tests of which values a narrow column would change (narrowing.py): each
takes a column's values and gives True where the column would store another value,
NULL where the value is NULL. Vectorized in Arrow where it can be; per value for
the pairs that narrow rarely (never on the path of a stream that fits)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc

Check = Callable[[pa.Array], pa.Array]
"""A column's values -> True where the target column would change the value (NULL
where the value is NULL)."""


def rounds_to(scale: int) -> Check:
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


def multiple_of(step: int) -> Check:
    def check(values: pa.Array) -> pa.Array:
        ticks = values.cast(pa.int64())
        return pc.not_equal(pc.multiply(pc.divide(ticks, step), step), ticks)

    return check


def every_value(values: pa.Array) -> pa.Array:
    return kept_null(values, pa.array([True] * len(values)))


def kept_null(values: pa.Array, found: pa.Array) -> pa.Array:
    """``found``, NULL where the value is NULL."""
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), found)


def per_value(changes: Callable[[object], bool]) -> Check:
    """A check written per value (for pairs that narrow: rare, and never on the
    path of a stream that fits)."""

    def check(values: pa.Array) -> pa.Array:
        return pa.array(
            [None if v is None else changes(v) for v in values.to_pylist()],
            pa.bool_(),
        )

    return check


def stored_as(value: object, kind: str) -> float:
    """``value`` as a FLOAT (single precision) or DOUBLE column stores it."""
    double = float(value)
    if kind == "float":
        return struct.unpack("f", struct.pack("f", double))[0]
    return double


def double_text(value: float) -> str:
    """A double's shortest text, as the sink sends it."""
    return repr(float(value))


def reads_back(value: Decimal, kind: str, scale: int | None) -> bool:
    """Whether the number ``value`` reads back as itself from a column of ``kind``
    (decimal, float or double) that keeps ``scale`` decimals (None: as many as its
    type holds), a FLOAT's or DOUBLE's value read as its shortest text."""
    if not value.is_finite():
        return True  # NaN and infinities are refused by MySQL: an error
    if scale is not None and value != round(value, scale):
        return False
    if kind == "decimal":
        return True
    try:
        if kind == "float":
            return shortest_single(stored_as(value, "float")) == value
        return Decimal(repr(float(value))) == value
    except (InvalidOperation, OverflowError):
        return True  # out of the column's range: an error


def shortest_single(single: float) -> Decimal:
    """The shortest decimal that is the single-precision value ``single``."""
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if stored_as(float(text), "float") == single:
            return Decimal(text)
    return Decimal(repr(single))
